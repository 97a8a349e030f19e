// The budget arithmetic every backend shares (grant_rule.hpp).
#include "spendcap/ledger/grant_rule.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace spendcap {

std::int64_t utc_day(double unix_seconds) {
  return static_cast<std::int64_t>(std::floor(unix_seconds / 86400.0));
}

DayRange period_days(Period period, std::int64_t day) {
  using namespace std::chrono;
  switch (period) {
    case Period::day:
      return {day, day};
    case Period::week: {
      // 1970-01-01 was a Thursday: Monday-based weekday = (day + 3) mod 7, floored.
      std::int64_t weekday = ((day + 3) % 7 + 7) % 7;
      return {day - weekday, day - weekday + 6};
    }
    case Period::month: {
      year_month_day date{sys_days{days{day}}};
      sys_days first{date.year() / date.month() / 1};
      sys_days last{year_month_day_last{date.year(), month_day_last{date.month()}}};
      return {first.time_since_epoch().count(), last.time_since_epoch().count()};
    }
    case Period::total:
      break;
  }
  return {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
}

bool is_stale(double heartbeat_at, Nanos sync, double now) {
  return now - heartbeat_at > to_seconds(stale_after(sync));
}

double reconcile_at(double heartbeat_at, Money ceiling, Money spend, Money rate_per_hour,
                    Nanos shutdown, Nanos sync) {
  double stale_seconds = to_seconds(stale_after(sync));
  if (rate_per_hour.micros <= 0) return heartbeat_at + stale_seconds + to_seconds(shutdown);
  double spending_seconds = to_seconds(time_to_cost(rate_per_hour, ceiling - spend));
  return heartbeat_at + std::max(stale_seconds, spending_seconds + to_seconds(shutdown));
}

RunBudget effective_run_budget(std::optional<Money> budget, const std::vector<BudgetRule>& rules) {
  RunBudget result{budget, std::nullopt};
  for (const BudgetRule& rule : rules) {
    if (rule.max_run && (!result.amount || *rule.max_run < *result.amount)) {
      result.amount = rule.max_run;
      result.lowered_by = rule.scope;
    }
  }
  return result;
}

Money near_term_need(Money spend, Money rate_per_hour, Nanos sync, Money reserve) {
  return spend + cost_of_rounded_up(rate_per_hour, 2 * sync) + reserve;
}

Money fair_share(Money free, std::int64_t other_runs) {
  if (free <= Money{}) return Money{};
  return Money{free.micros / (std::max<std::int64_t>(other_runs, 0) + 2)};
}

GrantDecision decide_grant(Money old_ceiling, Money old_allowed, Money want, Mode mode,
                           const std::vector<ScopeHeadroom>& headrooms, Money need) {
  Money limit = want;
  std::optional<Scope> binding;
  bool fair = false;
  for (const ScopeHeadroom& scope : headrooms) {
    Money scope_limit = scope.headroom;
    bool cut = false;
    if (scope.other_runs && want > old_ceiling) {
      // headroom = free + the run's own ceiling (plan_grant excludes it from the held sum).
      Money free = scope.headroom - old_ceiling;
      if (want - old_ceiling > fair_share(free, *scope.other_runs) && need < scope.headroom) {
        scope_limit = std::max(need, old_ceiling);
        cut = true;
      }
    }
    if (scope_limit < limit) {
      limit = scope_limit;
      binding = scope.scope;
      fair = cut;
    }
  }
  Money allowed = std::max(old_allowed, std::max(limit, Money{}));
  if (allowed >= want) {  // what it held already covers it: nothing limited it
    binding.reset();
    fair = false;
  }
  if (mode == Mode::enforce) return {std::max(old_ceiling, allowed), allowed, binding, fair};
  return {std::max(old_ceiling, want), allowed, binding, fair};
}

}  // namespace spendcap
