// The guard's watchdog decision alone (process/watchdog.hpp): a state and a time in, an action and
// a wake out. The guard's loop around it is tested for real in tests/integration/test_kill_path.py
// and test_faults.py (a SIGKILLed or SIGSTOPped supervisor).
#include "spendcap/process/watchdog.hpp"

#include <doctest/doctest.h>

#include "spendcap/process/escalation.hpp"

using namespace spendcap;
using namespace std::chrono_literals;

namespace {

constexpr Nanos kStale = 3s;
constexpr Nanos kOrphanKill = 500ms;
const TimePoint t0 = TimePoint(1000s);

bool idle(const WatchdogStep& step) {
  return !step.terminate && !step.kill;
}

}  // namespace

TEST_CASE("watchdog: without a deadline it does nothing and sleeps until an order comes") {
  Watchdog dog(kStale, kOrphanKill, t0);
  WatchdogStep step = dog.step(t0 + 1h);  // stale, but nothing to enforce (warn mode)
  CHECK(idle(step));
  CHECK_FALSE(step.wake);
  CHECK_FALSE(dog.terminating());
}

TEST_CASE("watchdog: a live supervisor gets until the deadline; at it the tree is killed") {
  Watchdog dog(kStale, kOrphanKill, t0);
  TimePoint deadline = t0 + 10s;
  dog.set_deadline(deadline);

  WatchdogStep step = dog.step(t0);
  CHECK(idle(step));
  REQUIRE(step.wake);
  CHECK(*step.wake == deadline - kOrphanKill);  // where a stale supervisor would start the kill

  // Fresh ticks: inside the last orphan_kill_after nothing starts early.
  dog.heard(deadline - 1s);
  step = dog.step(deadline - 400ms);
  CHECK(idle(step));
  REQUIRE(step.wake);
  CHECK(*step.wake == deadline);  // the deadline comes before the ticks go stale

  // The deadline: SIGTERM and the first SIGKILL round in one step, then a round every kKillRepeat.
  step = dog.step(deadline);
  CHECK(step.terminate);
  CHECK(step.kill);
  REQUIRE(step.wake);
  CHECK(*step.wake == deadline + kKillRepeat);
  CHECK(dog.terminating());

  step = dog.step(deadline + 5ms);  // woken early (a SIGCHLD): not due yet
  CHECK(idle(step));
  step = dog.step(deadline + kKillRepeat);
  CHECK_FALSE(step.terminate);  // SIGTERM once
  CHECK(step.kill);
}

TEST_CASE(
    "watchdog: a stale supervisor near the deadline: SIGTERM early, SIGKILL at the deadline") {
  Watchdog dog(kStale, kOrphanKill, t0);
  TimePoint deadline = t0 + 10s;
  dog.set_deadline(deadline);
  // No tick since t0: stale from t0 + 3 s on, so it acts at deadline - orphan_kill_after.
  WatchdogStep step = dog.step(deadline - 600ms);
  CHECK(idle(step));
  step = dog.step(deadline - kOrphanKill);
  CHECK(step.terminate);
  CHECK_FALSE(step.kill);
  REQUIRE(step.wake);
  CHECK(*step.wake == deadline);

  step = dog.step(deadline);
  CHECK_FALSE(step.terminate);
  CHECK(step.kill);
}

TEST_CASE("watchdog: fresh ticks keep the kill path off until the deadline (the negative case)") {
  Watchdog dog(kStale, kOrphanKill, t0);
  TimePoint deadline = t0 + 10s;
  dog.set_deadline(deadline);
  dog.heard(deadline - 1s);
  // Same moment as the stale case above: the only difference is the tick.
  CHECK(idle(dog.step(deadline - kOrphanKill)));
  // Ticks that stop short of the deadline: the wake is when they go stale, if that comes first.
  dog.heard(deadline - 5s);
  WatchdogStep step = dog.step(deadline - 4s);
  CHECK(idle(step));
  REQUIRE(step.wake);
  CHECK(*step.wake == deadline - kOrphanKill);
}

TEST_CASE("watchdog: the supervisor gone: SIGTERM at once, SIGKILL orphan_kill_after later") {
  Watchdog dog(kStale, kOrphanKill, t0);
  dog.supervisor_gone(t0 + 1s);
  WatchdogStep step = dog.step(t0 + 1s);
  CHECK(step.terminate);
  CHECK_FALSE(step.kill);
  REQUIRE(step.wake);
  CHECK(*step.wake == t0 + 1s + kOrphanKill);

  step = dog.step(t0 + 1s + kOrphanKill);
  CHECK_FALSE(step.terminate);
  CHECK(step.kill);
  REQUIRE(step.wake);
  CHECK(*step.wake == t0 + 1s + kOrphanKill + kKillRepeat);
}

TEST_CASE("watchdog: an order read after the kill started cannot put it off") {
  Watchdog dog(kStale, kOrphanKill, t0);
  TimePoint deadline = t0 + 10s;
  dog.set_deadline(deadline);
  CHECK(dog.step(deadline).kill);
  // A late deadline order (a raise read from the pipe after the deadline) and a fresh tick.
  dog.heard(deadline + 1ms);
  dog.set_deadline(deadline + 1h);
  WatchdogStep step = dog.step(deadline + kKillRepeat);
  CHECK(step.kill);
  dog.set_deadline(std::nullopt);
  CHECK(dog.step(deadline + 2 * kKillRepeat).kill);
}

TEST_CASE("watchdog: the supervisor gone after a stale SIGTERM brings SIGKILL no later") {
  Watchdog dog(kStale, kOrphanKill, t0);
  TimePoint deadline = t0 + 10s;
  dog.set_deadline(deadline);
  CHECK(dog.step(deadline - kOrphanKill).terminate);  // stale: SIGKILL planned at the deadline
  dog.supervisor_gone(deadline - 100ms);              // EOF: SIGKILL by gone + orphan_kill_after
  WatchdogStep step = dog.step(deadline - 100ms);
  CHECK(idle(step));
  REQUIRE(step.wake);
  CHECK(*step.wake == deadline);  // the earlier of the two
}
