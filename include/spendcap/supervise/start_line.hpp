// The line a run starts with: its burn rate, budget and reserve, when (and by what) it trips, its
// isolation and its ledger. Pure: computed from the run's terms and what it holds at launch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/run_terms.hpp"

namespace spendcap {

struct StartFacts {
  std::string label;      // "team demo, experiment quickstart"
  std::string isolation;  // "pid namespace", or "none: the job can signal spendcap"
  std::string ledger;     // the ledger in use (its URL or path)
  ShutdownTimes on_trip;  // --grace, --kill-after
  Money reserve;
  TimePoint launched;
  Money ceiling, allowed;
  std::optional<Scope> binding;
  bool fair_share = false;       // Grant::fair_share: binding holds more than the run claimed
  std::vector<ScopeUse> scopes;  // every budgeted scope of the run, from admission
};

// On a shared budget the trip counts the other runs: what they hold, and (with other runs on it)
// no more than an equal part of what no run has spent yet, the fair share each run of a sweep
// ends up with ("trips in ~15s at $0.15 (budget:experiment:sweep, a fair share with 2 other
// runs)"); a run whose grant took all that was free "holds the rest".
// "run 3f2a9c1e started: burn $3.60/h, budget $1.00; trips in 16m39s at $0.9990"; with
// terms.verbose the whole of it: "run 3f2a9c1e started (team demo): burn $3.60/h, budget $1.00,
// reserve ... (grace ...); its budget trips in ...; ceiling ...; isolation: ...; ledger ...".
std::string start_line(const RunTerms& terms, const StartFacts& facts);

// A budget trip's reason: "budget:run", "budget:job:KEY", "budget:team:vision".
std::string budget_reason(const Scope& scope);

}  // namespace spendcap
