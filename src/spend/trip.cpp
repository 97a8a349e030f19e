#include "spendcap/spend/trip.hpp"

#include <sys/wait.h>

#include <algorithm>

#include "spendcap/base/signals.hpp"

namespace spendcap {

Money claim_ahead(Money rate_per_hour, Nanos claim_horizon, Nanos sync, Money reserve) {
  return cost_of_rounded_up(rate_per_hour, std::max(claim_horizon, 2 * sync)) + reserve;
}

Nanos heartbeat_delay(Nanos sync, std::optional<Nanos> until_trip) {
  if (!until_trip || *until_trip <= kAskBeforeTrip) return sync;
  return std::min(sync, *until_trip - kAskBeforeTrip);
}

Money shutdown_reserve(Money rate_per_hour, const ShutdownTimes& times) {
  return cost_of_rounded_up(rate_per_hour, times.total());
}

std::optional<TimePoint> ceiling_reached_time(TimePoint launched, Money rate_per_hour,
                                              Money ceiling) {
  Nanos until = time_to_cost(rate_per_hour, ceiling);
  if (until == Nanos::max()) return std::nullopt;
  return launched + until;
}

std::optional<TimePoint> budget_trip_time(TimePoint launched, Money rate_per_hour, Money ceiling,
                                          Money reserve) {
  if (ceiling <= reserve) return launched;
  return ceiling_reached_time(launched, rate_per_hour, ceiling - reserve);
}

KillDeadlines plan_kill(TimePoint tripped_at, const ShutdownTimes& times,
                        std::optional<TimePoint> empty_by) {
  KillDeadlines deadlines{tripped_at + times.grace, tripped_at + times.grace + times.kill_after};
  if (empty_by) {
    TimePoint latest_kill = std::max(tripped_at, *empty_by - kReapingSlack);
    deadlines.kill_at = std::min(deadlines.kill_at, latest_kill);
    deadlines.term_at =
        std::clamp(deadlines.kill_at - times.kill_after, tripped_at, deadlines.term_at);
  }
  return deadlines;
}

std::vector<double> ThresholdTracker::crossed(Money used, Money amount) {
  std::vector<double> fired;
  if (amount.micros <= 0) return fired;
  while (fired_ < fractions_.size() &&
         static_cast<double>(used.micros) >=
             fractions_[fired_] * static_cast<double>(amount.micros)) {
    fired.push_back(fractions_[fired_++]);
  }
  return fired;
}

std::optional<double> ThresholdTracker::next() const {
  if (fired_ < fractions_.size()) return fractions_[fired_];
  return std::nullopt;
}

ExitCode exit_code_for(const Trip& trip) {
  switch (trip.kind) {
    case TripKind::budget:
      return ExitCode::budget;
    case TripKind::runaway:
    case TripKind::stop_order:
      return ExitCode::runaway;
    case TripKind::ledger_unreachable:
      return ExitCode::ledger_unreachable;
    case TripKind::preemption:
      return ExitCode::preempted;
    case TripKind::signal:
      return static_cast<ExitCode>(shell_status(trip.signal));
  }
  return ExitCode::internal;
}

int command_exit_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return shell_status(WTERMSIG(wait_status));
  return to_int(ExitCode::internal);
}

}  // namespace spendcap
