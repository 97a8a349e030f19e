#include "spendcap/process/watchdog.hpp"

#include <algorithm>

#include "spendcap/process/escalation.hpp"

namespace spendcap {

void Watchdog::start_kill(TimePoint kill_at, WatchdogStep& step) {
  if (!terminating_) {
    terminating_ = true;
    kill_at_ = kill_at;
    step.terminate = true;
  }
  kill_at_ = std::min(kill_at_, kill_at);
}

WatchdogStep Watchdog::step(TimePoint at) {
  WatchdogStep step;
  if (gone_at_) {
    start_kill(*gone_at_ + orphan_kill_after_, step);
    gone_at_.reset();
  }
  // A stopped supervisor gets no grace: its SIGTERM would have come by now.
  bool stale = at - last_order_ > stale_after_;
  if (deadline_ && !terminating_) {
    if (at >= *deadline_) {
      start_kill(at, step);
    } else if (stale && at >= *deadline_ - orphan_kill_after_) {
      start_kill(*deadline_, step);
    }
  }
  if (terminating_ && at >= kill_at_) {
    step.kill = true;
    // Forks race with the walk: look again shortly until the reaper finds the tree empty.
    kill_at_ = at + kKillRepeat;
  }

  if (terminating_) {
    step.wake = kill_at_;
  } else if (deadline_) {
    TimePoint term_at = *deadline_ - orphan_kill_after_;
    step.wake = at < term_at ? term_at : std::min(*deadline_, last_order_ + stale_after_);
  }
  return step;
}

}  // namespace spendcap
