// The grant rule and the budget arithmetic every backend shares (pure): periods as UTC day ranges,
// staleness and reconciliation of lost runs, the run budget in effect, and decide_grant, the one
// rule by which admission and heartbeats raise a ceiling.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/ledger/ledger.hpp"

namespace spendcap {

// Days since 1970-01-01 UTC (floor, also before 1970).
std::int64_t utc_day(double unix_seconds);

// The days of the period that contains `day`, both ends included: the day itself, its ISO week
// (Monday to Sunday), its calendar month, or every day for `total`.
struct DayRange {
  std::int64_t first_day = 0, last_day = 0;
};
DayRange period_days(Period period, std::int64_t day);

// Whether a run whose last heartbeat was at `heartbeat_at` is lost at `now`: strictly older than
// stale_after(sync).
bool is_stale(double heartbeat_at, Nanos sync, double now);

// When a lost run can no longer be spending and is charged its ceiling: last heartbeat + the time
// its rate needs to spend the rest of its ceiling + its shutdown time, and never before it is
// stale. At rate 0 (it cannot spend at all): once it is stale and its shutdown time has passed.
double reconcile_at(double heartbeat_at, Money ceiling, Money spend, Money rate_per_hour,
                    Nanos shutdown, Nanos sync);

// The run budget in effect: --budget lowered to the smallest max_run of the run's budgeted scopes
// (a max_run also stands in for a missing --budget). `lowered_by` names the scope whose max_run
// won.
struct RunBudget {
  std::optional<Money> amount;
  std::optional<Scope> lowered_by;
};
RunBudget effective_run_budget(std::optional<Money> budget, const std::vector<BudgetRule>& rules);

// How much one scope could still grant this run: its budget - what every other run spent or holds
// in the period (the run's own ceiling excluded). May be negative after a budget was lowered.
struct ScopeHeadroom {
  Scope scope;
  Money headroom;
};
struct GrantDecision {
  Money ceiling;                 // what the run holds from now on
  Money allowed;                 // what enforce mode holds (== ceiling in enforce mode)
  std::optional<Scope> binding;  // the scope with the smallest headroom, when it limited `want`
};
// The one grant rule (admission and raises). allowed = max(old allowed, min(want, every headroom)),
// never below 0; enforce mode holds `allowed` (old_allowed == old_ceiling there). Warn mode holds
// max(old ceiling, want), what it will really spend, and keeps `allowed` on its own track, so that
// it learns when enforce mode would have stopped it.
GrantDecision decide_grant(Money old_ceiling, Money old_allowed, Money want, Mode mode,
                           const std::vector<ScopeHeadroom>& headrooms);

}  // namespace spendcap
