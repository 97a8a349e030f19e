// What is particular to the SQLite ledger (files, permissions, locking, schema, aggregates), the
// budget arithmetic every backend shares, and the spool. The ledger's contract itself is tested by
// the conformance suite (test_ledger_conformance.cpp).
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "ledger/ledger_conformance.hpp"
#include "ledger/sqlite/raw_db.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"

namespace spendcap::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

mode_t mode_of(const std::string& path) {
  struct stat status {};
  REQUIRE(stat(path.c_str(), &status) == 0);
  return status.st_mode & 07777;
}

LedgerOptions clock_options(TestClock& clock) {
  LedgerOptions options;
  options.wall_clock = [&clock] { return clock.now(); };
  return options;
}

bool exists(const std::string& path) {
  return access(path.c_str(), F_OK) == 0;
}

}  // namespace

// ---- the budget arithmetic ----

TEST_CASE("Ledger math: the days of a period") {
  CHECK(utc_day(0) == 0);
  CHECK(utc_day(86399.9) == 0);
  CHECK(utc_day(-0.5) == -1);
  std::int64_t wednesday = utc_day(unix_time(2024, 1, 31, 12));
  CHECK(period_days(Period::day, wednesday).first_day == wednesday);
  CHECK(period_days(Period::day, wednesday).last_day == wednesday);
  DayRange week = period_days(Period::week, wednesday);
  CHECK(week.first_day == utc_day(unix_time(2024, 1, 29)));  // Monday
  CHECK(week.last_day == utc_day(unix_time(2024, 2, 4)));    // Sunday
  CHECK(period_days(Period::week, utc_day(unix_time(2024, 2, 4))).first_day == week.first_day);
  CHECK(period_days(Period::week, utc_day(unix_time(2024, 2, 5))).first_day == week.last_day + 1);
  CHECK(period_days(Period::week, -1).first_day == -3);  // 1969-12-29 was a Monday
  DayRange leap = period_days(Period::month, utc_day(unix_time(2024, 2, 10)));
  CHECK(leap.first_day == utc_day(unix_time(2024, 2, 1)));
  CHECK(leap.last_day == utc_day(unix_time(2024, 2, 29)));
  DayRange december = period_days(Period::month, utc_day(unix_time(2023, 12, 31, 23)));
  CHECK(december.first_day == utc_day(unix_time(2023, 12, 1)));
  CHECK(december.last_day == utc_day(unix_time(2023, 12, 31)));
  DayRange total = period_days(Period::total, wednesday);
  CHECK(total.first_day < -1'000'000);
  CHECK(total.last_day > 1'000'000'000);
}

TEST_CASE("Ledger math: the grant decision") {
  const Scope team{ScopeKind::team, "vision"}, run{ScopeKind::run, "r1"};
  Money none{};
  SUBCASE("granted in full") {
    GrantDecision d = decide_grant(none, none, usd(1), Mode::enforce, {{team, usd(5)}});
    CHECK(d.ceiling == usd(1));
    CHECK(d.allowed == usd(1));
    CHECK_FALSE(d.binding);
  }
  SUBCASE("the smallest headroom binds") {
    GrantDecision d =
        decide_grant(none, none, usd(3), Mode::enforce, {{team, usd(2)}, {run, usd(1.5)}});
    CHECK(d.ceiling == usd(1.5));
    CHECK(d.binding == run);
  }
  SUBCASE("a ceiling never falls, even below a negative headroom") {
    GrantDecision d =
        decide_grant(usd(2), usd(2), usd(3), Mode::enforce, {{team, Money{-1'000'000}}});
    CHECK(d.ceiling == usd(2));
    CHECK(d.allowed == usd(2));
    CHECK(d.binding == team);
    CHECK(decide_grant(none, none, usd(1), Mode::enforce, {{team, Money{-1'000'000}}}).allowed ==
          none);
  }
  SUBCASE("asking for less than it holds is not bound") {
    CHECK_FALSE(decide_grant(usd(2), usd(2), usd(1), Mode::enforce, {{team, usd(0.5)}}).binding);
  }
  SUBCASE("on a shared scope a claim ahead takes at most a fair share, else its need") {
    const Scope experiment{ScopeKind::experiment, "sweep"};
    // Alone on $0.50: a $3.04 claim is more than the fair share free / (0 + 2) = $0.25, so the
    // run holds its need ($0.14): the next runs of the sweep find room.
    GrantDecision first =
        decide_grant(none, none, usd(3.04), Mode::enforce, {{experiment, usd(0.50), 0}}, usd(0.14));
    CHECK(first.ceiling == usd(0.14));
    CHECK(first.binding == experiment);
    CHECK(first.fair_share);
    // The third run: $0.22 free, 2 others: $0.055 fair; it holds its need.
    GrantDecision third =
        decide_grant(none, none, usd(3.04), Mode::enforce, {{experiment, usd(0.22), 2}}, usd(0.14));
    CHECK(third.ceiling == usd(0.14));
    // Less free than its need: it holds the rest, which is not a fair-share cut.
    GrantDecision rest =
        decide_grant(none, none, usd(3.04), Mode::enforce, {{experiment, usd(0.08), 2}}, usd(0.14));
    CHECK(rest.ceiling == usd(0.08));
    CHECK(rest.binding == experiment);
    CHECK_FALSE(rest.fair_share);
    // A claim within the fair share is granted whole (a large budget: few ledger writes).
    GrantDecision big =
        decide_grant(none, none, usd(20), Mode::enforce, {{experiment, usd(5000), 10}}, usd(0.14));
    CHECK(big.ceiling == usd(20));
    CHECK_FALSE(big.binding);
    // A raise: the fair share is of what is free beside the run's own ceiling ($0.10 held of
    // headroom $0.30: $0.20 free, 1 other run: $0.0666); the need (spend + $0.14) is granted.
    GrantDecision raise = decide_grant(usd(0.10), usd(0.10), usd(3.10), Mode::enforce,
                                       {{experiment, usd(0.30), 1}}, usd(0.20));
    CHECK(raise.ceiling == usd(0.20));
    CHECK(raise.fair_share);
    // A need below what it holds: the ceiling stands (never lowered).
    CHECK(decide_grant(usd(0.25), usd(0.25), usd(3.10), Mode::enforce, {{experiment, usd(0.30), 1}},
                       usd(0.20))
              .ceiling == usd(0.25));
    // The run's own scope (no count) is never cut.
    CHECK(decide_grant(none, none, usd(3), Mode::enforce, {{run, usd(5)}}, usd(0.1)).ceiling ==
          usd(3));
    CHECK(fair_share(usd(0.30), 1) == usd(0.10));
    CHECK(fair_share(Money{-5}, 1) == Money{});
  }
  SUBCASE("warn mode holds what it asks; allowed keeps its own track") {
    GrantDecision d = decide_grant(usd(2), usd(1), usd(3), Mode::warn, {{team, usd(0.5)}});
    CHECK(d.ceiling == usd(3));
    CHECK(d.allowed == usd(1));
    CHECK(d.binding == team);
  }
}

TEST_CASE("Ledger math: run budgets, staleness and reconciliation times") {
  const Scope team{ScopeKind::team, "vision"}, experiment{ScopeKind::experiment, "sweep"};
  std::vector<BudgetRule> rules = {{team, usd(100), Period::month, usd(5)},
                                   {experiment, usd(100), Period::month, usd(4)}};
  RunBudget lowered = effective_run_budget(usd(8), rules);
  CHECK(lowered.amount == usd(4));
  CHECK(lowered.lowered_by == experiment);
  CHECK_FALSE(effective_run_budget(usd(3), rules).lowered_by);
  CHECK(effective_run_budget(std::nullopt, rules).amount == usd(4));
  CHECK_FALSE(effective_run_budget(std::nullopt, {}).amount);

  CHECK(stale_after(seconds(5)) == seconds(15));
  CHECK(stale_after(milliseconds(500)) == milliseconds(2500));
  CHECK_FALSE(is_stale(100, seconds(5), 115));
  CHECK(is_stale(100, seconds(5), 115.001));

  // $0.36 left at $3.60/h: 360 s, + 10 s of shutdown.
  CHECK(reconcile_at(1000, usd(1), usd(0.64), usd(3.6), seconds(10), seconds(5)) == 1370);
  // Nothing left to spend: still not before it is stale.
  CHECK(reconcile_at(1000, usd(1), usd(1), usd(3.6), Nanos{}, seconds(5)) == 1015);
  CHECK(reconcile_at(1000, usd(1), Money{}, Money{}, seconds(10), seconds(5)) == 1025);
}

// ---- the SQLite file ----

TEST_CASE("SqliteLedger: recognises network filesystems") {
  CHECK(network_filesystem_name(0x6969) == "NFS");
  CHECK(network_filesystem_name(0x0BD00BD0) == "Lustre");
  CHECK(network_filesystem_name(0xFF534D42L) == "CIFS");
  CHECK(network_filesystem_name(static_cast<long>(static_cast<std::int32_t>(0xFF534D42))) ==
        "CIFS");  // f_type arrives sign-extended where it is a 32-bit int
  CHECK(network_filesystem_name(0xFE534D42L) == "SMB2");
  CHECK(network_filesystem_name(0x517B) == "SMB");
  CHECK(network_filesystem_name(0x47504653) == "GPFS");
  CHECK(network_filesystem_name(0x00C36400) == "Ceph");
  CHECK(network_filesystem_name(0x5346414F) == "AFS");
  CHECK(network_filesystem_name(0x01021997) == "9P");
  CHECK(network_filesystem_name(0x19830326) == "BeeGFS");
  CHECK_FALSE(network_filesystem_name(0xEF53));      // ext4
  CHECK_FALSE(network_filesystem_name(0x58465342));  // XFS
  CHECK_FALSE(network_filesystem_name(0x01021994));  // tmpfs
  CHECK_FALSE(network_filesystem_name(0x794C7630));  // overlayfs
}

TEST_CASE("SqliteLedger: ledger urls") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  std::string canonical = std::filesystem::weakly_canonical(path).string();
  CHECK(open_ledger("sqlite:" + path)->url() == "sqlite:" + canonical);
  CHECK(open_ledger("sqlite://" + path)->url() == "sqlite:" + canonical);
  CHECK(open_ledger(path)->url() == "sqlite:" + canonical);
  {
    std::filesystem::path previous = std::filesystem::current_path();
    std::filesystem::current_path(dir.path());
    std::string url = open_ledger("relative/ledger.db")->url();
    std::filesystem::current_path(previous);
    CHECK(url ==
          "sqlite:" + std::filesystem::weakly_canonical(dir.file("relative/ledger.db")).string());
  }
  // A PostgreSQL url goes to the PostgreSQL store (a setting libpq refuses fails at once, without
  // retries), and its password is never in the message.
  try {
    open_ledger("postgresql://spendcap:pw-in-url@db/spendcap?sslmode=bogus");
    FAIL("a PostgreSQL url with a bad setting opened");
  } catch (const Error& error) {
    CHECK(error.subject().starts_with("ledger postgresql://spendcap:"));
    CHECK(std::string(error.what()).find("pw-in-url") == std::string::npos);
    CHECK(error.why().find("sslmode") != std::string::npos);
  }
  CHECK_THROWS_AS(open_ledger("postgres://db?sslmode=bogus"), Error);
  CHECK_THROWS_WITH_AS(open_ledger("mysql://db"), doctest::Contains("unknown kind of ledger"),
                       Error);
}

TEST_CASE("SqliteLedger: the default ledger is in the XDG data directory") {
  {
    ScopedEnv xdg("XDG_DATA_HOME", "/srv/data");
    CHECK(default_ledger_url() == "sqlite:/srv/data/spendcap/ledger.db");
  }
  ScopedEnv no_xdg("XDG_DATA_HOME", nullptr);
  ScopedEnv home("HOME", "/home/alice");
  CHECK(default_ledger_url() == "sqlite:/home/alice/.local/share/spendcap/ledger.db");
  ScopedEnv relative_xdg("XDG_DATA_HOME", "relative");  // invalid by the XDG spec: ignored
  CHECK(default_ledger_url() == "sqlite:/home/alice/.local/share/spendcap/ledger.db");
}

TEST_CASE("SqliteLedger: a private file in new directories, a group file in a shared directory") {
  TempDir dir;
  mode_t old_umask = umask(022);  // the group's write bit must survive a usual umask
  {
    std::string path = dir.file("a/b/ledger.db");
    SqliteLedger ledger(path, {});
    CHECK(mode_of(dir.file("a")) == 0700);
    CHECK(mode_of(dir.file("a/b")) == 0700);
    CHECK(mode_of(path) == 0600);
  }
  {
    std::filesystem::create_directory(dir.file("shared"));
    REQUIRE(chmod(dir.file("shared").c_str(), 02770) == 0);
    std::string path = dir.file("shared/ledger.db");
    SqliteLedger ledger(path, {});
    ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(1), Period::month, std::nullopt}},
                         true);
    CHECK(mode_of(path) == 0660);
    CHECK(mode_of(path + "-wal") == 0660);  // SQLite copies the database file's mode
    CHECK(mode_of(path + "-shm") == 0660);
  }
  umask(old_umask);
}

TEST_CASE("SqliteLedger: the schema is versioned and migrated once") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  {
    SqliteLedger ledger(path, {});
    CHECK(ledger.schema_version() == SqliteStore::latest_schema_version());
    CHECK(SqliteStore::latest_schema_version() >= 10);
  }
  {
    SqliteLedger reopened(path, {});
    CHECK(reopened.schema_version() == SqliteStore::latest_schema_version());
  }
  RawDb(path).exec("INSERT INTO schema_version (version) VALUES (99)");
  CHECK_THROWS_WITH_AS(SqliteLedger(path, {}), doctest::Contains("is newer than this spendcap's"),
                       Error);

  std::string foreign = dir.file("foreign.db");
  RawDb(foreign).exec("CREATE TABLE photos (id INTEGER)");
  CHECK_THROWS_WITH_AS(SqliteLedger(foreign, {}), doctest::Contains("not a spendcap ledger"),
                       Error);

  std::string garbage = dir.file("garbage.db");
  std::ofstream(garbage) << std::string(4096, 'x');
  CHECK_THROWS_WITH_AS(SqliteLedger(garbage, {}),
                       doctest::Contains(("ledger sqlite:" + garbage).c_str()), Error);
}

TEST_CASE("SqliteLedger: a v26 ledger migrates to v27, its runs' progress kept, and takes ETAs") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  TestClock clock(unix_time(2024, 1, 31, 12));
  HeartbeatProgress so_far{RunLastProgress{40, 200, R"({"step":40})"}};
  {
    SqliteLedger ledger(path, clock_options(clock));
    ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(50), Period::month, {}}}, true);
    REQUIRE(ledger.begin_run(run_start("r1", "vision", usd(1))).admitted);
    ledger.heartbeat("r1", usd(0.001), usd(1), so_far);
  }
  // Back to v26, as a ledger of the spendcap before v27 was. (The labels run one ahead of the
  // versions recorded since v24's placeholder: v27 is recorded as 26, the latest.)
  const int latest = SqliteStore::latest_schema_version();
  CHECK(latest == 26);
  std::string columns = "SELECT count(*) FROM pragma_table_info('runs') WHERE name = ";
  RawDb(path).exec(
      "ALTER TABLE runs DROP COLUMN progress_eta_at; "
      "DELETE FROM schema_version WHERE version >= " +
      std::to_string(latest));
  CHECK(RawDb(path).count(columns + "'progress_eta_at'") == 0);
  CHECK(RawDb(path).count("SELECT max(version) FROM schema_version") == latest - 1);

  SqliteLedger ledger(path, clock_options(clock));
  CHECK(ledger.schema_version() == latest);
  CHECK(RawDb(path).count(columns + "'progress_eta_at'") == 1);
  check_migrated_run_takes_etas(ledger, so_far, clock.now());
  CHECK(RawDb(path).count("SELECT CAST(progress_eta_at - " + std::to_string(clock.now()) +
                          " AS INTEGER) FROM runs WHERE id = 'r1'") == 250);
}

TEST_CASE("SqliteLedger: only the file's owner (or root) changes budgets") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  { SqliteLedger create(path, {}); }
  REQUIRE(chown(path.c_str(), 65534, 65534) == 0);
  std::vector<BudgetRule> rules = {{{ScopeKind::team, "vision"}, usd(5), Period::month, {}}};

  SqliteLedger as_someone_else(path, {}, {seconds(10), 1000});
  CHECK_FALSE(as_someone_else.caller_is_owner());
  try {
    as_someone_else.apply_budgets(rules, true);
    FAIL("a non-owner changed budgets");
  } catch (const Error& error) {
    CHECK(error.why() == "only nobody may change budgets in sqlite:" + as_someone_else.path());
    CHECK(error.hint() == "ask them to run `spendcap budgets apply POLICY`");
  }
  CHECK(as_someone_else.budget_rules().empty());

  SqliteLedger as_owner(path, {}, {seconds(10), 65534});
  CHECK(as_owner.caller_is_owner());
  as_owner.apply_budgets(rules, true);
  CHECK(as_owner.budget_rules().size() == 1);
  CHECK(SqliteLedger(path, {}, {seconds(10), 0}).caller_is_owner());
  CHECK(SqliteLedger(path, {}).caller_is_owner() == (geteuid() == 0 || geteuid() == 65534));
}

TEST_CASE("SqliteLedger: personal means the caller's own file in a directory only they write") {
  TempDir dir;  // 0700
  std::string path = dir.file("ledger.db");
  { SqliteLedger create(path, {}); }
  uid_t me = geteuid();
  CHECK(SqliteLedger(path, {}).is_personal());
  CHECK_FALSE(SqliteLedger(path, {}, {seconds(10), me + 1}).is_personal());  // someone else
  REQUIRE(chmod(dir.path().c_str(), 0770) == 0);  // a shared directory (group spendcap)
  CHECK_FALSE(SqliteLedger(path, {}).is_personal());
  REQUIRE(chmod(dir.path().c_str(), 0700) == 0);
  REQUIRE(chmod(path.c_str(), 0666) == 0);  // a file anyone may write
  CHECK_FALSE(SqliteLedger(path, {}).is_personal());
}

TEST_CASE("SqliteLedger: a write lock held past the timeout is an error naming the file") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  TestClock clock(unix_time(2024, 1, 31, 12));
  SqliteLedger ledger(path, clock_options(clock), {milliseconds(200), std::nullopt});
  ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(5), Period::month, {}}}, true);

  RawDb holder(path);
  holder.exec("BEGIN IMMEDIATE");
  auto started = std::chrono::steady_clock::now();
  try {
    ledger.begin_run(run_start("r1", "vision", usd(1)));
    FAIL("a transaction went through a held write lock");
  } catch (const Error& error) {
    CHECK(error.subject() == "ledger sqlite:" + ledger.path());
    CHECK(error.why() == "locked for more than 200ms");
  }
  CHECK(std::chrono::steady_clock::now() - started >= milliseconds(200));
  CHECK(ledger.budget_rules().size() == 1);  // WAL: readers are not blocked by a writer
  holder.exec("COMMIT");
  CHECK(ledger.begin_run(run_start("r1", "vision", usd(1))).admitted);
}

TEST_CASE("SqliteLedger: usage aggregates are verified and rebuilt from the runs") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  TestClock clock(unix_time(2024, 1, 31, 12));
  SqliteLedger ledger(path, clock_options(clock));
  ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(50), Period::month, {}}}, true);
  for (int i = 0; i < 6; ++i) {
    RunStart run = run_start("r" + std::to_string(i), "vision", usd(1 + i));
    run.experiment = i % 2 ? "odd" : "even";
    run.user = "alice";
    ledger.begin_run(run);
    ledger.heartbeat(run.id, usd(0.5), usd(1 + i));
    clock.advance(3600 * 7);  // some days apart; r0..r4 go lost and are reconciled
  }
  ledger.finish_run(run_final("r1", usd(0.9)));
  ledger.heartbeat("r5", usd(0.6), usd(6));
  REQUIRE(ledger.verify_aggregates().empty());
  std::vector<BudgetView> before = ledger.budgets();

  RawDb raw(path);
  raw.exec("UPDATE usage SET held_micros = held_micros + 5 WHERE scope_kind = 'user'");
  raw.exec("DELETE FROM usage WHERE scope_kind = 'experiment' AND scope_name = 'odd'");
  CHECK(ledger.verify_aggregates().size() >= 2);

  ledger.rebuild_aggregates();
  CHECK(ledger.verify_aggregates().empty());
  std::vector<BudgetView> after = ledger.budgets();
  REQUIRE(after.size() == before.size());
  CHECK(after[0].spent == before[0].spent);
  CHECK(after[0].held == before[0].held);
  CHECK(after[0].live == before[0].live);
}

// ---- the spool ----

TEST_CASE("Ledger spool: a spooled final row is replayed into its ledger, once") {
  TempDir dir;
  ScopedEnv spool("SPENDCAP_SPOOL_DIR", dir.file("spool").c_str());
  CHECK(spool_dir() == dir.file("spool"));
  TestClock clock(unix_time(2024, 1, 31, 12));
  SqliteLedger ledger(dir.file("ledger.db"), clock_options(clock));
  ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(5), Period::month, {}}}, true);
  RunStart r1 = run_start("r1", "vision", usd(1));
  r1.host = SpoolReplayer::current().host;  // replayed only on the host it ran on
  ledger.begin_run(r1);
  clock.advance(3600);
  REQUIRE(ledger.reconcile_lost_runs() == 1);

  RunFinal killed = run_final("r1", usd(0.7), RunStatus::killed);
  killed.gpu = RunGpu{};  // the GPU figures travel with the spooled row (issue 20)
  killed.gpu->devices = 1;
  killed.gpu->allocated_seconds = 6;
  killed.gpu->busy_seconds = 3;
  killed.gpu->energy_kwh = 0.0003;
  killed.gpu->sources = "per-process; energy counter";
  killed.gpu->timeline = {{0, 0.5, 180.0}};
  // So do the progress, the metric and the checkpoint (issue 30, item 4).
  killed.metric_name = "loss";
  killed.metric_value = 0.25;
  killed.last_progress = RunLastProgress{40, 100, "step 40/100 loss=0.25"};
  killed.checkpoint = RunCheckpoint{"SIGUSR1", 1, 5.5, 6.0};
  // And the tracker id the job reported late, set on the reconciled run (issue 40, item 6).
  killed.tracker = "wandb:late-7";
  std::string row = spool_final(ledger.url(), killed);
  CHECK(row == dir.file("spool/r1.json"));
  CHECK(mode_of(dir.file("spool")) == 0700);
  std::string elsewhere = spool_final("sqlite:/elsewhere/ledger.db", run_final("r2", usd(1)));
  std::string unknown = spool_final(ledger.url(), run_final("r3", usd(1)));
  std::ofstream(dir.file("spool/broken.json")) << "{\"ledger\": ";

  CHECK(replay_spool(ledger) == 1);
  CHECK_FALSE(exists(row));
  CHECK(exists(elsewhere));  // another ledger's row waits for that ledger
  CHECK(exists(unknown));    // not accepted: kept, never dropped
  CHECK_FALSE(exists(dir.file("spool/broken.json")));
  CHECK(exists(dir.file("spool/broken.json.bad")));
  std::optional<RunView> replayed = ledger.find_run("r1");
  CHECK(replayed->status == RunStatus::killed);
  CHECK(replayed->spend == usd(0.7));
  REQUIRE(replayed->gpu);
  CHECK(replayed->gpu->busy_seconds == doctest::Approx(3));
  CHECK(replayed->gpu->allocated_seconds == doctest::Approx(6));
  CHECK(*replayed->gpu->energy_kwh == doctest::Approx(0.0003));
  CHECK(replayed->gpu->sources == "per-process; energy counter");
  CHECK_FALSE(replayed->gpu->co2_kg);
  CHECK(replayed->metric_name == "loss");
  CHECK(replayed->metric_value == doctest::Approx(0.25));
  CHECK(replayed->last_progress == killed.last_progress);
  CHECK(replayed->checkpoint == killed.checkpoint);
  CHECK(replayed->tags ==
        std::map<std::string, std::string>{{"slurm_job_id", "17"}, {"tracker", "wandb:late-7"}});
  CHECK_FALSE(replayed->reconciled);
  CHECK(ledger.budgets()[0].spent == usd(0.7));

  CHECK(replay_spool(ledger) == 0);
  CHECK_THROWS_AS(spool_final(ledger.url(), run_final("../escape", usd(1))), Error);
}

// Captures std::cerr while it lives.
class CerrCapture {
 public:
  CerrCapture() : old_(std::cerr.rdbuf(text_.rdbuf())) {}
  ~CerrCapture() { std::cerr.rdbuf(old_); }
  std::string text() const { return text_.str(); }

 private:
  std::stringstream text_;
  std::streambuf* old_;
};

TEST_CASE("Ledger spool: a row is replayed only when the ledger and the file vouch for it") {
  TempDir dir;
  ScopedEnv spool("SPENDCAP_SPOOL_DIR", dir.file("spool").c_str());
  TestClock clock(unix_time(2024, 1, 31, 12));
  SqliteLedger ledger(dir.file("ledger.db"), clock_options(clock));
  ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(100), Period::month, {}}}, true);
  const SpoolReplayer me{static_cast<std::int64_t>(getuid()), "testhost"};

  // Each forged row differs from a genuine one in one thing only, so each refusal is that check's.
  const std::vector<std::string> lost_runs = {"genuine", "other-user", "other-host", "above",
                                              "below",   "symlink",    "wrong-mode", "wrong-owner"};
  for (std::string id : lost_runs) {
    RunStart start = run_start(id, "vision", usd(1));
    if (id == "other-user") start.uid = me.uid + 1;
    if (id == "other-host") start.host = "elsewhere";
    ledger.begin_run(start);
    ledger.heartbeat(id, usd(0.3), usd(1));
  }
  clock.advance(3600);
  REQUIRE(ledger.reconcile_lost_runs() == static_cast<int>(lost_runs.size()));
  ledger.begin_run(run_start("running", "vision", usd(1)));
  ledger.heartbeat("running", usd(0.3), usd(1));
  Money ceiling = ledger.find_run("genuine")->ceiling;
  REQUIRE(ledger.find_run("genuine")->reported_spend == usd(0.3));

  auto spool_row = [&](const std::string& id, Money spend) {
    return spool_final(ledger.url(), run_final(id, spend, RunStatus::killed));
  };
  std::map<std::string, std::string> rows;
  for (std::string id :
       {"genuine", "other-user", "other-host", "running", "wrong-mode", "wrong-owner"}) {
    rows[id] = spool_row(id, usd(0.5));
  }
  rows["above"] = spool_row("above", ceiling + usd(0.01));
  rows["below"] = spool_row("below", usd(0.29));
  // A symlink to a genuine row, kept outside the spool.
  {
    ScopedEnv elsewhere("SPENDCAP_SPOOL_DIR", dir.file("outside").c_str());
    std::string target = spool_row("symlink", usd(0.5));
    rows["symlink"] = dir.file("spool/symlink.json");
    REQUIRE(::symlink(target.c_str(), rows["symlink"].c_str()) == 0);
  }
  REQUIRE(::chmod(rows["wrong-mode"].c_str(), 0640) == 0);
  bool as_root = geteuid() == 0;
  if (as_root) REQUIRE(::chown(rows["wrong-owner"].c_str(), 65534, 65534) == 0);

  // A spool directory others may write vouches for nothing: no file in it is touched.
  REQUIRE(::chmod(dir.file("spool").c_str(), 0755) == 0);
  {
    CerrCapture cerr;
    CHECK(replay_spool(ledger, me) == 0);
    CHECK(cerr.text().find("mode 0755, not 0700") != std::string::npos);
  }
  CHECK(exists(rows["genuine"]));
  REQUIRE(::chmod(dir.file("spool").c_str(), 0700) == 0);

  CerrCapture cerr;
  CHECK(replay_spool(ledger, me) == 1);
  std::string messages = cerr.text();
  INFO(messages);
  CHECK_FALSE(exists(rows["genuine"]));
  CHECK(ledger.find_run("genuine")->spend == usd(0.5));
  CHECK_FALSE(ledger.find_run("genuine")->reconciled);

  // The running run's row waits (its wrapper may finish it); every other forged row is refused,
  // reported, moved aside, and its run keeps its reconciled charge.
  CHECK(exists(rows["running"]));
  CHECK(messages.find("running.json waits: run running is still running") != std::string::npos);
  CHECK(ledger.find_run("running")->status == RunStatus::running);
  std::map<std::string, std::string> why = {
      {"other-user", "admitted by uid " + std::to_string(me.uid + 1)},
      {"other-host", "ran on elsewhere, not on testhost"},
      {"above", "above its ceiling"},
      {"below", "below the $0.30 of its last heartbeat"},
      {"symlink", "a symlink"},
      {"wrong-mode", "mode 0640, not 0600"},
      {"wrong-owner", "owned by uid 65534"}};
  if (!as_root) why.erase("wrong-owner");
  for (const auto& [id, reason] : why) {
    INFO(id);
    CHECK(messages.find(rows[id] + " is not replayed: ") != std::string::npos);
    CHECK(messages.find(reason) != std::string::npos);
    CHECK_FALSE(exists(rows[id]));
    CHECK(exists(rows[id] + ".bad"));
    std::optional<RunView> run = ledger.find_run(id);
    CHECK(run->reconciled);
    CHECK(run->spend == run->ceiling);
  }
  CHECK(exists(dir.file("outside/symlink.json")));  // the link's target is left alone

  // The waiting row goes in once its run is lost and the row's spend is within bounds.
  clock.advance(3600);
  CHECK(replay_spool(ledger, me) == 1);
  CHECK(ledger.find_run("running")->status == RunStatus::killed);
}

// Issue 33 (the fleet, 16 hosts): every run's start replays the spool, and each row that failed
// against an unreachable ledger waited out the ledger's retries, one after another.
TEST_CASE("Ledger spool: once a row fails against the ledger, the rest wait for the next replay") {
  TempDir dir;
  ScopedEnv spool("SPENDCAP_SPOOL_DIR", dir.file("spool").c_str());
  TestClock clock(unix_time(2024, 1, 31, 12));
  std::string path = dir.file("ledger.db");
  SqliteLedger ledger(path, clock_options(clock), {milliseconds(200), std::nullopt});
  // $10: each $1 claim is within a fair share of the team (free / (other runs + 2)).
  ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(10), Period::month, {}}}, true);
  for (const char* id : {"r1", "r2", "r3"}) {
    RunStart run = run_start(id, "vision", usd(1));
    run.host = SpoolReplayer::current().host;
    ledger.begin_run(run);
  }
  clock.advance(3600);
  REQUIRE(ledger.reconcile_lost_runs() == 3);
  for (const char* id : {"r1", "r2", "r3"}) {
    spool_final(ledger.url(), run_final(id, usd(0.5), RunStatus::killed));
  }
  RawDb holder(path);
  holder.exec("BEGIN IMMEDIATE");  // the ledger "unreachable": each write fails after 200 ms
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  {
    // The control: without the bound every row waits out the lock in turn.
    CerrCapture err;
    CHECK(replay_spool(ledger, SpoolReplayer::current(), std::chrono::hours(1)) == 0);
    CHECK(count(err.text(), "could not replay") == 3);
  }
  {
    CerrCapture err;
    auto started = std::chrono::steady_clock::now();
    CHECK(replay_spool(ledger, SpoolReplayer::current(), milliseconds(100)) == 0);
    CHECK(std::chrono::steady_clock::now() - started < milliseconds(550));
    CHECK(count(err.text(), "could not replay") == 1);
    CHECK(err.text().find("2 more spooled row(s) left for the next spendcap") != std::string::npos);
  }
  holder.exec("COMMIT");
  CHECK(replay_spool(ledger) == 3);  // nothing was dropped
  CHECK(ledger.find_run("r3")->spend == usd(0.5));
}

TEST_CASE("Ledger: a final spend above the ceiling is recorded as an overrun, never hidden") {
  TempDir dir;
  TestClock clock(unix_time(2024, 1, 31, 12));
  SqliteLedger ledger(dir.file("ledger.db"), clock_options(clock));
  ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(5), Period::month, {}}}, true);
  ledger.begin_run(run_start("late", "vision", usd(1)));
  ledger.begin_run(run_start("fine", "vision", usd(1)));
  Money ceiling = ledger.find_run("late")->ceiling;
  clock.advance(3600);
  REQUIRE(ledger.reconcile_lost_runs() == 2);
  CHECK(ledger.budgets()[0].overrun == Money{});
  // The stopped supervisor wakes up and its real final row replaces the reconciled charge.
  CHECK(ledger.finish_run(run_final("late", ceiling + usd(0.25), RunStatus::killed)));
  CHECK(ledger.finish_run(run_final("fine", ceiling - usd(0.25), RunStatus::killed)));
  std::optional<RunView> late = ledger.find_run("late");
  CHECK(late->overrun);
  CHECK(late->status == RunStatus::killed);
  CHECK(late->spend == ceiling + usd(0.25));
  CHECK_FALSE(ledger.find_run("fine")->overrun);
  BudgetView team = ledger.budgets()[0];
  CHECK(team.overrun == usd(0.25));
  CHECK(team.spent == ceiling + ceiling);
  CHECK(ledger.verify_aggregates().empty());
  // Listed (for `ps`) while recent: only the overrun, and no longer once its week has passed.
  std::vector<RunView> overruns = ledger.overrun_runs(7);
  REQUIRE(overruns.size() == 1);
  CHECK(overruns[0].id == "late");
  clock.advance(8 * 86400.0);
  CHECK(ledger.overrun_runs(7).empty());
}

TEST_CASE("Ledger spool: where the spool is") {
  ScopedEnv no_override("SPENDCAP_SPOOL_DIR", nullptr);
  {
    ScopedEnv state("XDG_STATE_HOME", "/srv/state");
    CHECK(spool_dir() == "/srv/state/spendcap/spool");
  }
  ScopedEnv no_state("XDG_STATE_HOME", nullptr);
  ScopedEnv home("HOME", "/home/alice");
  CHECK(spool_dir() == "/home/alice/.local/state/spendcap/spool");
}

}  // namespace spendcap::testing
