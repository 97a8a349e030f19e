// The exit window after $SPENDCAP_CHECKPOINT_DONE: the main process may exit by itself before
// SIGTERM, never past the grace's end (the reserve still holds).
#include <doctest/doctest.h>

#include <signal.h>

#include <string>
#include <vector>

#include "fakes/fake_kill_path_timer.hpp"
#include "fakes/fake_process_tree.hpp"
#include "spendcap/supervise/kill_path.hpp"

using namespace spendcap;
using namespace spendcap::testing;
using namespace std::chrono;

namespace {

const TimePoint kTrip = TimePoint(hours(1000));

struct WindowRig {
  WindowRig()
      : timer(kTrip),
        path(tree, timer, SIGUSR1, [this](const std::string& line) { lines.push_back(line); }) {
    timer.attach(path);
  }
  bool said(const std::string& line) const {
    for (const auto& l : lines) {
      if (l == line) return true;
    }
    return false;
  }
  FakeProcessTree tree;
  FakeKillPathTimer timer;
  std::vector<std::string> lines;
  KillPath path;
};

}  // namespace

TEST_CASE("exit window: the checkpoint written gives the main process 5s before SIGTERM") {
  WindowRig rig;
  rig.tree.add(true);
  rig.path.trip(kTrip, ShutdownTimes{seconds(60), seconds(10)}, std::nullopt, "tripped");
  rig.timer.advance(seconds(5));
  CHECK(rig.path.checkpoint_done());
  CHECK(rig.said("the job wrote its checkpoint: it has 5s to exit by itself before SIGTERM"));
  CHECK(rig.path.phase() == KillPhase::grace);
  rig.timer.advance_to(kTrip + seconds(10) - milliseconds(1));
  CHECK(rig.tree.count(SIGTERM) == 0);
  // A second report of the same file changes nothing.
  CHECK(rig.path.checkpoint_done());
  rig.timer.advance_to(kTrip + seconds(10));
  CHECK(rig.tree.count(SIGTERM) == 1);
  CHECK(rig.path.phase() == KillPhase::terminating);
}

TEST_CASE("exit window: the main process exiting inside it is never sent SIGTERM itself") {
  WindowRig rig;
  rig.tree.add(true);
  rig.path.trip(kTrip, ShutdownTimes{seconds(60), seconds(10)}, std::nullopt, "tripped");
  rig.timer.advance(seconds(1));
  rig.path.checkpoint_done();
  rig.timer.advance(seconds(2));
  CHECK(rig.tree.count(SIGTERM) == 0);
  // What it left behind is terminated then (the fake tree still lists it).
  rig.path.main_exited(rig.timer.now(), "exit 0", seconds(10), std::nullopt);
  CHECK(rig.path.phase() == KillPhase::terminating);
}

TEST_CASE("exit window: never past the end of the grace") {
  WindowRig rig;
  rig.tree.add(true);
  rig.path.trip(kTrip, ShutdownTimes{seconds(3), seconds(10)}, std::nullopt, "tripped");
  rig.timer.advance(seconds(1));
  rig.path.checkpoint_done();
  CHECK(rig.said("the job wrote its checkpoint: it has 2s to exit by itself before SIGTERM"));
  rig.timer.advance_to(kTrip + seconds(3));
  CHECK(rig.tree.count(SIGTERM) == 1);
}
