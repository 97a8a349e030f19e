// The meter: a run's spend from its burn rate and the monotonic clock, from the launch until the
// tree is empty (not until spendcap exits: ledger and webhook time after that is not the job's).
// Pure: it keeps no clock of its own; callers pass the time.
#pragma once

#include <optional>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"

namespace spendcap {

class Meter {
 public:
  explicit Meter(Money rate_per_hour) : rate_per_hour_(rate_per_hour) {}

  void launched(TimePoint at) { launched_at_ = at; }
  void tree_empty(TimePoint at) { ended_at_ = at; }

  Money rate_per_hour() const { return rate_per_hour_; }
  std::optional<TimePoint> launched_at() const { return launched_at_; }
  std::optional<TimePoint> ended_at() const { return ended_at_; }

  // Time accrued at `now`: zero before the launch, frozen once the tree is empty.
  Nanos elapsed_at(TimePoint now) const;
  Money spend_at(TimePoint now) const { return cost_of(rate_per_hour_, elapsed_at(now)); }

 private:
  Money rate_per_hour_;
  std::optional<TimePoint> launched_at_;
  std::optional<TimePoint> ended_at_;
};

}  // namespace spendcap
