// `run --estimate-steps N --step-time T`: the run is refused (120) before admission when N x T at
// its burn rate does not fit --budget or what remains of one of its scopes' budgets. The figures
// it reads and prints are the ones `spendcap estimate` (cli/report_commands.cpp) reads and prints.
#pragma once

#include <string>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/run/settings.hpp"

namespace spendcap {

// Throws Error (exit 120) when the estimate does not fit. Nothing when the flags are absent
// (resolve_run_settings refuses one of them alone, 125).
void require_estimate_fits(const RunSettings& settings, Ledger& ledger);

// A usage error of an estimate's flag (125).
Error usage_error(const std::string& what, const std::string& why, const std::string& hint = {});

// A finite number > 0 (or >= 0 with `zero_ok`): "1e9", "0.8", "20e9". Throws naming `flag`.
double parse_number(const std::string& text, const std::string& flag, bool zero_ok = false);

// A duration ("0.8s", "5m") or a bare number of seconds, above 0. Throws naming `flag`.
double seconds_of(const std::string& text, const std::string& flag);

// `value` with `decimals` digits after the point.
std::string fixed(double value, int decimals);

// A budget the estimate must fit, and what remains of it.
struct BudgetFit {
  std::string scope;
  double remaining = 0;
  bool fits = false;
};

// The budgets of `scopes` on the ledger, each with whether `cost` fits what remains of it.
std::vector<BudgetFit> budget_fits(Ledger& ledger, const std::vector<Scope>& scopes, double cost);

}  // namespace spendcap
