// The harness of the ledger tests: a backend is a factory of connections to one fresh ledger, and
// the suite (test_ledger_conformance.cpp) is written only against ledger.hpp and this harness, so
// that every backend (SQLite now, PostgreSQL later) runs the same suite. The ledger's clock is a
// TestClock that the tests move; nothing sleeps.
#pragma once

#include <stdlib.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/ledger_store.hpp"
#include "test_support.hpp"

namespace spendcap::testing {

// The ledger's clock in tests: unix seconds, moved by the test, read by any thread.
class TestClock {
 public:
  explicit TestClock(double start_seconds) : now_seconds_(start_seconds) {}
  double now() const { return now_seconds_.load(); }
  void set(double seconds) { now_seconds_.store(seconds); }
  void advance(double seconds) { now_seconds_.store(now_seconds_.load() + seconds); }

 private:
  std::atomic<double> now_seconds_;
};

using LedgerFactory = std::function<std::unique_ptr<Ledger>(LedgerOptions)>;

struct LedgerBackend {
  // Each call opens a new connection to the same fresh, empty ledger.
  LedgerFactory open;
  // The backend's own consistency checks (SQLite: its usage aggregates against the runs); one
  // line per problem. May be empty.
  std::function<std::vector<std::string>(Ledger&)> inconsistencies;
  std::shared_ptr<void> storage;  // keeps the ledger's file or database alive
  // A store (ledger_store.hpp) on the same ledger, for what the Ledger interface does not read
  // back (a run's progress report): the cases that use it read through StoreTxn only.
  std::function<std::unique_ptr<LedgerStore>(std::function<double()>)> open_store;
};

inline Money usd(double amount) {
  return money_from_number(amount).value();
}

// Unix seconds of a UTC date and time.
inline double unix_time(int year, int month, int day, int hour = 0, int minute = 0,
                        int second = 0) {
  std::tm date{};
  date.tm_year = year - 1900;
  date.tm_mon = month - 1;
  date.tm_mday = day;
  date.tm_hour = hour;
  date.tm_min = minute;
  date.tm_sec = second;
  return static_cast<double>(timegm(&date));
}

// A run of `team` asking for `want`: $3.60 an hour (a tenth of a cent a second), a $0.03 reserve,
// 10 s of shutdown, a 5 s sync interval (stale after 15 s).
inline RunStart run_start(const std::string& id, const std::string& team, Money want) {
  RunStart run;
  run.id = id;
  run.team = team;
  run.experiment = "";
  run.user = "";
  run.host = "testhost";
  run.pid = 4242;
  run.command = {"python", "train.py"};
  run.tags = {{"slurm_job_id", "17"}};
  run.rate_per_hour = usd(3.60);
  run.reserve = usd(0.03);
  run.shutdown = std::chrono::seconds(10);
  run.sync = std::chrono::seconds(5);
  run.want = want;
  return run;
}

// A run as run_start's whose near-term need (two syncs of burn and its reserve, grant_rule.hpp)
// covers its claim: a 2 h sync ($14.43). The fair share of a shared budget never cuts its claim, so
// the cases of the headroom rule read as before the fair share (which has cases of its own).
inline RunStart claim_start(const std::string& id, const std::string& team, Money want) {
  RunStart run = run_start(id, team, want);
  run.sync = std::chrono::hours(2);
  return run;
}

inline RunFinal run_final(const std::string& id, Money spend,
                          RunStatus status = RunStatus::succeeded) {
  RunFinal final;
  final.id = id;
  final.status = status;
  final.reason = status == RunStatus::succeeded ? "exited" : "budget:team:vision";
  final.exit_code = status == RunStatus::succeeded ? 0 : 124;
  final.spend = spend;
  final.elapsed_seconds = 12.5;
  return final;
}

// One ledger of a backend, its clock, and a first connection.
class LedgerFixture {
 public:
  explicit LedgerFixture(LedgerBackend backend_in, double start = unix_time(2024, 1, 31, 12))
      : backend(std::move(backend_in)), clock(start), ledger(connect()) {}
  LedgerFixture(const LedgerFixture&) = delete;
  LedgerFixture& operator=(const LedgerFixture&) = delete;

  // Another connection to the same ledger, on the same clock.
  std::unique_ptr<Ledger> connect(bool ignore_other_runs = false) {
    LedgerOptions options;
    options.wall_clock = [this] { return clock.now(); };
    options.ignore_other_runs = ignore_other_runs;
    return backend.open(std::move(options));
  }

  void set_budget(ScopeKind kind, const std::string& name, double amount, Period period,
                  std::optional<double> max_run = std::nullopt) {
    BudgetRule rule{{kind, name}, usd(amount), period, std::nullopt};
    if (max_run) rule.max_run = usd(*max_run);
    ledger->apply_budgets({rule}, false);
  }

  std::vector<std::string> inconsistencies() {
    return backend.inconsistencies ? backend.inconsistencies(*ledger) : std::vector<std::string>{};
  }

  LedgerBackend backend;
  TestClock clock;
  std::unique_ptr<Ledger> ledger;
};

// After a migration to v27 (the ETA column; each store's own case winds a ledger back past it):
// run "r1" kept its progress and has no ETA yet, and a heartbeat with 250 s left stores the
// ledger's now + 250.
inline void check_migrated_run_takes_etas(Ledger& ledger, HeartbeatProgress so_far, double now) {
  std::optional<RunView> r1 = ledger.find_run("r1");
  REQUIRE(r1);
  CHECK(r1->last_progress == so_far.last);
  CHECK_FALSE(r1->progress_eta_at);
  so_far.seconds_left = 250.0;
  ledger.heartbeat("r1", usd(0.002), usd(1), so_far);
  REQUIRE(ledger.find_run("r1")->progress_eta_at);
  CHECK(*ledger.find_run("r1")->progress_eta_at == doctest::Approx(now + 250.0));
}

}  // namespace spendcap::testing
