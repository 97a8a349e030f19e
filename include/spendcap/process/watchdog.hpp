// The guard's watchdog decision (tree_guard.hpp, "The watchdog"), as a pure step: the state the
// guard keeps about the supervisor's orders and the kill under way, and a function of that state
// and the time that says what to do now and when to look again. No clock, no syscall: the guard
// (tree_guard.cpp) reads the orders and the time, acts on the step (terminate_tree, kill_tree from
// escalation.hpp) and sleeps until the wake. Not thread-safe; the guard is single-threaded.
//
// The rules: no process of the tree outlives the deadline (the moment spend reaches the granted
// ceiling): at it the tree is terminated and killed at once. A live supervisor has the tree gone by
// then itself (its SIGKILL comes at or before the deadline), so this acts only when it did not.
// When the orders have stopped for stale_after (the supervisor is SIGSTOPped or hung) the kill path
// starts at deadline - orphan_kill_after, so that SIGKILL at the deadline finds little left. When
// the supervisor is gone (its control pipe at EOF) the tree has orphan_kill_after between SIGTERM
// and SIGKILL. SIGTERM is sent once; SIGKILL is repeated every kKillRepeat until the reaper finds
// the tree empty, and a later order cannot move it back.
#pragma once

#include <optional>

#include "spendcap/base/duration.hpp"

namespace spendcap {

struct WatchdogStep {
  bool terminate = false;  // SIGTERM and SIGCONT to the tree (once per run)
  bool kill = false;       // a SIGKILL round, after `terminate` when both are set
  // When to take the next step if nothing is read before: nullopt = only when an order comes.
  std::optional<TimePoint> wake;
};

class Watchdog {
 public:
  Watchdog(Nanos stale_after, Nanos orphan_kill_after, TimePoint started)
      : stale_after_(stale_after), orphan_kill_after_(orphan_kill_after), last_order_(started) {}

  // An order came at `at` (any order: the supervisor is alive).
  void heard(TimePoint at) { last_order_ = at; }
  // The kill deadline from the last deadline order; nullopt = none (warn mode).
  void set_deadline(std::optional<TimePoint> deadline) { deadline_ = deadline; }
  // The control pipe is at EOF (the supervisor died): the next step starts the kill path.
  void supervisor_gone(TimePoint at) { gone_at_ = at; }

  // What to do at `at`. Each action it returns is done by the caller before the next step.
  WatchdogStep step(TimePoint at);

  bool terminating() const { return terminating_; }

 private:
  void start_kill(TimePoint kill_at, WatchdogStep& step);

  Nanos stale_after_;
  Nanos orphan_kill_after_;
  TimePoint last_order_;
  std::optional<TimePoint> deadline_;
  std::optional<TimePoint> gone_at_;  // consumed by the step that starts the kill
  bool terminating_ = false;
  TimePoint kill_at_{};
};

}  // namespace spendcap
