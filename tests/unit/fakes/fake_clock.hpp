// A clock the test moves: the monotonic clock plus an offset that only advance() changes, and the
// wall clock moved by the same offset. The supervisor's timers are Asio steady_timers on the real
// clock, so a fake clock cannot stop time for it; what it gives a test is that every reading of
// "now" outside those timers (the run host's, the fake guard's event stamps) comes from one place
// the test can move, and that a wait the run asks for (the crash-loop guard's back-off) is
// recorded instead of slept.
#pragma once

#include <sys/time.h>

#include <vector>

#include "spendcap/base/duration.hpp"

namespace spendcap::testing {

class FakeClock {
 public:
  TimePoint now() const { return spendcap::now() + offset_; }
  double unix_seconds() const {
    timeval tv{};
    ::gettimeofday(&tv, nullptr);
    return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6 + to_seconds(offset_);
  }
  void advance(Nanos by) { offset_ += by; }
  // A wait asked of the clock: recorded, and the clock moved past it at once.
  void wait(Nanos duration) {
    waits.push_back(duration);
    advance(duration);
  }

  std::vector<Nanos> waits;

 private:
  Nanos offset_{};
};

}  // namespace spendcap::testing
