// The commands around runs: `policy check`, `budgets`, `budgets apply`, `ps`, `stop`. Each returns
// its exit status; errors are thrown as spendcap::Error and printed by main.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/ledger/ledger.hpp"

namespace spendcap {

// Which ledger a command talks to: --ledger, else the policy's, else the default.
struct LedgerChoice {
  std::optional<std::string> policy;  // --policy
  std::optional<std::string> ledger;  // --ledger
  // A verb that only reads (`runs`): a broken ./spendcap.json is warned about and skipped
  // (load_policy_for_reading), not refused.
  bool reading = false;
};

class Ledger;
struct BudgetRule;

// Opens the chosen ledger (replaying this host's spool); `currency`, when given, gets the policy's
// currency (unchanged when --ledger names the ledger and no policy is read); `owner_rules`, when
// given, the budgets `run` would apply to a personal ledger.
std::unique_ptr<Ledger> open_chosen_ledger(const LedgerChoice& choice, std::string* currency,
                                           std::vector<BudgetRule>* owner_rules = nullptr);

// Validates each file; prints every error with its JSON path. 0 when all are valid, else 125.
int policy_check_command(const std::vector<std::string>& files);

// Every policy key, one a line, with the flag that sets it and whether it acts yet.
int policy_keys_command();

// Each budget in its current period: used, % used, held, available, members.
int budgets_command(const LedgerChoice& choice, bool json);

// Makes the ledger's budgets those of `policy_file` (the ledger's owner only).
int budgets_apply_command(const LedgerChoice& choice, const std::string& policy_file);

// Running and lost runs.
int ps_command(const LedgerChoice& choice, bool json);

struct StopRequest {
  std::optional<std::string> team, experiment, project, user, run;
  std::string reason;
  bool clear = false;
  bool list = false;               // --list: print the active stop orders
  std::optional<std::string> job;  // --job KEY: every run of a job key (a multi-node run's nodes)
};

// Places (or clears, or lists) stop orders. --run takes any unique prefix of a running run's id.
// A budget that names members lets only them (and the ledger's owner) stop its runs.
// Places (or clears) a stop order: every running wrapper in scope takes the kill path within one
// sync interval, and new runs in scope are refused until the order is cleared.
int stop_command(const LedgerChoice& choice, const StopRequest& request);

// The ledger a command's --ledger / --policy choose (as budgets, ps and stop open it), its spool
// replayed.
std::unique_ptr<Ledger> open_ledger_for(const LedgerChoice& choice);
// One run: its spend, and what its GPUs did, with a sparkline of utilisation per minute.
int show_command(const LedgerChoice& choice, const std::string& run_id, bool json = false);

}  // namespace spendcap
