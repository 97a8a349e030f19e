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
  // The burn rate's spend plus the checkpoint storage's (none until a size is sampled).
  Money spend_at(TimePoint now) const;

  // Checkpoint storage (--checkpoint-dir): GB held x price per GB-month, a month being 30 days,
  // integrated by left rectangles (each sampled size holds until the next sample, and the last
  // until the tree is empty). A size above `max_gb` is charged as `max_gb`: the declared maximum
  // is what the allocated rate, and so the trip, counts on.
  void charge_storage(Money per_gb_month, double max_gb);
  void storage_sampled(TimePoint at, double gb);
  std::optional<Money> storage_spend_at(TimePoint now) const;
  std::optional<double> storage_peak_gb() const { return storage_peak_gb_; }

 private:
  Money rate_per_hour_;
  std::optional<TimePoint> launched_at_;
  std::optional<TimePoint> ended_at_;
  std::optional<Money> storage_price_;  // per GB-month
  double storage_max_gb_ = 0;
  std::optional<TimePoint> storage_at_;  // the last sample
  double storage_gb_ = 0;                // its size, capped at the maximum
  double storage_micros_ = 0;            // accrued up to the last sample
  std::optional<double> storage_peak_gb_;
};

// The storage allocation of `max_gb` at `per_gb_month` (30-day months), per hour, rounded up.
Money storage_rate_per_hour(Money per_gb_month, double max_gb);
// GB x price per GB-month x time, in micro-units (not rounded).
double storage_micros(Money per_gb_month, double gb, Nanos held);

}  // namespace spendcap
