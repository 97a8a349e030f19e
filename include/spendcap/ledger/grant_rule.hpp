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
// `other_runs`: on a shared scope (team, experiment, project, user) that a raise is planned on, how
// many other unfinished runs it has; nullopt on the run's own scope (run, job) and when the run
// asks for no more than it holds (nothing to share then).
struct ScopeHeadroom {
  Scope scope;
  Money headroom;
  std::optional<std::int64_t> other_runs;
};
struct GrantDecision {
  Money ceiling;                 // what the run holds from now on
  Money allowed;                 // what enforce mode holds (== ceiling in enforce mode)
  std::optional<Scope> binding;  // the scope with the smallest headroom, when it limited `want`
  // The binding scope is shared and the claim was more than a fair share of it: the run holds its
  // near-term need instead, raised at each heartbeat (the scope still has more).
  bool fair_share = false;
};

// What a run needs ahead to keep running until well past its next heartbeat: its spend, two
// heartbeats (`sync`) of burn and its reserve (spend/trip.hpp's claim_ahead at no horizon).
Money near_term_need(Money spend, Money rate_per_hour, Nanos sync, Money reserve);

// The fair share of a shared scope's free amount (what no run holds) for a run that claims ahead:
// the free amount divided among the scope's runs, this one, and one more to come (so that the
// next run of a sweep started a moment later finds as much). Rounded down.
Money fair_share(Money free, std::int64_t other_runs);

// The one grant rule (admission and raises). allowed = max(old allowed, min(want, every limit)),
// never below 0, where a scope's limit is its headroom, except on a shared scope whose fair share
// is smaller than the raise asked for (want - old ceiling): there the limit is `need` (its spend,
// two heartbeats of burn and its reserve: claim_ahead without the horizon), within the headroom.
// A claim ahead thus never takes more than a fair share of a shared budget, and every run of a
// sweep is admitted while the budget has its need. Enforce mode holds `allowed` (old_allowed ==
// old_ceiling there). Warn mode holds max(old ceiling, want), what it will really spend, and
// keeps `allowed` on its own track, so that it learns when enforce mode would have stopped it.
GrantDecision decide_grant(Money old_ceiling, Money old_allowed, Money want, Mode mode,
                           const std::vector<ScopeHeadroom>& headrooms, Money need = Money{});

}  // namespace spendcap
