// A whole `spendcap run` over the FakeRunHost (run/run_host.hpp) and a real SQLite ledger: the
// flags resolved, the ledger's admission (refusals, the crash-loop guard and its back-off, the
// --estimate-steps check), the supervisor driven by a fake guard, the final row, the status file
// and the summary line. Nothing is forked: each case takes milliseconds. The real process tree is
// the integration tests' (test_run_basics, test_kill_path, test_guards keep one case of each).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fakes/fake_run_host.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/run/run.hpp"
#include "test_support.hpp"

namespace spendcap {

namespace {

using testing::FakeGuardLink;
using testing::FakeRunHost;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A run's flags over the test's own policy and ledger; its lines go to the log file.
struct RunFixture {
  testing::TempDir dir{"spendcap-run-steps"};
  // The policy search reads the process's own variables: not the caller's files.
  testing::ScopedEnv home{"HOME", dir.path().c_str()};
  testing::ScopedEnv xdg{"XDG_CONFIG_HOME", dir.file("xdg").c_str()};
  // A final row spooled (and the spool replayed at the next open) stays in the test's directory.
  testing::ScopedEnv spool{"SPENDCAP_SPOOL_DIR", dir.file("spool").c_str()};
  RunRequest request;

  explicit RunFixture(const std::string& policy = R"({"guards": {"crash_loop":
                                                       {"max_failures": 2, "window": "10m"}}})") {
    std::ofstream(dir.file("policy.json")) << policy;
    request.policy = dir.file("policy.json");
    request.ledger = dir.file("ledger.db");
    request.log = dir.file("spendcap.log");
    request.status_file = dir.file("status.json");
    request.team = "vision";
    request.experiment = "steps";
    request.rate = "3.6";
    request.budget = "5";
    request.grace = "0s";
    request.kill_after = "0s";
    request.isolation = "none";
    request.command = {"true"};
  }

  // Each run in a fresh host unless one is given (a host is one process's machine).
  int run(FakeRunHost& host) { return run_steps(request, Inherited{}, host); }
  int run() {
    FakeRunHost host(environment());
    return run(host);
  }
  Environment environment() const {
    return {{"HOME", dir.path()}, {"XDG_CONFIG_HOME", dir.file("xdg")}};
  }

  std::string log() const { return slurp(dir.file("spendcap.log")); }
  std::string status() const { return slurp(dir.file("status.json")); }
  std::vector<ListedRun> runs() {
    std::unique_ptr<Ledger> ledger = open_ledger(*request.ledger);
    return ledger->list_runs(RunQuery{});
  }
};

}  // namespace

TEST_CASE(
    "a run over the fake host ends with the command's status, its final row, status file "
    "and summary") {
  RunFixture fixture;
  FakeRunHost host(fixture.environment());
  host.script = [](FakeGuardLink& guard) {
    guard.launch();
    guard.exit(3, true);
  };
  CHECK(fixture.run(host) == 3);
  // What the run asked of the machine: its cgroup, a subreaper, the guard with the command.
  REQUIRE(host.launched);
  CHECK(host.launched->argv == std::vector<std::string>{"true"});
  CHECK(host.launched->executable == "/usr/bin/true");
  CHECK(host.cgroup_asked.rfind("spendcap-", 0) == 0);
  CHECK(host.cgroup_wanted);
  CHECK(host.subreaper);
  CHECK(host.tree_roots == std::vector<pid_t>{FakeGuardLink::kPid});
  CHECK(host.cgroups_removed == 0);  // none was made: "" is none
  // The final row.
  std::vector<ListedRun> runs = fixture.runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].run.status == RunStatus::failed);
  CHECK(runs[0].run.exit_code == 3);
  // The status file and the summary line say the same.
  std::string status = fixture.status();
  CHECK(status.find("\"exit_code\": 3") != std::string::npos);
  CHECK(status.find("\"status\": \"failed\"") != std::string::npos);
  CHECK(fixture.log().find("failed after") != std::string::npos);
  CHECK(fixture.log().find("; exit 3") != std::string::npos);
}

TEST_CASE("a budget that cannot hold the shutdown reserve is refused (120) before any launch") {
  RunFixture fixture;
  fixture.request.budget = "0.0001";
  fixture.request.grace = "10s";
  FakeRunHost host(fixture.environment());
  CHECK(fixture.run(host) == 120);
  CHECK_FALSE(host.launched);
  CHECK_FALSE(host.subreaper);
  CHECK(fixture.status().find("\"reason\": \"reserve-exceeds-budget\"") != std::string::npos);
  CHECK(fixture.log().find("does not fit in the budget") != std::string::npos);
  std::vector<ListedRun> runs = fixture.runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].run.status == RunStatus::refused);
}

TEST_CASE(
    "the crash-loop guard refuses the command after its failures; --clear-crash-loop starts "
    "it") {
  RunFixture fixture;
  for (int i = 0; i < 2; ++i) {
    FakeRunHost host(fixture.environment());
    host.script = [](FakeGuardLink& guard) {
      guard.launch();
      guard.exit(1, true);
    };
    CHECK(fixture.run(host) == 1);
  }
  FakeRunHost refused(fixture.environment());
  CHECK(fixture.run(refused) == 120);
  CHECK_FALSE(refused.launched);
  CHECK(fixture.log().find("crash") != std::string::npos);
  CHECK(fixture.status().find("\"status\": \"refused\"") != std::string::npos);

  fixture.request.clear_crash_loop = true;
  FakeRunHost cleared(fixture.environment());
  CHECK(fixture.run(cleared) == 0);
  CHECK(cleared.launched);
  CHECK(fixture.log().find("crash-loop guard cleared by") != std::string::npos);
}

TEST_CASE("--retry-backoff waits out a failure on the host's clock, then starts") {
  RunFixture fixture;
  FakeRunHost failing(fixture.environment());
  failing.script = [](FakeGuardLink& guard) {
    guard.launch();
    guard.exit(1, true);
  };
  CHECK(fixture.run(failing) == 1);
  fixture.request.retry_backoff = true;
  FakeRunHost host(fixture.environment());
  CHECK(fixture.run(host) == 0);
  // The first back-off is 10 s from the failure: waited on the fake clock, not slept.
  REQUIRE(host.clock.waits.size() == 1);
  CHECK(host.clock.waits[0] > std::chrono::seconds(8));
  CHECK(host.clock.waits[0] <= std::chrono::seconds(10));
  CHECK(host.launched);
  CHECK(fixture.log().find("retry back-off: 1 failures") != std::string::npos);
}

TEST_CASE("an estimate over --budget is refused (120) before admission; one flag alone is 125") {
  RunFixture fixture;
  fixture.request.estimate_steps = "1000";
  fixture.request.step_time = "10s";  // 2.78 h at $3.60/h: $10 over $5
  FakeRunHost host(fixture.environment());
  try {
    fixture.run(host);
    FAIL("the estimate was accepted");
  } catch (const Error& error) {
    CHECK(error.code() == ExitCode::refused);
    CHECK(error.subject() == "--estimate-steps 1000");
    CHECK(std::string(error.what()).find("does not fit --budget $5.00") != std::string::npos);
  }
  CHECK_FALSE(host.launched);
  CHECK(fixture.runs().empty());

  fixture.request.step_time = "1s";  // $1: fits
  FakeRunHost fits(fixture.environment());
  CHECK(fixture.run(fits) == 0);

  fixture.request.step_time.reset();
  FakeRunHost alone(fixture.environment());
  try {
    fixture.run(alone);
    FAIL("--estimate-steps alone was accepted");
  } catch (const Error& error) {
    CHECK(error.code() == ExitCode::internal);
    CHECK(error.subject() == "--estimate-steps");
  }
}

TEST_CASE("a run tripped by its budget ends 124 with the kill path on the fake tree") {
  RunFixture fixture;
  fixture.request.budget = "0.0012";  // 1.2 s at $3.60/h, 1 s of it the reserve
  fixture.request.interval = "50ms";
  FakeRunHost host(fixture.environment());
  host.script = [&host](FakeGuardLink& guard) {
    guard.launch();  // and never exits by itself: the trip's SIGTERM empties the tree
    guard.when([&host] { return host.tree.empty(); }, [&guard] { guard.empty(); });
  };
  CHECK(fixture.run(host) == 124);
  CHECK(host.tree.count(SIGTERM) + host.tree.count(SIGKILL) >= 1);
  CHECK(fixture.status().find("\"status\": \"killed\"") != std::string::npos);
  CHECK(fixture.log().find("tripped") != std::string::npos);
}

// The ledger gone at the run's end (issue 38 item 8): the final row goes to this host's spool, the
// run keeps its own status and status file, and the next spendcap that opens the ledger replays
// the row. Was only test_faults' and test_lost_runs' (real processes, a PostgreSQL stopped).
TEST_CASE("a final row the ledger does not take is spooled, then replayed by the next run") {
  RunFixture fixture;
  FakeRunHost host(fixture.environment());
  host.ledger_fault = "database is locked";
  host.script = [](FakeGuardLink& guard) {
    guard.launch();
    guard.exit(3, true);
  };
  CHECK(fixture.run(host) == 3);
  REQUIRE(host.opened);
  CHECK(host.opened->finishes_failed >= 1);
  CHECK(fixture.log().find("database is locked; the final row is spooled in " +
                           fixture.dir.file("spool")) != std::string::npos);
  CHECK(fixture.status().find("\"exit_code\": 3") != std::string::npos);
  std::vector<std::filesystem::path> spooled;
  for (const auto& entry : std::filesystem::directory_iterator(fixture.dir.file("spool"))) {
    spooled.push_back(entry.path());
  }
  CHECK(spooled.size() == 1);
  // Until it is replayed the ledger still holds the run as running (its ceiling held).
  std::vector<ListedRun> before = fixture.runs();
  REQUIRE(before.size() == 1);
  CHECK(before[0].run.status == RunStatus::running);

  // The next run, on a ledger that works, once the first run's heartbeat is stale (a spooled row
  // waits while its run may still be alive).
  FakeRunHost next(fixture.environment());
  double later =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() +
      3600;
  next.ledger_clock = [later] { return later; };
  CHECK(fixture.run(next) == 0);
  CHECK(fixture.log().find("replayed 1 spooled final rows into") != std::string::npos);
  std::vector<ListedRun> after = fixture.runs();
  REQUIRE(after.size() == 2);
  const RunView& first = after[0].run.id == before[0].run.id ? after[0].run : after[1].run;
  CHECK(first.status == RunStatus::failed);
  CHECK(first.exit_code == 3);
  CHECK(std::filesystem::is_empty(fixture.dir.file("spool")));
}

TEST_CASE("a spool that cannot be written either is said, and the run keeps its own status") {
  RunFixture fixture;
  std::ofstream(fixture.dir.file("not-a-directory")) << "";
  testing::ScopedEnv spool{"SPENDCAP_SPOOL_DIR", fixture.dir.file("not-a-directory/spool").c_str()};
  FakeRunHost host(fixture.environment());
  host.ledger_fault = "server closed the connection";
  CHECK(fixture.run(host) == 0);
  CHECK(fixture.log().find("server closed the connection; spooling the final row failed too") !=
        std::string::npos);
  CHECK(fixture.status().find("\"exit_code\": 0") != std::string::npos);
}

}  // namespace spendcap

namespace spendcap {

namespace {

// One run of `fixture`'s command that ends by itself with `code`.
int run_ending(RunFixture& fixture, int code) {
  testing::FakeRunHost host(fixture.environment());
  host.script = [code](testing::FakeGuardLink& guard) {
    guard.launch();
    guard.exit(code, true);
  };
  return fixture.run(host);
}

}  // namespace

// Moved from tests/integration/test_guards.py (11 real runs there); the real-process case of the
// guard is its test_retry_loop_is_refused_after_five_failures.
TEST_CASE("a success resets the crash-loop count; the failures after it count again") {
  RunFixture fixture;
  CHECK(run_ending(fixture, 3) == 3);
  CHECK(run_ending(fixture, 0) == 0);
  CHECK(run_ending(fixture, 3) == 3);  // one failure since the success: under the limit of 2
  // Negative control: the second failure since the success does trip it.
  CHECK(run_ending(fixture, 3) == 3);
  CHECK(run_ending(fixture, 3) == 120);
}

// Moved from tests/integration/test_guards.py (6 runs of 3 s each there).
TEST_CASE("runs stopped by a budget do not count as crash-loop failures") {
  RunFixture fixture;
  fixture.request.budget = "0.0012";
  fixture.request.interval = "50ms";
  for (int i = 0; i < 3; ++i) {
    testing::FakeRunHost host(fixture.environment());
    host.script = [&host](testing::FakeGuardLink& guard) {
      guard.launch();
      guard.when([&host] { return host.tree.empty(); }, [&guard] { guard.empty(); });
    };
    CHECK(fixture.run(host) == 124);
    CHECK(host.launched);
  }
  CHECK(fixture.log().find("crash-loop") == std::string::npos);
}

// Moved from tests/integration/test_guards.py.
TEST_CASE("guards.crash_loop.enabled false turns the crash-loop guard off") {
  RunFixture fixture(R"({"guards": {"crash_loop": {"max_failures": 2, "enabled": false}}})");
  for (int i = 0; i < 3; ++i) CHECK(run_ending(fixture, 3) == 3);
  // Negative control: the same failures under the guard refuse the third.
  RunFixture guarded;
  CHECK(run_ending(guarded, 3) == 3);
  CHECK(run_ending(guarded, 3) == 3);
  CHECK(run_ending(guarded, 3) == 120);
}

}  // namespace spendcap

namespace spendcap {

// Moved from tests/integration/test_budgets.py (three real runs, 5 s there); the real-process
// cases of the ledger's budgets across runs are its experiment budget and concurrent team tests.
TEST_CASE("a job key shares one --budget across its runs; another job key has its own") {
  RunFixture fixture;
  fixture.request.rate = "3600";  // $1 a second: the reserve (1 s) is $1
  fixture.request.budget = "1.6";
  fixture.request.interval = "50ms";
  fixture.request.job_key = "train-42";
  testing::FakeRunHost first(fixture.environment());
  first.script = [](testing::FakeGuardLink& guard) {
    guard.launch();
    TimePoint end = now() + std::chrono::milliseconds(200);
    guard.when([end] { return now() > end; }, [&guard] { guard.exit(0, true); });
  };
  CHECK(fixture.run(first) == 0);
  // The restart gets what the first run left (about $1.40), so it trips near $0.40.
  testing::FakeRunHost restart(fixture.environment());
  restart.script = [&restart](testing::FakeGuardLink& guard) {
    guard.launch();
    guard.when([&restart] { return restart.tree.empty(); }, [&guard] { guard.empty(); });
  };
  CHECK(fixture.run(restart) == 124);
  CHECK(fixture.status().find("\"reason\": \"budget:job:train-42\"") != std::string::npos);
  CHECK(fixture.log().find("job train-42 total") != std::string::npos);
  Money spent;
  for (const ListedRun& listed : fixture.runs()) spent = spent + listed.run.reported_spend;
  CHECK(spent <= Money::from_micros(1'600'000));
  // Another job key has its own budget: it starts, where a third run of train-42 is refused.
  CHECK(fixture.run() == 120);
  fixture.request.job_key = "other";
  CHECK(fixture.run() == 0);
}

}  // namespace spendcap

namespace spendcap {

namespace {

// The job's part: `steps` lines of `total` on SPENDCAP_PROGRESS, one every 50 ms, then it exits 0;
// a trip's SIGTERM ends it sooner.
void progress_job(testing::FakeRunHost& host, int steps, int total) {
  host.script = [&host, steps, total](testing::FakeGuardLink& guard) {
    guard.launch();
    auto out = std::make_shared<std::ofstream>(host.job_env("SPENDCAP_PROGRESS"), std::ios::app);
    auto written = std::make_shared<int>(0);
    TimePoint start = now();
    guard.when(
        [&host, out, written, start, steps, total] {
          if (host.tree.empty()) return true;
          while (*written < steps && now() >= start + *written * std::chrono::milliseconds(50)) {
            ++*written;
            *out << R"({"step": )" << *written << R"(, "total_steps": )" << total << "}\n"
                 << std::flush;
          }
          return *written >= steps;
        },
        [&host, &guard] {
          if (host.tree.empty()) {
            guard.empty();
          } else {
            guard.exit(0, true);
          }
        });
  };
}

}  // namespace

// Moved from tests/integration/test_user_view_issue30.py (three runs of 7 s there, about 6 s here);
// the real-process case of --require-fit is test_guards.py's test_require_fit_stops_it.
TEST_CASE("a run whose projection will not fit is warned about; --require-fit stops it") {
  RunFixture fixture;
  fixture.request.rate = "3600";  // $1 a second
  fixture.request.interval = "50ms";
  fixture.request.budget = "5";
  // The pace is measured over at least a second (guards/progress.hpp kPaceMinSpan), and the
  // progress file is read from kWatchProgressAfter (1 s) on: 48 steps, 2.4 s. The negative
  // control: 48 steps of 48 ($2.40) fit: no warning.
  testing::FakeRunHost fits(fixture.environment());
  progress_job(fits, 48, 48);
  CHECK(fixture.run(fits) == 0);
  CHECK(fixture.log().find("will not fit") == std::string::npos);
  // 48 steps of 1000 at 20 a second: $50 to go under $5. Warned, and the run goes on.
  testing::FakeRunHost warned(fixture.environment());
  progress_job(warned, 48, 1000);
  CHECK(fixture.run(warned) == 0);
  CHECK(fixture.log().find("warning: the run will not fit its budget") != std::string::npos);
  // With --require-fit the same run is stopped as a runaway.
  fixture.request.require_fit = true;
  testing::FakeRunHost stopped(fixture.environment());
  progress_job(stopped, 48, 1000);
  CHECK(fixture.run(stopped) == 123);
  CHECK(fixture.status().find("\"reason\": \"runaway:will-not-fit\"") != std::string::npos);
}

}  // namespace spendcap

namespace spendcap {

TEST_CASE(
    "a team budget the reserve does not fit in refuses the run (120), naming the team, and "
    "tells the webhooks") {
  RunFixture fixture(R"({"budgets": {"team": {"vision": {"amount": 0.5, "period": "total"}}}})");
  fixture.request.rate = "3600";  // the reserve (1 s) is $1: over the team's $0.50
  fixture.request.webhook_urls = {"http://127.0.0.1:9/hook"};
  FakeRunHost host(fixture.environment());
  CHECK(fixture.run(host) == 120);
  CHECK_FALSE(host.launched);
  CHECK(fixture.log().find("team:vision") != std::string::npos);
  CHECK(fixture.status().find("\"status\": \"refused\"") != std::string::npos);
  // The refused event asked for its notifier (the fake delivers nothing), with the one webhook.
  CHECK(host.notifiers_asked == 1);
  CHECK(host.notifier_targets == 1);
  // Negative control: under a team budget that holds it, the same run starts.
  RunFixture roomy(R"({"budgets": {"team": {"vision": {"amount": 50, "period": "total"}}}})");
  roomy.request.rate = "3600";
  FakeRunHost started(roomy.environment());
  CHECK(roomy.run(started) == 0);
  CHECK(started.launched);
}

}  // namespace spendcap
