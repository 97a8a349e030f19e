#include "spendcap/spend/meter.hpp"

#include <algorithm>

namespace spendcap {

Nanos Meter::elapsed_at(TimePoint now) const {
  if (!launched_at_) return Nanos(0);
  TimePoint end = ended_at_ ? std::min(*ended_at_, now) : now;
  return std::max(Nanos(0), std::chrono::duration_cast<Nanos>(end - *launched_at_));
}

}  // namespace spendcap
