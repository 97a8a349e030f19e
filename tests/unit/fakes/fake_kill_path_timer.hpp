// A clock that moves only when the test says so, and the kill path's one timer on it.
#pragma once

#include <algorithm>
#include <optional>

#include "spendcap/supervise/kill_path.hpp"

namespace spendcap::testing {

class FakeKillPathTimer : public KillPathTimer {
 public:
  explicit FakeKillPathTimer(TimePoint start) : now_(start) {}
  void attach(KillPath& path) { path_ = &path; }

  TimePoint now() const override { return now_; }
  void arm(TimePoint at) override { armed_ = at; }
  void cancel() override { armed_.reset(); }
  std::optional<TimePoint> armed() const { return armed_; }

  // Moves the clock to `to`, firing the timer at each armed moment on the way (a moment already
  // past fires at once, as a steady_timer does).
  void advance_to(TimePoint to) {
    while (armed_ && *armed_ <= to) {
      now_ = std::max(now_, *armed_);
      armed_.reset();
      path_->on_timer();
    }
    now_ = std::max(now_, to);
  }
  void advance(Nanos by) { advance_to(now_ + by); }

 private:
  TimePoint now_;
  std::optional<TimePoint> armed_;
  KillPath* path_ = nullptr;
};

}  // namespace spendcap::testing
