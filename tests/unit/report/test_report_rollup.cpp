// Reports from the ledger's rollups (ledger/rollup.hpp, report/report_rollup.hpp) against reports
// from a scan of every run: the same csv and json, on SQLite and on PostgreSQL, for every grouping
// a cut keeps, for periods that cut days and months, with a run that crosses midnight (and the
// month's end), a lost run charged its ceiling, a lost run whose spooled final row is replayed
// (twice), a run still running, a refused run, a run stopped after its checkpoint (whose waste is
// the spend after it, ledger/waste.hpp) and accepted results. The migrations that fill or change
// the cells (v14, v15, v26), from a ledger of the schema before each. And the plan's arithmetic.
#include <doctest/doctest.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>

#include "ledger/ledger_conformance.hpp"
#include "ledger/postgres/pg_test_support.hpp"
#include "ledger/sqlite/raw_db.hpp"
#include "spendcap/ledger/postgres/postgres_ledger.hpp"
#include "spendcap/ledger/rollup_sql.hpp"
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"
#include "spendcap/ledger/sqlite/sqlite_store.hpp"
#include "spendcap/ledger/waste.hpp"
#include "spendcap/report/report.hpp"
#include "spendcap/report/report_rollup.hpp"
#include "test_support.hpp"

namespace spendcap::testing {
namespace {

const double kDay = 86400;

TEST_CASE("Rollup plan: whole months from month cells, whole days from day cells, the rest rows") {
  const RollupCut& month = rollup_cut(3);
  const RollupCut& day = rollup_cut(4);
  double jan31_noon = unix_time(2024, 1, 31, 12);
  double mar2_six = unix_time(2024, 3, 2, 6);
  RollupRead read = plan_rollup_read(jan31_noon, mar2_six, &month, day);
  std::int64_t feb1 = static_cast<std::int64_t>(unix_time(2024, 2, 1) / kDay);
  std::int64_t mar1 = static_cast<std::int64_t>(unix_time(2024, 3, 1) / kDay);
  REQUIRE(read.run_ranges.size() == 2);
  CHECK(read.run_ranges[0] == std::pair{jan31_noon, unix_time(2024, 2, 1)});
  CHECK(read.run_ranges[1] == std::pair{unix_time(2024, 3, 2), mar2_six});
  REQUIRE(read.spans.size() == 2);  // February by month, March 1 by day (Jan 31 is partial)
  CHECK(read.spans[0].cut == 3);
  CHECK(read.spans[0].first_bucket == feb1);
  CHECK(read.spans[0].last_bucket == feb1);
  CHECK(read.spans[0].end_day() == mar1);
  CHECK(read.spans[1].cut == 4);
  CHECK(read.spans[1].first_bucket == mar1);
  CHECK(read.spans[1].last_bucket == mar1);
  CHECK(read.covers_day(feb1 + 28));
  CHECK_FALSE(read.covers_day(feb1 - 1));
  CHECK(month_start_day(feb1 + 10) == feb1);
  CHECK(next_month_day(feb1) == mar1);

  // Within one day: rows only. Open-ended: every month from 1970 on.
  RollupRead hour = plan_rollup_read(jan31_noon, jan31_noon + 3600, &month, day);
  CHECK(hour.spans.empty());
  CHECK(hour.run_ranges.size() == 1);
  RollupRead all = plan_rollup_read(0, 1e300, &month, day);
  CHECK(all.run_ranges.empty());
  REQUIRE_FALSE(all.spans.empty());
  CHECK(all.spans[0].cut == 3);
  CHECK(all.spans[0].first_bucket == 0);

  // A tag needs the runs; project needs the day cut; team and experiment a month cut.
  ReportOptions options;
  options.by = {*parse_group_by("tag:lr")};
  CHECK_FALSE(report_rollup_read(options, false));
  options.by = {*parse_group_by("project")};
  CHECK(report_rollup_read(options, false)->spans[0].cut == 4);
  options.by = {*parse_group_by("day")};
  CHECK(report_rollup_read(options, false)->spans[0].cut == 6);
  options.by = {*parse_group_by("day"), *parse_group_by("experiment")};
  CHECK(report_rollup_read(options, false)->spans[0].cut == 7);
  options.by = {*parse_group_by("experiment")};
  CHECK(report_rollup_read(options, false)->spans[0].cut == 2);
  options.by = {*parse_group_by("team")};
  CHECK(report_rollup_read(options, false)->spans[0].cut == 1);
  options.team = "vision";
  options.by = {*parse_group_by("experiment")};
  CHECK(report_rollup_read(options, false)->spans[0].cut == 5);  // every run: the total cut
  options.since = unix_time(2024, 1, 1);
  CHECK(report_rollup_read(options, false)->spans[0].cut == 3);
}

using Opener = std::function<std::unique_ptr<Ledger>(LedgerOptions)>;

RunStart start(const std::string& id, const std::string& team, const std::string& experiment,
               const std::string& user, Money want) {
  RunStart run = run_start(id, team, want);
  run.experiment = experiment;
  run.project = "p-" + experiment;
  run.user = user;
  run.host = user == "alice" ? "h1" : "h2";
  run.pricing = team == "nlp" ? Pricing::spot : Pricing::on_demand;
  return run;
}

RunFinal measured(const std::string& id, Money spend, RunStatus status, double metric) {
  RunFinal final = run_final(id, spend, status);
  RunGpu gpu;
  gpu.devices = 1;
  gpu.allocated_seconds = 3600;
  gpu.busy_seconds = 1800;
  gpu.idle_spend = usd(0.25);
  gpu.energy_kwh = 1.5;
  gpu.co2_kg = 0.5;
  final.gpu = gpu;
  final.metric_name = "val_acc";
  final.metric_value = metric;
  final.units = 1024;
  final.egress_gb = 2.5;
  final.storage_peak_gb = 3;
  final.storage_spend = usd(0.01);
  return final;
}

// Tripped 9.7 s after launch, its checkpoint written at 3.3 s: its waste is $0.125 x 6.4 / 9.7,
// rounded down (kA3Waste), where it was the whole $0.125 before v26.
RunFinal checkpointed_a3() {
  RunFinal a3 = run_final("a3", usd(0.125), RunStatus::killed);
  a3.elapsed_seconds = 9.7;
  a3.checkpoint = RunCheckpoint{"SIGUSR1", 1, 3.0, 3.3};
  return a3;
}
const Money kA3Waste{82'474};

// The waste of the whole ledger, as a report from the rollups gives it.
Money total_waste(Ledger& ledger) {
  ReportOptions options;
  ReportSource source;
  source.read = report_rollup_read(options, false);
  source.until = 1e300;
  ReportBuilder builder(options);
  REQUIRE(add_ledger_runs(ledger, source, {&builder}));
  return std::move(builder).finish().total.waste;
}

// The report of `options` both ways, as csv and json; `rollups` says whether they were read.
std::string report_text(Ledger& ledger, const ReportOptions& options, bool from_rollups,
                        bool* rollups_read) {
  ReportSource source;
  if (from_rollups) source.read = report_rollup_read(options, false);
  source.since = options.since.value_or(0);
  source.until = options.until.value_or(1e300);
  for (const AcceptedResult& a : ledger.accepted_results()) source.accepted.insert(a.run_id);
  source.egress_price = usd(0.09);
  ReportBuilder builder(options);
  *rollups_read = add_ledger_runs(ledger, source, {&builder});
  Report report = std::move(builder).finish();
  return report_csv(report, "USD") + report_json(report, "USD");
}

void check_same_reports(Ledger& ledger) {
  std::vector<ReportOptions> cases;
  auto add = [&](std::vector<std::string> by, std::optional<double> since = std::nullopt,
                 std::optional<double> until = std::nullopt) {
    ReportOptions options;
    for (const std::string& text : by) options.by.push_back(*parse_group_by(text));
    options.since = since;
    options.until = until;
    cases.push_back(options);
  };
  for (auto by : std::vector<std::vector<std::string>>{{},
                                                       {"team"},
                                                       {"experiment"},
                                                       {"team", "experiment"},
                                                       {"project"},
                                                       {"user"},
                                                       {"host"},
                                                       {"day"},
                                                       {"day", "team"}}) {
    add(by);
    add(by, unix_time(2024, 1, 31, 12), unix_time(2024, 2, 1, 12));  // partial days
    add(by, unix_time(2024, 1, 1), unix_time(2024, 2, 1));           // one month
    add(by, unix_time(2024, 1, 31), unix_time(2024, 2, 2));          // whole days
    add(by, unix_time(2024, 2, 1));                                  // open-ended
  }
  ReportOptions filtered;
  filtered.by = {*parse_group_by("experiment")};
  filtered.team = "vision";
  cases.push_back(filtered);
  filtered.team.reset();
  filtered.experiment = "resnet";
  filtered.by = {*parse_group_by("user")};
  cases.push_back(filtered);
  ReportOptions baselines;
  baselines.by = {*parse_group_by("team")};
  baselines.experiment_baselines["resnet"] = Baseline{"val_acc", 0.75, MetricGoal::max};
  cases.push_back(baselines);
  baselines.baseline = Baseline{"", 0.7, MetricGoal::max};
  cases.push_back(baselines);

  for (const ReportOptions& options : cases) {
    std::string by;
    for (const GroupBy& group : options.by) by += to_string(group) + " ";
    CAPTURE(by);
    CAPTURE(options.since.value_or(-1));
    CAPTURE(options.until.value_or(-1));
    bool scanned_rollups = true, read_rollups = false;
    std::string scan = report_text(ledger, options, false, &scanned_rollups);
    std::string rollups = report_text(ledger, options, true, &read_rollups);
    CHECK_FALSE(scanned_rollups);
    CHECK(read_rollups);
    CHECK(rollups == scan);
  }
}

void rollups_equal_a_scan(const Opener& open) {
  TestClock clock(unix_time(2024, 1, 30, 10));
  LedgerOptions options;
  options.wall_clock = [&] { return clock.now(); };
  options.caller = Caller{"alice"};
  std::unique_ptr<Ledger> ledger = open(options);
  ledger->apply_budgets({{{ScopeKind::team, "vision"}, usd(1000), Period::month, std::nullopt},
                         {{ScopeKind::team, "nlp"}, usd(1000), Period::month, std::nullopt}},
                        true);
  auto begin = [&](const RunStart& run) { REQUIRE(ledger->begin_run(run).admitted); };

  begin(start("a1", "vision", "resnet", "alice", usd(5)));
  clock.advance(60);
  REQUIRE(ledger->finish_run(measured("a1", usd(0.5), RunStatus::succeeded, 0.8)));
  clock.set(unix_time(2024, 1, 30, 11));
  begin(start("a2", "vision", "vit", "bob", usd(5)));
  REQUIRE(ledger->finish_run(measured("a2", usd(0.25), RunStatus::failed, 0.85)));
  clock.set(unix_time(2024, 1, 31, 12));
  begin(start("a3", "nlp", "bert", "carol", usd(5)));
  REQUIRE(ledger->finish_run(checkpointed_a3()));

  // Crosses midnight and the month's end: it belongs to January 31.
  clock.set(unix_time(2024, 1, 31, 23, 50));
  begin(start("mid", "vision", "resnet", "alice", usd(5)));
  // Lost: no heartbeat; charged their ceilings once due (100 s + 10 s of shutdown).
  clock.set(unix_time(2024, 1, 31, 23, 55));
  begin(start("lost1", "nlp", "bert", "carol", usd(0.1)));
  begin(start("lost2", "vision", "vit", "bob", usd(0.1)));
  clock.set(unix_time(2024, 2, 1, 0, 5));
  ledger->heartbeat("mid", usd(0.5), usd(5));
  CHECK(ledger->reconcile_lost_runs() == 0);  // the heartbeat's transaction reconciled them
  REQUIRE(ledger->find_run("lost1")->reconciled);
  REQUIRE(ledger->find_run("lost2")->reconciled);
  clock.set(unix_time(2024, 2, 1, 0, 20));
  REQUIRE(ledger->finish_run(measured("mid", usd(1.5), RunStatus::succeeded, 0.9)));
  check_same_reports(*ledger);
  // a2 failed, a3 killed after its checkpoint, lost1 and lost2 charged their ceilings.
  CHECK(wasted_spend(RunStatus::killed, usd(0.125), 9.7, 3.3) == kA3Waste);
  CHECK(total_waste(*ledger) ==
        usd(0.25) + kA3Waste + ledger->find_run("lost1")->spend + ledger->find_run("lost2")->spend);

  // lost2's spooled final row arrives, and is replayed again: the charge is replaced once.
  clock.set(unix_time(2024, 2, 1, 9));
  REQUIRE(ledger->finish_run(run_final("lost2", usd(0.0625), RunStatus::killed)));
  CHECK_FALSE(ledger->finish_run(run_final("lost2", usd(0.09), RunStatus::killed)));
  begin(start("pre", "vision", "resnet", "alice", usd(5)));
  REQUIRE(ledger->finish_run(measured("pre", usd(0.375), RunStatus::preempted, 0.7)));
  clock.set(unix_time(2024, 2, 1, 10));
  RunStart refused = start("ref", "nlp", "bert", "carol", usd(1));
  ledger->record_refused(refused, "runaway:crash-loop");
  ledger->accept_run("a1", "kept", "alice@h1");
  ledger->accept_run("mid", "kept", "alice@h1");
  // Still running: added from its row.
  clock.set(unix_time(2024, 2, 2, 10));
  begin(start("now", "vision", "resnet", "alice", usd(5)));
  clock.advance(60);
  ledger->heartbeat("now", usd(0.0625), usd(5));
  check_same_reports(*ledger);

  // The crossing run is January's: a report of February from the rollups does not hold it.
  ReportOptions february;
  february.since = unix_time(2024, 2, 1);
  february.until = unix_time(2024, 3, 1);
  bool read = false;
  std::string text = report_text(*ledger, february, true, &read);
  CHECK(read);
  ReportBuilder builder(february);
  ReportSource source;
  source.read = report_rollup_read(february, false);
  CHECK(add_ledger_runs(*ledger, source, {&builder}));
  Report report = std::move(builder).finish();
  CHECK(report.total.runs == 3);  // pre, ref, now (lost2 started on January 31 too)
  CHECK(report.total.running == 1);
}

}  // namespace

TEST_CASE("Rollups: a report from them equals a scan's, on SQLite (and after a rebuild)") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  rollups_equal_a_scan(
      [&](LedgerOptions options) { return std::make_unique<SqliteLedger>(path, options); });
  SqliteLedger ledger(path, {});
  CHECK(ledger.verify_aggregates().empty());
  ledger.rebuild_aggregates();
  check_same_reports(ledger);

  // The negative control: a cell one micro-unit off is seen by the check and by the comparison.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "UPDATE rollups SET spend_micros = spend_micros + 1 WHERE cut = 1",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  CHECK_FALSE(ledger.verify_aggregates().empty());
  ReportOptions options;
  options.by = {*parse_group_by("team")};
  bool scanned = true, read = false;
  CHECK(report_text(ledger, options, true, &read) != report_text(ledger, options, false, &scanned));
}

// Schema v27's column (the ETA), v23's table (refused runs counted), v22's column (spendcap's own
// exit) and v19's (the whole record of a run), dropped to go back to an older schema.
constexpr const char* kUndoV19 =
    "ALTER TABLE runs DROP COLUMN progress_eta_at; "
    "DROP TABLE refused_counts; ALTER TABLE runs DROP COLUMN spendcap_exit_code; "
    "ALTER TABLE runs DROP COLUMN cwd; ALTER TABLE runs DROP COLUMN run_budget_micros; "
    "ALTER TABLE runs DROP COLUMN budget_source; ALTER TABLE runs DROP COLUMN progress_step; "
    "ALTER TABLE runs DROP COLUMN progress_total_steps; ALTER TABLE runs DROP COLUMN "
    "progress_line; ALTER TABLE runs DROP COLUMN checkpoint_signal; ALTER TABLE runs DROP "
    "COLUMN checkpoint_signalled; ALTER TABLE runs DROP COLUMN checkpoint_signal_seconds; "
    "ALTER TABLE runs DROP COLUMN checkpoint_written_seconds; ";

TEST_CASE("Rollups: the migration to v14 backfills them from the runs already there (SQLite)") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  rollups_equal_a_scan(
      [&](LedgerOptions options) { return std::make_unique<SqliteLedger>(path, options); });
  // Back to schema 12, as a ledger of the spendcap before rollups was: then opened again.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  std::string undo =
      std::string(
          "DROP TRIGGER runs_rollup_insert; DROP TRIGGER runs_rollup_update; "
          "DROP TRIGGER runs_rollup_delete; DROP TABLE rollup_journal; DROP TABLE rollups; "
          "DROP TABLE rollup_metrics; DROP INDEX runs_overrun; DROP INDEX runs_started; "
          "DROP TABLE budget_warnings; ALTER TABLE runs DROP COLUMN commitment_micros; "
          "ALTER TABLE outbox DROP COLUMN claimed_by; ALTER TABLE outbox DROP COLUMN "
          "claimed_until; ") +
      kUndoV19 + "DELETE FROM schema_version WHERE version >= 13";
  REQUIRE(sqlite3_exec(db, undo.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  SqliteLedger ledger(path, {});
  CHECK(ledger.schema_version() == SqliteStore::latest_schema_version());
  CHECK(ledger.verify_aggregates().empty());
  check_same_reports(ledger);
}

TEST_CASE(
    "Rollups: the migration to v15 keeps v14's cells and moves them to the journal (SQLite)") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  {
    // A ledger of schema 13 (v14's triggers), filled by v14's triggers.
    SqliteLedger created(path, {});
    RawDb raw(path);
    raw.exec(
        "DROP TRIGGER runs_rollup_insert; DROP TRIGGER runs_rollup_update; "
        "DROP TRIGGER runs_rollup_delete; DROP TABLE rollup_journal; DELETE FROM "
        "schema_version WHERE version >= 14; DROP TABLE budget_warnings; "
        "ALTER TABLE runs DROP COLUMN commitment_micros; ALTER TABLE outbox DROP COLUMN "
        "claimed_by; ALTER TABLE outbox DROP COLUMN claimed_until; " +
        std::string(kUndoV19) + rollup_sql::sqlite_v14_triggers());
  }
  // Opening migrates to 14 before anything is written: the runs go through the journal.
  rollups_equal_a_scan(
      [&](LedgerOptions options) { return std::make_unique<SqliteLedger>(path, options); });
  SqliteLedger ledger(path, {});
  CHECK(ledger.schema_version() == SqliteStore::latest_schema_version());
  CHECK(ledger.verify_aggregates().empty());
  RawDb raw(path);
  CHECK(raw.count("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND "
                  "length(sql) > 8000") == 0);
  CHECK(raw.count("SELECT count(*) FROM rollup_journal") == 0);
}

std::string copy_run_sql(const std::string& from, const std::string& to);  // below

// v26's schema version (the labels skip v9): the one before the latest, v27's (the ETA column,
// which these cases drop to go back past it: kUndoV27).
const int kV26 = SqliteStore::latest_schema_version() - 1;
constexpr const char* kUndoV27 = "ALTER TABLE runs DROP COLUMN progress_eta_at; ";

// The id of the cut of every run (the total grain): its cells' sum is the ledger's.
int total_cut() {
  for (const RollupCut& cut : rollup_cuts()) {
    if (cut.grain == RollupGrain::total) return cut.id;
  }
  FAIL("no total cut");
  return 0;
}

TEST_CASE(
    "Rollups: the migration to v26 recounts the waste of a run stopped after its checkpoint "
    "(SQLite)") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  rollups_equal_a_scan(
      [&](LedgerOptions options) { return std::make_unique<SqliteLedger>(path, options); });
  std::string total =
      "SELECT sum(waste_micros) FROM rollups WHERE cut = " + std::to_string(total_cut());
  std::int64_t waste = 0;
  {
    // Back to v25: v15's journal and triggers, and the cells as v14's rules count them.
    RawDb raw(path);
    waste = raw.count(total);
    raw.exec(
        "DROP TRIGGER runs_rollup_insert; DROP TRIGGER runs_rollup_update; "
        "DROP TRIGGER runs_rollup_delete; ALTER TABLE rollup_journal DROP COLUMN "
        "elapsed_seconds; ALTER TABLE rollup_journal DROP COLUMN checkpoint_written_seconds; " +
        rollup_sql::sqlite_journal_triggers() + rollup_sql::rebuild(rollup_sql::Dialect::sqlite) +
        kUndoV27 + "DELETE FROM schema_version WHERE version >= " + std::to_string(kV26));
    // v25 counted a3's whole spend.
    REQUIRE(raw.count(total) == waste + usd(0.125).micros - kA3Waste.micros);
  }
  // At the clock the runs were written at: the running run is not due.
  LedgerOptions options;
  options.wall_clock = [] { return unix_time(2024, 2, 2, 10, 2); };
  SqliteLedger ledger(path, options);
  CHECK(ledger.schema_version() == SqliteStore::latest_schema_version());
  CHECK(ledger.verify_aggregates().empty());
  check_same_reports(ledger);
  RawDb raw(path);
  CHECK(raw.count(total) == waste);
  // The journal keeps what v26's waste reads: a run stopped after its checkpoint, copied in the
  // shell, is counted by the same rule once folded.
  raw.exec(copy_run_sql("a3", "copya3"));
  CHECK(raw.count("SELECT count(*) FROM rollup_journal WHERE elapsed_seconds = 9.7 AND "
                  "checkpoint_written_seconds = 3.3") == 1);
  CHECK(total_waste(ledger) == Money{waste} + kA3Waste);
  for (const std::string& line : ledger.verify_aggregates()) {
    CAPTURE(line);
    CHECK(line.rfind("rollup (", 0) != 0);
  }
}

// A finished run copied under a new id, as an administrator might in the sqlite3 shell: one row in
// the journal (its insert trigger).
std::string copy_run_sql(const std::string& from, const std::string& to) {
  return "INSERT INTO runs SELECT '" + to +
         "', job_key, team, experiment, project, user_name, "
         "tags, command, fingerprint, host, pid, mode, status, reason, exit_code, "
         "rate_micros_per_hour, reserve_micros, budget_micros, shutdown_ms, sync_ms, "
         "started_at, day, heartbeat_at, reconcile_at, finished_at, spend_micros, "
         "ceiling_micros, allowed_micros, reconciled, would_stop_at, would_stop_reason, "
         "elapsed_seconds, uid, reported_spend_micros, overrun, gpu_measured, "
         "gpu_not_measured, gpu_devices, gpu_allocated_seconds, gpu_busy_seconds, "
         "gpu_idle_spend_micros, gpu_energy_kwh, gpu_co2_kg, gpu_energy_cost_micros, "
         "gpu_sources, gpu_timeline, metric_name, metric_value + 0.5, units, egress_gb, "
         "storage_peak_gb, storage_spend_micros, pricing, commitment_micros, cwd, "
         "run_budget_micros, budget_source, progress_step, progress_total_steps, progress_line, "
         "checkpoint_signal, checkpoint_signalled, checkpoint_signal_seconds, "
         "checkpoint_written_seconds, spendcap_exit_code, progress_eta_at FROM runs "
         "WHERE id = '" +
         from + "'";
}

TEST_CASE(
    "Rollups: rows waiting in the journal count in reports and verify; a report folds them, "
    "or reads them beside the cells while another holds the write lock (SQLite)") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  rollups_equal_a_scan(
      [&](LedgerOptions options) { return std::make_unique<SqliteLedger>(path, options); });
  // At the clock the runs were written at: no run is due, so reports only read. A short lock
  // timeout: a report waits at most that long to fold.
  LedgerOptions options;
  options.wall_clock = [] { return unix_time(2024, 2, 2, 10, 2); };
  SqliteOptions sqlite_options;
  sqlite_options.lock_timeout = std::chrono::milliseconds(5);
  SqliteLedger ledger(path, options, sqlite_options);
  RawDb raw(path);
  REQUIRE(raw.count("SELECT count(*) FROM rollup_journal") == 0);  // the reports folded them
  // An administrator's edits in the sqlite3 shell, while the ledger is open: a finished run
  // copied under a new id, two changed. The triggers journal them; nothing folds them. (Not a
  // deletion: a cell's first and last start only widen, so deleting a cell's earliest run leaves
  // verify a difference to show.)
  raw.exec(copy_run_sql("a1", "copya1") +
           "; UPDATE runs SET spend_micros = spend_micros * 2, project = 'moved' WHERE id = 'a2'; "
           "UPDATE runs SET status = 'failed' WHERE id = 'a3'");
  REQUIRE(raw.count("SELECT count(*) FROM rollup_journal") == 5);
  // (The edits leave the budgets' usage rows behind too: only the rollups' lines count here.)
  auto rollups_differ = [&ledger] {
    for (const std::string& line : ledger.verify_aggregates()) {
      if (line.rfind("rollup (", 0) == 0) return true;
    }
    return false;
  };
  CHECK_FALSE(rollups_differ());
  {
    // Another holds the write lock: the reports cannot fold, and read the rows beside the cells.
    RawDb holder(path);
    holder.exec("BEGIN IMMEDIATE");
    check_same_reports(ledger);
    holder.exec("ROLLBACK");
  }
  CHECK(raw.count("SELECT count(*) FROM rollup_journal") == 5);
  // The negative control: the journal's rows left out, the cells are behind the runs.
  raw.exec("CREATE TABLE kept AS SELECT * FROM rollup_journal; DELETE FROM rollup_journal");
  CHECK(rollups_differ());
  raw.exec("INSERT INTO rollup_journal SELECT * FROM kept; DROP TABLE kept");
  CHECK_FALSE(rollups_differ());
  // A write leaves a few rows waiting (one more: a refused run's)...
  ledger.record_refused(start("ref2", "nlp", "bert", "carol", usd(1)), "runaway:crash-loop");
  CHECK(raw.count("SELECT count(*) FROM rollup_journal") == 6);
  CHECK_FALSE(rollups_differ());
  // ...and a report folds them before it reads.
  check_same_reports(ledger);
  CHECK(raw.count("SELECT count(*) FROM rollup_journal") == 0);
  CHECK_FALSE(rollups_differ());
}

TEST_CASE("Rollups: a write folds the journal once it holds 32 rows (SQLite)") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  rollups_equal_a_scan(
      [&](LedgerOptions options) { return std::make_unique<SqliteLedger>(path, options); });
  LedgerOptions options;
  options.wall_clock = [] { return unix_time(2024, 2, 2, 10, 2); };
  SqliteLedger ledger(path, options);
  RawDb raw(path);
  REQUIRE(raw.count("SELECT count(*) FROM rollup_journal") == 0);
  for (int copy = 0; copy < 30; ++copy) {
    raw.exec(copy_run_sql("a1", "copy" + std::to_string(copy)));
  }
  // 31 rows after the refused run's: not yet.
  ledger.record_refused(start("ref2", "nlp", "bert", "carol", usd(1)), "runaway:crash-loop");
  CHECK(raw.count("SELECT count(*) FROM rollup_journal") == 31);
  // The 32nd: folded in the write that made it.
  ledger.record_refused(start("ref3", "nlp", "bert", "carol", usd(1)), "runaway:crash-loop");
  CHECK(raw.count("SELECT count(*) FROM rollup_journal") == 0);
  // (The shell's copies leave the usage rows behind: only the rollups' lines count here. No
  // report against a scan: 30 copies of one run's egress priced once per cell or once per run
  // differ in the last bits.)
  for (const std::string& line : ledger.verify_aggregates()) {
    CAPTURE(line);
    CHECK(line.rfind("rollup (", 0) != 0);
  }
  // The negative control: a cell changed behind the fold's back is seen.
  raw.exec("UPDATE rollups SET runs = runs + 1 WHERE cut = 1");
  CHECK(ledger.verify_aggregates().back().rfind("rollup (", 0) == 0);
}

TEST_CASE("Rollups: a report from them equals a scan's, on postgresql") {
  std::string url = fresh_pg_ledger_url("rollup");
  rollups_equal_a_scan(
      [&](LedgerOptions options) { return std::make_unique<PostgresLedger>(url, options); });
}

// The schema of a fresh_pg_ledger_url: its search_path, or through a pooler the role named so.
std::string schema_of(const std::string& url) {
  std::string::size_type at = url.find("search_path%3D");
  if (at != std::string::npos) return url.substr(at + 14);
  std::string::size_type start = url.find("://") + 3;
  return url.substr(start, url.find('@', start) - start);
}

// psql's output of `sql` in `schema` on the test server (PGHOST, PGPORT), unaligned.
std::string psql_in(const std::string& schema, const std::string& sql) {
  TempDir dir;
  std::string script = dir.file("script.sql"), out = dir.file("script.out");
  std::ofstream(script) << "SET search_path = " << schema << ";\n" << sql << ";\n";
  std::string command = "psql -X -q -v ON_ERROR_STOP=1 -At -f " + script + " > " + out;
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream answer(out);
  std::string text((std::istreambuf_iterator<char>(answer)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

TEST_CASE(
    "Rollups: the migration to v26 recounts the waste of a run stopped after its checkpoint, "
    "on postgresql") {
  std::string url = fresh_pg_ledger_url("waste");
  rollups_equal_a_scan(
      [&](LedgerOptions options) { return std::make_unique<PostgresLedger>(url, options); });
  std::string schema = schema_of(url);
  std::string total =
      "SELECT sum(waste_micros) FROM rollups WHERE cut = " + std::to_string(total_cut());
  std::int64_t waste = std::stoll(psql_in(schema, total));
  // Back to v25: the cells as v14's rules count them (routines() are reinstalled by the
  // migration).
  psql_in(schema, rollup_sql::rebuild(rollup_sql::Dialect::postgres) + kUndoV27 +
                      "DELETE FROM schema_version WHERE version >= " + std::to_string(kV26));
  REQUIRE(std::stoll(psql_in(schema, total)) == waste + usd(0.125).micros - kA3Waste.micros);
  LedgerOptions options;
  options.wall_clock = [] { return unix_time(2024, 2, 2, 10, 2); };
  PostgresLedger ledger(url, options);
  CHECK(ledger.schema_version() == SqliteStore::latest_schema_version());
  CHECK(ledger.verify_aggregates().empty());
  check_same_reports(ledger);
  CHECK(std::stoll(psql_in(schema, total)) == waste);
  CHECK(total_waste(ledger) == Money{waste});
}

}  // namespace spendcap::testing
