// The kill path's phases against a fake tree and a fake clock: every step, what it sends, when,
// and what it says.
#include <doctest/doctest.h>

#include <signal.h>

#include <string>
#include <vector>

#include "fakes/fake_kill_path_timer.hpp"
#include "fakes/fake_process_tree.hpp"
#include "spendcap/process/escalation.hpp"
#include "spendcap/supervise/kill_path.hpp"

using namespace spendcap;
using namespace spendcap::testing;
using namespace std::chrono;

namespace {

const TimePoint kTrip = TimePoint(hours(1000));
const ShutdownTimes kTimes{seconds(60), seconds(10)};

struct Rig {
  explicit Rig(int checkpoint_signal = SIGUSR1)
      : timer(kTrip), path(tree, timer, checkpoint_signal, [this](const std::string& line) {
          lines.push_back(line);
        }) {
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

const std::vector<int> kTermCont = {SIGTERM, SIGCONT};

}  // namespace

TEST_CASE("kill path: catchers get the checkpoint signal, then grace, SIGTERM+SIGCONT, SIGKILL") {
  Rig rig;
  rig.tree.add(true);   // the trainer catches SIGUSR1
  rig.tree.add(false);  // a shell wrapper would die of it
  rig.tree.add(true, true);
  CHECK(rig.path.trip(kTrip, kTimes, std::nullopt, "budget:run tripped"));
  CHECK(rig.tree.sent() == std::vector<int>{SIGUSR1});
  CHECK(rig.tree.checkpoint_receivers() == 2);
  CHECK(rig.path.checkpoint_signalled() == 2);
  CHECK_FALSE(rig.path.grace_skipped());
  CHECK(rig.path.phase() == KillPhase::grace);
  CHECK(rig.lines ==
        std::vector<std::string>{"budget:run tripped", "sent SIGUSR1 to 2 processes; grace 1m"});
  rig.timer.advance_to(kTrip + seconds(60) - milliseconds(1));
  CHECK(rig.tree.sent().size() == 1);  // no SIGTERM before the grace ends
  rig.timer.advance_to(kTrip + seconds(60));
  CHECK(rig.path.phase() == KillPhase::terminating);
  CHECK(rig.tree.sent() == std::vector<int>{SIGUSR1, SIGTERM, SIGCONT});
  rig.timer.advance_to(kTrip + seconds(70) - milliseconds(1));
  CHECK(rig.tree.count(SIGKILL) == 0);
  rig.timer.advance_to(kTrip + seconds(70));
  CHECK(rig.path.phase() == KillPhase::killing);
  CHECK(rig.tree.count(SIGKILL) == 1);
}

TEST_CASE("kill path: nobody catches the checkpoint signal: the grace is skipped") {
  Rig rig;
  rig.tree.add(false);
  CHECK(rig.path.trip(kTrip, kTimes, std::nullopt, "stop-order tripped"));
  CHECK(rig.path.grace_skipped());
  CHECK(rig.path.checkpoint_signalled() == 0);
  CHECK(rig.path.phase() == KillPhase::terminating);
  CHECK(rig.tree.sent() == kTermCont);
  CHECK(rig.lines ==
        std::vector<std::string>{"stop-order tripped",
                                 "no process catches SIGUSR1: no checkpoint was taken; grace "
                                 "skipped, terminating now"});
  // Kill-after runs from the trip, not from the end of a grace that never was.
  REQUIRE(rig.timer.armed());
  CHECK(*rig.timer.armed() == kTrip + seconds(10));
}

TEST_CASE("kill path: --checkpoint-signal none skips the grace without signalling catchers") {
  Rig rig(0);
  rig.tree.add(true);
  CHECK(rig.path.trip(kTrip, kTimes, std::nullopt, "budget:run tripped"));
  CHECK(rig.tree.checkpoint_receivers() == 0);
  CHECK(rig.tree.sent() == kTermCont);
  CHECK(rig.said("no checkpoint signal: no checkpoint was taken; terminating now"));
}

TEST_CASE("kill path: the checkpoint written ends the grace early and moves kill-after up") {
  Rig rig;
  rig.path.set_exit_window(Nanos(0));  // no exit window: SIGTERM at once
  rig.tree.add(true, true);
  rig.path.trip(kTrip, kTimes, std::nullopt, "budget:run tripped");
  rig.timer.advance(seconds(5));
  CHECK(rig.path.checkpoint_done());
  CHECK(rig.said("the job wrote its checkpoint: terminating now"));
  CHECK(rig.path.phase() == KillPhase::terminating);
  CHECK(rig.tree.sent() == std::vector<int>{SIGUSR1, SIGTERM, SIGCONT});
  CHECK(rig.path.deadlines().kill_at == kTrip + seconds(15));
  CHECK_FALSE(rig.path.checkpoint_done());  // once only: outside the grace it does nothing
  CHECK(rig.tree.count(SIGTERM) == 1);
  rig.timer.advance_to(kTrip + seconds(15));
  CHECK(rig.tree.count(SIGKILL) == 1);
}

TEST_CASE("kill path: a process that ignores SIGTERM gets SIGKILL after kill-after") {
  Rig rig;
  rig.tree.add(false, /*ignores_term=*/true);
  rig.path.trip(kTrip, kTimes, std::nullopt, "budget:run tripped");
  CHECK_FALSE(rig.tree.empty());  // SIGTERM did nothing
  rig.timer.advance_to(kTrip + seconds(10));
  CHECK(rig.tree.sent() == std::vector<int>{SIGTERM, SIGCONT, SIGKILL});
  CHECK(rig.tree.empty());
}

TEST_CASE("kill path: SIGKILL is repeated every kKillRepeat until the tree is reported empty") {
  Rig rig;
  rig.tree.add(false, true);
  rig.tree.fork_during_kill(3);  // three children forked while the kill walked the tree
  rig.path.trip(kTrip, kTimes, std::nullopt, "budget:run tripped");
  rig.timer.advance_to(kTrip + seconds(10));
  CHECK(rig.tree.count(SIGKILL) == 1);
  CHECK_FALSE(rig.tree.empty());
  REQUIRE(rig.timer.armed());
  CHECK(*rig.timer.armed() == kTrip + seconds(10) + kKillRepeat);
  int rounds = 1;
  while (!rig.tree.empty() && rounds < 100) {
    rig.timer.advance(kKillRepeat);
    ++rounds;
  }
  CHECK(rig.tree.empty());
  CHECK(rig.tree.count(SIGKILL) == 4);
  // Until the reaper says so, the path keeps looking.
  rig.timer.advance(kKillRepeat);
  CHECK(rig.tree.count(SIGKILL) == 5);
  rig.path.done();
  CHECK(rig.path.phase() == KillPhase::done);
  CHECK_FALSE(rig.timer.armed());
  rig.timer.advance(seconds(1));
  CHECK(rig.tree.count(SIGKILL) == 5);
}

TEST_CASE("kill path: a second signal skips ahead one step at a time") {
  Rig rig;
  rig.tree.add(true, true);
  rig.path.trip(kTrip, kTimes, std::nullopt, "signal:SIGTERM tripped");
  CHECK(rig.path.phase() == KillPhase::grace);
  rig.timer.advance(seconds(1));
  rig.path.skip_ahead();
  CHECK(rig.path.phase() == KillPhase::terminating);
  CHECK(rig.tree.sent() == std::vector<int>{SIGUSR1, SIGTERM, SIGCONT});
  CHECK(rig.path.deadlines().kill_at == kTrip + seconds(11));
  rig.path.skip_ahead();
  CHECK(rig.path.phase() == KillPhase::killing);
  CHECK(rig.tree.sent() == std::vector<int>{SIGUSR1, SIGTERM, SIGCONT, SIGKILL});
  CHECK(rig.timer.now() == kTrip + seconds(1));  // at once, not at the deadline
  rig.path.skip_ahead();                         // nothing further to skip to; the repeat goes on
  CHECK(rig.tree.count(SIGKILL) == 1);
}

TEST_CASE("kill path: the main process exiting during the grace ends it") {
  Rig rig;
  rig.tree.add(true);
  rig.tree.add(false, true);
  rig.path.trip(kTrip, kTimes, std::nullopt, "budget:run tripped");
  rig.timer.advance(seconds(3));
  rig.path.main_exited(rig.timer.now(), "exit 0", seconds(10), std::nullopt);
  CHECK(rig.said("the command ended during the grace (exit 0)"));
  CHECK(rig.path.phase() == KillPhase::terminating);
  CHECK(rig.tree.sent() == std::vector<int>{SIGUSR1, SIGTERM, SIGCONT});
  rig.timer.advance_to(kTrip + seconds(13));
  CHECK(rig.tree.count(SIGKILL) == 1);
}

TEST_CASE(
    "kill path: what the main process leaves behind is drained: SIGTERM, kill-after, SIGKILL") {
  Rig rig;
  rig.tree.add(false, true);  // a daemon the command left behind
  rig.path.main_exited(kTrip, "exit 3", seconds(10), std::nullopt);
  CHECK(rig.lines == std::vector<std::string>{
                         "the command ended (exit 3); stopping the processes it left behind"});
  CHECK(rig.path.phase() == KillPhase::draining);
  CHECK(rig.tree.sent() == kTermCont);
  CHECK(rig.path.checkpoint_signalled() == 0);

  // A trip while draining says nothing and only brings SIGKILL closer, never later.
  CHECK_FALSE(rig.path.trip(kTrip + seconds(1), ShutdownTimes{seconds(60), seconds(30)},
                            std::nullopt, "budget:run tripped"));
  CHECK(rig.lines.size() == 1);
  CHECK(rig.path.deadlines().kill_at == kTrip + seconds(10));
  CHECK_FALSE(rig.path.trip(kTrip + seconds(1), kTimes, kTrip + seconds(5), "budget:run tripped"));
  CHECK(rig.path.deadlines().kill_at == kTrip + seconds(4));
  CHECK(rig.tree.count(SIGUSR1) == 0);

  rig.timer.advance_to(kTrip + seconds(4));
  CHECK(rig.path.phase() == KillPhase::killing);
  CHECK(rig.tree.sent() == std::vector<int>{SIGTERM, SIGCONT, SIGKILL});
}

TEST_CASE("kill path: a second signal while draining kills at once") {
  Rig rig;
  rig.tree.add(false, true);
  rig.path.main_exited(kTrip, "killed by SIGINT", seconds(10), std::nullopt);
  rig.path.skip_ahead();
  CHECK(rig.path.phase() == KillPhase::killing);
  CHECK(rig.tree.sent() == std::vector<int>{SIGTERM, SIGCONT, SIGKILL});
}

TEST_CASE("kill path: no deadline passes the moment spend reaches the ceiling") {
  // Spend reaches the ceiling 30 s after the trip: grace 60 s and kill-after 10 s cannot both fit,
  // so the tree must be empty by then, reaping slack included.
  const TimePoint ceiling_at = kTrip + seconds(30);
  const TimePoint last = ceiling_at - kReapingSlack;
  SUBCASE("planned deadlines") {
    Rig rig;
    rig.tree.add(true, true);
    rig.path.trip(kTrip, kTimes, ceiling_at, "signal:SIGTERM tripped");
    CHECK(rig.path.deadlines().term_at <= last);
    CHECK(rig.path.deadlines().kill_at <= last);
    rig.timer.advance_to(last);
    CHECK(rig.tree.count(SIGTERM) == 1);
    CHECK(rig.tree.count(SIGKILL) == 1);
  }
  SUBCASE("a grace ended early cannot push kill-after out") {
    Rig rig;
    rig.tree.add(true, true);
    rig.path.trip(kTrip, kTimes, ceiling_at, "budget:run tripped");
    rig.timer.advance(seconds(25));
    rig.path.checkpoint_done();
    CHECK(rig.path.deadlines().kill_at <= last);
    rig.timer.advance_to(last);
    CHECK(rig.tree.count(SIGKILL) == 1);
  }
  SUBCASE("draining") {
    Rig rig;
    rig.tree.add(false, true);
    rig.path.main_exited(kTrip, "exit 0", seconds(60), ceiling_at);
    CHECK(rig.path.deadlines().kill_at <= last);
    rig.timer.advance_to(last);
    CHECK(rig.tree.count(SIGKILL) == 1);
  }
}

TEST_CASE("kill path: the guard lost: SIGKILL at once on the tree now rooted at spendcap") {
  Rig rig;
  FakeProcessTree orphans;
  orphans.add(false, true);
  rig.path.use_tree(orphans);
  rig.path.kill_now();
  CHECK(rig.path.phase() == KillPhase::killing);
  CHECK(orphans.sent() == std::vector<int>{SIGKILL});
  CHECK(rig.tree.sent().empty());
}

TEST_CASE("escalation: terminate_tree sends SIGTERM then SIGCONT to every member") {
  FakeProcessTree tree;
  tree.add(false, true);
  terminate_tree(tree);
  CHECK(tree.sent() == kTermCont);
  CHECK(kill_tree(tree) == 1);
  CHECK(tree.empty());
}
