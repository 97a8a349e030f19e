#include "spendcap/spend/meter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace spendcap {

Nanos Meter::elapsed_at(TimePoint now) const {
  if (!launched_at_) return Nanos(0);
  TimePoint end = ended_at_ ? std::min(*ended_at_, now) : now;
  return std::max(Nanos(0), std::chrono::duration_cast<Nanos>(end - *launched_at_));
}

namespace {
constexpr double kMonthSeconds = 30.0 * 86400.0;
}

double storage_micros(Money per_gb_month, double gb, Nanos held) {
  double seconds = std::chrono::duration<double>(held).count();
  return static_cast<double>(per_gb_month.micros) * gb * seconds / kMonthSeconds;
}

Money storage_rate_per_hour(Money per_gb_month, double max_gb) {
  return Money{
      static_cast<int64_t>(std::ceil(storage_micros(per_gb_month, max_gb, std::chrono::hours(1))))};
}

Money Meter::spend_at(TimePoint now) const {
  Money spend = cost_of(rate_per_hour_, elapsed_at(now));
  if (auto storage = storage_spend_at(now)) spend += *storage;
  return spend;
}

void Meter::charge_storage(Money per_gb_month, double max_gb) {
  storage_price_ = per_gb_month;
  storage_max_gb_ = max_gb;
}

void Meter::storage_sampled(TimePoint at, double gb) {
  if (!storage_price_ || !launched_at_) return;
  if (ended_at_) at = std::min(at, *ended_at_);
  if (storage_at_ && at > *storage_at_) {
    storage_micros_ += storage_micros(*storage_price_, storage_gb_, at - *storage_at_);
  }
  if (!storage_at_ || at > *storage_at_) storage_at_ = at;
  storage_gb_ = std::clamp(gb, 0.0, storage_max_gb_);
  storage_peak_gb_ = std::max(storage_peak_gb_.value_or(0.0), gb);
}

std::optional<Money> Meter::storage_spend_at(TimePoint now) const {
  if (!storage_price_ || !storage_at_) return std::nullopt;
  TimePoint end = ended_at_ ? std::min(*ended_at_, now) : now;
  double micros = storage_micros_;
  if (end > *storage_at_)
    micros += storage_micros(*storage_price_, storage_gb_, end - *storage_at_);
  // Rounded down: never above what the allocated rate (rounded up) allows.
  return Money{static_cast<int64_t>(std::floor(micros))};
}

}  // namespace spendcap
