// The supervisor's loop driven through its seams: a fake guard (reports in, orders out), a fake
// tree, a scripted ledger and a fake terminal. Heartbeats and grant raises, a refused raise, the
// trip order when two causes race, job control, the guard lost, and how a run finishes.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fakes/fake_guard_link.hpp"
#include "fakes/fake_ledger.hpp"
#include "fakes/fake_process_tree.hpp"
#include "spendcap/supervise/guard_part.hpp"
#include "spendcap/supervise/start_line.hpp"
#include "spendcap/supervise/supervisor.hpp"
#include "test_support.hpp"

using namespace spendcap;
using namespace spendcap::testing;
using namespace std::chrono;

namespace {

// $3.60/h: 1000 micro-dollars a second. With no grace and no kill-after the reserve is the
// reaping slack's second: 1000.
const Money kRate{3'600'000};
const Money kReserve{1000};

// The tree the supervisor owns, over a FakeProcessTree the test keeps.
class TreeView final : public ProcessTree {
 public:
  explicit TreeView(FakeProcessTree& tree) : tree_(tree) {}
  std::vector<ProcStat> members() override { return tree_.members(); }
  int signal_catchers(int signal) override { return tree_.signal_catchers(signal); }
  int signal_all(int signal) override { return tree_.signal_all(signal); }
  int kill_all() override { return tree_.kill_all(); }

 private:
  FakeProcessTree& tree_;
};

class FakeTerminal final : public Terminal {
 public:
  pid_t job_group() override { return 4242; }
  bool spendcap_in_foreground() override { return foreground; }
  void give_to(pid_t group) override { given.push_back(group); }
  void stop_self() override { ++stops; }
  void start_waker(TimePoint at) override { wakers.push_back(at); }
  bool collect_waker() override { return false; }
  bool reaped(pid_t, int) override { return false; }

  bool foreground = true;
  int stops = 0;
  std::vector<pid_t> given;
  std::vector<TimePoint> wakers;
};

class RecordingNotifier final : public Notifier {
 public:
  void notify(const RunEvent& event) override { events.push_back(event); }
  std::vector<RunEvent> events;
};

struct Rig {
  Rig() {
    plan.run_id = "5c0ffee0-0000-4000-8000-000000000000";
    plan.rate_per_hour = kRate;
    plan.interval = milliseconds(10);
    plan.sync = milliseconds(20);
    plan.claim_horizon = seconds(10);
    plan.on_trip = ShutdownTimes{Nanos{}, Nanos{}};
    plan.on_signal = plan.on_trip;
    plan.gpu.enabled = false;
    plan.notifier = &notifier;
    plan.make_tree = [this](pid_t root) {
      roots.push_back(root);
      return std::make_unique<TreeView>(tree);
    };
    tree.add();
    grant(Money{1200});
  }
  ~Rig() { ::close(log_fd); }

  // The first grant: the ceiling, all of it allowed; `binding`: the scope that limited it.
  void grant(Money ceiling, std::optional<Scope> binding = std::nullopt) {
    plan.grant.ceiling = ceiling;
    plan.grant.allowed = ceiling;
    plan.grant.binding = binding;
    ledger->held = plan.grant;
  }

  // `after`: called once the run is over, while the supervisor (and its parts) still exist.
  RunOutcome run(std::function<void(FakeGuardLink&)> script, bool with_ledger = true,
                 std::function<void()> after = {}) {
    auto fake_link = std::make_unique<FakeGuardLink>();
    auto fake_terminal = std::make_unique<FakeTerminal>();
    link = fake_link.get();
    terminal = fake_terminal.get();
    link->on_listen = [script](FakeGuardLink& guard) {
      // Whatever happens, the run ends: past this bound the test fails and the tree is empty.
      guard.when([] { return false; }, [] {}, seconds(10));
      script(guard);
    };
    Reporter reporter(false, false, ::dup(log_fd));
    Supervisor supervisor(plan, std::move(fake_link), std::move(fake_terminal), reporter,
                          with_ledger ? ledger : nullptr);
    RunOutcome outcome = supervisor.run();
    if (after) after();
    terminal_stops = terminal->stops;
    terminal_given = terminal->given;
    wakers = terminal->wakers;
    orders = link->orders;
    kills = link->kills;
    reaps = link->reaps;
    link = nullptr;
    terminal = nullptr;
    return outcome;
  }

  // What spendcap printed, one entry a line, without the "spendcap: " prefix.
  std::vector<std::string> lines() const {
    std::string text;
    char buffer[4096];
    ssize_t n = 0;
    off_t offset = 0;
    while ((n = ::pread(log_fd, buffer, sizeof buffer, offset)) > 0) {
      text.append(buffer, static_cast<size_t>(n));
      offset += n;
    }
    std::vector<std::string> out;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      if (line.rfind("spendcap: ", 0) == 0) out.push_back(line.substr(10));
      start = end + 1;
    }
    return out;
  }
  int lines_with(const std::string& part) const {
    int n = 0;
    for (const std::string& line : lines()) n += line.find(part) != std::string::npos;
    return n;
  }

  SupervisorPlan plan;
  FakeProcessTree tree;
  std::shared_ptr<FakeLedger> ledger = std::make_shared<FakeLedger>();
  RecordingNotifier notifier;
  int log_fd = ::memfd_create("spendcap-lines", MFD_CLOEXEC);
  std::vector<pid_t> roots;
  // While the run goes on (owned by the supervisor).
  FakeGuardLink* link = nullptr;
  FakeTerminal* terminal = nullptr;
  // After the run.
  int terminal_stops = 0;
  std::vector<pid_t> terminal_given;
  std::vector<TimePoint> wakers;
  std::vector<GuardOrder> orders;
  int kills = 0, reaps = 0;
};

bool sent(const FakeProcessTree& tree, int signal) {
  return tree.count(signal) > 0;
}

// This process's inotify instances and the watches they hold (their /proc/self/fdinfo lines).
struct InotifyUse {
  int instances = 0;
  int watches = 0;
};
InotifyUse inotify_use() {
  InotifyUse use;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    if (std::filesystem::read_symlink(entry.path(), error).string() != "anon_inode:inotify") {
      continue;
    }
    ++use.instances;
    std::ifstream info("/proc/self/fdinfo/" + entry.path().filename().string());
    for (std::string line; std::getline(info, line);)
      use.watches += line.rfind("inotify wd:", 0) == 0;
  }
  return use;
}

}  // namespace

TEST_CASE("heartbeats raise the grant: the run goes past its first ceiling without tripping") {
  Rig rig;
  RunOutcome outcome = rig.run([&](FakeGuardLink& guard) {
    guard.launch();
    // Past the first grant's trip (0.2 s): only the raises keep the run going.
    TimePoint past_first_trip = now() + milliseconds(400);
    guard.when([past_first_trip] { return now() > past_first_trip; }, [&] { guard.exit(0, true); });
  });
  CHECK(outcome.reason == "exited");
  CHECK(outcome.status == RunStatus::succeeded);
  CHECK(rig.lines_with("tripped") == 0);
  CHECK_FALSE(sent(rig.tree, SIGTERM));
  std::vector<FakeLedger::Beat> beats = rig.ledger->beats();
  REQUIRE(beats.size() >= 2);
  // The first heartbeat asked for a claim ahead of its spend: 10 s of burn plus the reserve.
  CHECK(beats[0].want.micros > beats[0].spend.micros + 10'000);
  CHECK(outcome.ceiling.micros > 1200);
  // Each grant moved the guard's deadline along.
  CHECK(rig.orders.size() >= 3);
  CHECK(std::count_if(rig.orders.begin(), rig.orders.end(),
                      [](const GuardOrder& o) { return o.kind == GuardOrderKind::deadline; }) >= 2);
}

// The negative control of the case above: without a ledger nothing raises the first grant, and
// the same run trips at its ceiling as a ledger that never answered.
TEST_CASE("without heartbeats the run trips at its first ceiling (ledger-unreachable)") {
  Rig rig;
  RunOutcome outcome = rig.run(
      [&](FakeGuardLink& guard) {
        guard.launch();
        guard.when([&] { return rig.tree.empty(); }, [&] { guard.empty(); });
      },
      false);
  CHECK(outcome.reason == "ledger-unreachable");
  CHECK(outcome.exit_code == to_int(ExitCode::ledger_unreachable));
  CHECK(sent(rig.tree, SIGTERM));
  CHECK(rig.tree.count(SIGCONT) == 1);  // the kill path's own, after SIGTERM
  REQUIRE(outcome.tripped_after_seconds);
  CHECK(*outcome.tripped_after_seconds == doctest::Approx(0.2).epsilon(0.01));
}

TEST_CASE("a refused raise: the binding budget trips the run at what it was allowed") {
  Rig rig;
  Scope team{ScopeKind::team, "vision"};
  rig.ledger->grant = [team](const FakeLedger::Beat&, const Grant& held) {
    Grant g = held;  // nothing more: the team's budget is spent
    g.binding = team;
    return g;
  };
  RunOutcome outcome = rig.run([&](FakeGuardLink& guard) {
    guard.launch();
    guard.when([&] { return rig.tree.empty(); }, [&] { guard.empty(); });
  });
  CHECK(rig.ledger->beats().size() >= 1);
  CHECK(outcome.reason == "budget:team:vision");
  CHECK(outcome.status == RunStatus::killed);
  CHECK(outcome.stopped_by_spendcap);
  CHECK(outcome.exit_code == to_int(ExitCode::budget));
  CHECK(outcome.ceiling == Money{1200});
  REQUIRE(outcome.tripped_after_seconds);
  CHECK(*outcome.tripped_after_seconds == doctest::Approx(0.2).epsilon(0.01));
  CHECK(rig.lines_with("budget:team:vision tripped after") == 1);
  CHECK(rig.lines_with("reaches the ceiling $0.0012") == 1);
}

TEST_CASE("two causes race: the budget trips first, a stop order after it changes nothing") {
  Rig rig;
  rig.grant(Money{1200}, Scope{ScopeKind::run, ""});
  std::atomic<bool> tripped{false};
  rig.ledger->grant = [&](const FakeLedger::Beat&, const Grant& held) {
    Grant g = held;
    // The ledger answers only after the budget's trip: its stop order comes second.
    while (!tripped) std::this_thread::sleep_for(milliseconds(1));
    g.stop = StopOrder{};
    g.stop->scope = Scope{ScopeKind::team, "vision"};
    g.stop->placed_by = "alice";
    return g;
  };
  RunOutcome outcome = rig.run([&](FakeGuardLink& guard) {
    guard.launch();
    guard.when([&] { return sent(rig.tree, SIGTERM); },
               [&] {
                 tripped = true;
                 // The second heartbeat is asked only once the first (the stop order) was heard.
                 guard.when([&] { return rig.ledger->beats().size() >= 2; },
                            [&] { guard.empty(); });
               });
  });
  CHECK(outcome.reason == "budget:run");
  CHECK(outcome.exit_code == to_int(ExitCode::budget));
  CHECK(rig.lines_with("tripped after") == 1);
  CHECK(rig.lines_with("stop order on") == 0);
  CHECK(rig.tree.count(SIGTERM) == 1);
}

TEST_CASE(
    "two causes race: a stop order trips first, the budget's moment after it changes nothing") {
  Rig rig;
  rig.ledger->grant = [](const FakeLedger::Beat&, const Grant& held) {
    Grant g = held;  // no raise, and a stop order
    g.stop = StopOrder{};
    g.stop->scope = Scope{ScopeKind::team, "vision"};
    g.stop->placed_by = "alice";
    g.stop->reason = "over the quarter";
    return g;
  };
  RunOutcome outcome = rig.run([&](FakeGuardLink& guard) {
    guard.launch();
    // The tree stays reported until the budget's moment (0.2 s) has passed.
    TimePoint past_budget = now() + milliseconds(300);
    guard.when([past_budget] { return now() > past_budget; }, [&] { guard.empty(); });
  });
  CHECK(outcome.reason == "stop-order");
  CHECK(outcome.exit_code == to_int(ExitCode::runaway));
  CHECK(rig.lines_with("stop order on team:vision by alice (over the quarter)") == 1);
  CHECK(rig.lines_with("tripped after") == 1);
  CHECK(rig.lines_with("budget:") == 0);
  CHECK(rig.tree.count(SIGTERM) == 1);
  REQUIRE(outcome.tripped_after_seconds);
  CHECK(*outcome.tripped_after_seconds < 0.2);
  bool told = false;
  for (const RunEvent& event : rig.notifier.events) told |= event.event == "stop-order";
  CHECK(told);
}

TEST_CASE("a multi-node run's trip places a stop order for its other nodes") {
  Rig rig;
  rig.plan.multi_node_run_id = "job-7";
  rig.plan.node = "node-a";
  rig.ledger->grant = [](const FakeLedger::Beat&, const Grant& held) { return held; };
  RunOutcome outcome = rig.run([&](FakeGuardLink& guard) {
    guard.launch();
    guard.when([&] { return !rig.ledger->stop_orders().empty() && rig.tree.empty(); },
               [&] { guard.empty(); });
  });
  CHECK(outcome.reason == "ledger-unreachable");
  CHECK(outcome.first_trip == "node-a (ledger-unreachable)");
  std::vector<StopOrder> orders = rig.ledger->stop_orders();
  REQUIRE(orders.size() == 1);
  CHECK(orders[0].scope.kind == ScopeKind::job);
  CHECK(orders[0].scope.name == "job-7");
  CHECK(orders[0].reason == "node-a tripped: ledger-unreachable");
  CHECK(orders[0].placed_by == "node node-a");
}

TEST_CASE("job control on a terminal: Ctrl-Z pauses the job and spendcap, fg resumes both") {
  Rig rig;
  rig.plan.gave_terminal = true;
  rig.grant(Money{1'000'000});  // far from any trip
  RunOutcome outcome = rig.run(
      [&](FakeGuardLink& guard) {
        guard.launch();
        guard.emit(GuardEventKind::main_stopped);
        CHECK(rig.terminal->stops == 1);
        // `fg`: the shell continues spendcap, which has the terminal again.
        ::kill(::getpid(), SIGCONT);
        guard.when([&] { return sent(rig.tree, SIGCONT); }, [&] { guard.exit(0, true); });
      },
      false);
  CHECK(outcome.reason == "exited");
  CHECK(rig.terminal_stops == 1);
  CHECK(rig.lines_with(
            "job paused; still accruing $3.60/h; the trip stays armed (fg resumes it)") == 1);
  CHECK(rig.lines_with("job resumed") == 1);
  // The waker comes a heartbeat before the trip.
  REQUIRE(rig.wakers.size() == 1);
  // The terminal went back to the job's group, then to spendcap's at the end.
  REQUIRE(rig.terminal_given.size() == 2);
  CHECK(rig.terminal_given[0] == 4242);
  CHECK(rig.terminal_given[1] == -1);
  CHECK_FALSE(sent(rig.tree, SIGTERM));
}

TEST_CASE("job control: a trip while the job is paused continues it so that it can checkpoint") {
  Rig rig;
  rig.plan.gave_terminal = true;
  RunOutcome outcome = rig.run(
      [&](FakeGuardLink& guard) {
        guard.launch();
        guard.emit(GuardEventKind::main_stopped);
        guard.when([&] { return rig.tree.empty(); }, [&] { guard.empty(); });
      },
      false);
  CHECK(outcome.reason == "ledger-unreachable");
  REQUIRE(rig.wakers.size() == 1);
  // The kill path's SIGCONT after its SIGTERM, and job control's for the paused job: without
  // the pause there is one (the case without heartbeats above).
  CHECK(rig.tree.count(SIGTERM) == 1);
  CHECK(rig.tree.count(SIGCONT) == 2);
}

TEST_CASE("job control without a terminal: SIGTSTP to spendcap goes to the tree") {
  Rig rig;
  rig.grant(Money{1'000'000});
  RunOutcome outcome = rig.run(
      [&](FakeGuardLink& guard) {
        guard.launch();
        // The guard's report of a stopped job means nothing without the terminal.
        guard.emit(GuardEventKind::main_stopped);
        ::kill(::getpid(), SIGTSTP);
        guard.when([&] { return sent(rig.tree, SIGTSTP); }, [&] { guard.exit(0, true); });
      },
      false);
  CHECK(outcome.reason == "exited");
  CHECK(rig.terminal_stops == 0);
  CHECK(rig.lines_with("job paused") == 0);
  CHECK(rig.tree.count(SIGTSTP) == 1);
}

TEST_CASE("the guard lost: spendcap kills what is left itself and the run ends guard-lost") {
  Rig rig;
  rig.grant(Money{1'000'000});
  RunOutcome outcome = rig.run(
      [&](FakeGuardLink& guard) {
        guard.launch();
        guard.lose();
      },
      false);
  CHECK(outcome.reason == "guard-lost");
  CHECK(outcome.status == RunStatus::killed);
  CHECK(outcome.exit_code == to_int(ExitCode::internal));
  // The tree is rebuilt from spendcap itself (a subreaper), and SIGKILLed at once.
  REQUIRE(rig.roots.size() == 2);
  CHECK(rig.roots[0] == FakeGuardLink::kPid);
  CHECK(rig.roots[1] == ::getpid());
  CHECK(sent(rig.tree, SIGKILL));
  CHECK_FALSE(sent(rig.tree, SIGTERM));
  CHECK(rig.reaps == 0);  // a dead guard is not waited for
  CHECK(rig.lines_with("the guard process died; killing what is left of the tree") == 1);
  REQUIRE(!rig.notifier.events.empty());
  CHECK(rig.notifier.events.back().event == "lost");
}

TEST_CASE("finish: what the main process left is drained; the command's status is the run's") {
  Rig rig;
  rig.grant(Money{1'000'000});
  RunOutcome outcome = rig.run([&](FakeGuardLink& guard) {
    guard.launch();
    guard.exit(3, false);  // a daemon it started is still there
    guard.when([&] { return rig.tree.empty(); }, [&] { guard.empty(); });
  });
  CHECK(outcome.reason == "exited");
  CHECK(outcome.status == RunStatus::failed);
  CHECK(outcome.exit_code == 3);
  REQUIRE(outcome.command_exit_code);
  CHECK(*outcome.command_exit_code == 3);
  CHECK_FALSE(outcome.stopped_by_spendcap);
  CHECK(sent(rig.tree, SIGTERM));  // the leftovers
  CHECK(rig.reaps == 1);           // the guard, once it reported the tree empty
  CHECK(rig.link == nullptr);
  CHECK(rig.lines_with("run 5c0ffee0 started: burn $3.60/h") == 1);
  // The launch order first (every thread of the run is up by then), then a tick and the
  // deadline at launch, at least.
  CHECK(rig.orders.size() >= 3);
  CHECK(rig.orders[0].kind == GuardOrderKind::launch);
  CHECK(rig.orders[1].kind == GuardOrderKind::tick);
  CHECK(rig.orders[2].kind == GuardOrderKind::deadline);
  REQUIRE(!rig.notifier.events.empty());
  CHECK(rig.notifier.events.back().event == "finished");
  CHECK(rig.notifier.events.back().exit_code == 3);
}

TEST_CASE("settle_end: how each ending reads") {
  auto settled = [](RunEnd end) {
    RunOutcome outcome;
    settle_end(outcome, end);
    return outcome;
  };
  RunEnd interrupted;
  interrupted.main_exited = true;
  interrupted.main_status = SIGINT;  // killed by SIGINT
  interrupted.gave_terminal = true;
  RunOutcome a = settled(interrupted);
  CHECK(a.reason == "interrupted");
  CHECK(a.status == RunStatus::killed);
  CHECK(a.reraise_signal == SIGINT);

  RunEnd scancel;
  scancel.main_exited = true;
  scancel.main_status = SIGTERM;
  CHECK(settled(scancel).status == RunStatus::preempted);

  RunEnd signalled;
  signalled.trip = Trip{TripKind::signal, "signal:SIGTERM", SIGTERM};
  RunOutcome c = settled(signalled);
  CHECK(c.status == RunStatus::preempted);
  CHECK(c.reraise_signal == SIGTERM);
  CHECK(c.stopped_by_spendcap);

  RunEnd failed_launch;
  failed_launch.launch_failed = true;
  CHECK(settled(failed_launch).reason == "launch-failed");
}

TEST_CASE("the checkpoint watch: the file appearing during the grace ends it") {
  TempDir dir;
  Rig rig;
  rig.tree.add(true);  // it catches the checkpoint signal
  rig.plan.on_trip = ShutdownTimes{seconds(30), Nanos{}};
  rig.plan.exit_window = Nanos{};
  rig.plan.checkpoint_done_path = dir.file("checkpoint-done");
  rig.grant(Money{31'200});  // the reserve is 31 s of burn: the trip comes 0.2 s after launch
  std::string done = rig.plan.checkpoint_done_path;
  RunOutcome outcome = rig.run(
      [&](FakeGuardLink& guard) {
        guard.launch();
        guard.when([&] { return sent(rig.tree, SIGUSR1); },
                   [&, done] {
                     FILE* file = std::fopen(done.c_str(), "w");
                     REQUIRE(file != nullptr);
                     std::fclose(file);
                     // Not the 30 s grace: the watch ends it (the bound is 5 s).
                     guard.when([&] { return rig.tree.empty(); }, [&] { guard.empty(); });
                   });
      },
      false);
  CHECK(outcome.reason == "ledger-unreachable");
  CHECK(outcome.checkpoint_signalled == 1);
  CHECK_FALSE(outcome.grace_skipped);
  CHECK(rig.lines_with("the job wrote its checkpoint: terminating now") == 1);
  REQUIRE(outcome.trip_to_empty_seconds);
  CHECK(*outcome.trip_to_empty_seconds < 5);
}

// Closing an inotify instance that still holds a watch waits for the kernel's fsnotify SRCU grace
// period (8 ms median on this VM, on every run's way out). So a run watches its progress file
// only from kWatchProgressAfter on (a short run makes no instance), its end removes the watch, and
// the instance is closed only with the supervisor, the reaping of the removed watch meanwhile.
// Controls: the binary before made an instance for the short run too (1 != 0 below), and without
// the inotify_rm_watch in GuardPart::stop the watch is still held after the run (1 != 0).
TEST_CASE("the progress watch: none for a short run; removed at the end, closed later") {
  TempDir dir;
  {
    Rig rig;
    rig.plan.guards.progress_path = dir.path() + "/progress.jsonl";
    InotifyUse before = inotify_use();
    InotifyUse after;
    RunOutcome outcome = rig.run(
        [&](FakeGuardLink& guard) {
          guard.launch();
          guard.when([] { return true; }, [&] { guard.exit(0, true); });
        },
        true, [&] { after = inotify_use(); });
    CHECK(outcome.reason == "exited");
    CHECK(after.instances == before.instances);
  }
  Rig rig;
  rig.plan.guards.progress_path = dir.path() + "/progress.jsonl";
  rig.grant(Money{10'000});  // 10 s of burn: no trip in the run's 1.3 s
  InotifyUse before = inotify_use();
  InotifyUse during, after;
  RunOutcome outcome = rig.run(
      [&](FakeGuardLink& guard) {
        guard.launch();
        TimePoint watching = now() + kWatchProgressAfter + milliseconds(300);
        guard.when([watching] { return now() > watching; },
                   [&] {
                     during = inotify_use();
                     guard.exit(0, true);
                   });
      },
      true, [&] { after = inotify_use(); });
  CHECK(outcome.reason == "exited");
  CHECK(during.watches == before.watches + 1);  // the probe sees the watch while the job runs
  CHECK(after.watches == before.watches);       // removed at the end
  CHECK(after.instances == before.instances + 1);
  CHECK(inotify_use().instances == before.instances);  // closed with the supervisor
}

TEST_CASE("start line: what trips the run first, and when") {
  RunTerms terms;
  terms.run_id = "5c0ffee0-0000-4000-8000-000000000000";
  terms.rate_per_hour = kRate;
  terms.run_budget = Money{1'000'000};
  StartFacts facts;
  facts.reserve = kReserve;
  facts.launched = TimePoint(hours(1));
  facts.ceiling = Money{100'000};
  facts.allowed = facts.ceiling;
  facts.label = "team vision, experiment resnet-ablation-2026-12, project imagenet-long-name";
  facts.isolation = "pid namespace";
  facts.ledger = "sqlite:/var/lib/spendcap/a-rather-long-path/ledger.db";
  // The short line by default: the burn, the budget and when it trips, within 100 columns.
  std::string brief = start_line(terms, facts);
  CHECK(brief.rfind("run 5c0ffee0 started: burn $3.60/h, budget $1.00; trips in ", 0) == 0);
  CHECK(brief.size() <= 90);
  CHECK(brief.find("reserve") == std::string::npos);
  CHECK(brief.find("isolation") == std::string::npos);
  CHECK(brief.find("ledger") == std::string::npos);
  // --verbose: the whole of it.
  terms.verbose = true;
  facts.label.clear();
  facts.isolation.clear();
  facts.ledger.clear();
  std::string own = start_line(terms, facts);
  CHECK(own.rfind("run 5c0ffee0 started: burn $3.60/h, budget $1.00, reserve $0.0010", 0) == 0);
  CHECK(own.find("; its budget trips in") != std::string::npos);
  CHECK(own.find("; ceiling $0.10 granted so far") != std::string::npos);

  // A team budget with less left than the run's own binds first.
  ScopeUse team;
  team.scope = Scope{ScopeKind::team, "vision"};
  team.amount = Money{50'000};
  team.held = facts.ceiling;
  facts.scopes = {team};
  std::string shared = start_line(terms, facts);
  CHECK(shared.find("(budget:team:vision: $0.05 left of $0.05)") != std::string::npos);
  terms.verbose = false;
  std::string shared_brief = start_line(terms, facts);
  CHECK(shared_brief.find("(budget:team:vision)") != std::string::npos);
  CHECK(shared_brief.size() <= 100);
  terms.verbose = true;

  // A fair share of a shared budget: the trip counts the other runs (an equal part of what no
  // run spent, $0.03 of $0.06 with 1 other run), "~" as it depends on them.
  team.amount = Money{60'000};
  team.other_runs = 1;
  facts.scopes = {team};
  facts.binding = team.scope;
  facts.fair_share = true;
  std::string fair = start_line(terms, facts);
  CHECK(fair.find("trips in ~") != std::string::npos);
  CHECK(fair.find("(budget:team:vision: a fair share of its $0.06 left with 1 other run; holds "
                  "$0.10 so far, raised at each heartbeat)") != std::string::npos);
  terms.verbose = false;
  CHECK(start_line(terms, facts).find("(budget:team:vision, a fair share with 1 other run)") !=
        std::string::npos);
  // The grant took all that was free: it holds the rest.
  facts.fair_share = false;
  CHECK(start_line(terms, facts).find("(budget:team:vision: holds the rest)") != std::string::npos);
  terms.verbose = true;
  facts.binding.reset();
  team.amount = Money{50'000};
  team.other_runs.reset();
  facts.scopes = {team};

  terms.mode = Mode::warn;
  facts.isolation = "pid namespace";
  std::string warn = start_line(terms, facts);
  CHECK(warn.find("; would trip in") != std::string::npos);
  CHECK(warn.find("(warn mode: nothing is stopped); isolation: pid namespace") !=
        std::string::npos);
  terms.verbose = false;
  std::string warn_brief = start_line(terms, facts);
  CHECK(warn_brief.find("; would trip in") != std::string::npos);
  CHECK(warn_brief.find("(warn mode)") != std::string::npos);
}

TEST_CASE("supervisor: the guard's ticks wait for the window before the kill deadline") {
  // The deadline is hours away: with guard_ticks_lead the guard needs no tick yet (its watchdog
  // reads them only near the deadline), so an idle run sends none; without it (the negative
  // control, the old behaviour) a tick goes every interval (10 ms).
  for (bool lead : {true, false}) {
    CAPTURE(lead);
    Rig rig;
    rig.grant(Money{10'000'000'000});
    if (lead) rig.plan.guard_ticks_lead = seconds(3);
    rig.run([&](FakeGuardLink& guard) {
      guard.launch();
      TimePoint until = now() + milliseconds(300);
      guard.when([until] { return now() >= until; }, [&] { guard.exit(0, true); });
    });
    int ticks = 0, deadlines = 0;
    for (const GuardOrder& order : rig.orders) {
      ticks += order.kind == GuardOrderKind::tick;
      deadlines += order.kind == GuardOrderKind::deadline && order.value != 0;
    }
    CHECK(deadlines >= 1);
    if (lead) {
      CHECK(ticks == 0);
    } else {
      CHECK(ticks >= 10);
    }
  }
}

TEST_CASE("supervisor: the guard's ticks come every interval once the deadline is near") {
  // The heartbeats keep the deadline within the claim horizon (10 s) of the launch: a lead of 60 s
  // puts the whole run inside the window, so ticks go from the launch on, every interval.
  Rig rig;
  rig.plan.guard_ticks_lead = seconds(60);
  rig.run([&](FakeGuardLink& guard) {
    guard.launch();
    TimePoint until = now() + milliseconds(150);
    guard.when([until] { return now() >= until; }, [&] { guard.exit(0, true); });
  });
  int ticks = 0;
  for (const GuardOrder& order : rig.orders) ticks += order.kind == GuardOrderKind::tick;
  CHECK(ticks >= 5);
}
