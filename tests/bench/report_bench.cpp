// `spendcap report` grouped by team and by experiment over a ledger of 1,000,000 runs (issue 11's
// benchmark: under 1 s; issue 23 item 3's goals from the rollups: --by experiment <= 0.2 s, --by
// team --by experiment <= 0.3 s). Seeds a SQLite ledger (schema by SqliteLedger, rows by plain
// INSERTs in one transaction, the rollups then backfilled as the migration does), then times the
// report's own path both ways in the same run, interleaved: the ledger's runs streamed into a
// ReportBuilder (scan, as before the rollups), and the rollups' cells (rollups), grouped and the
// table rendered. Each pass checks that both ways give the same table and total.
//
//   report_bench [--runs N] [--dir DIR] [--repeat K] [--reuse yes] [--rollups-only yes]
// (--rollups-only yes: the rollups' passes alone, unchecked against a scan: for a profiler.)
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "spendcap/ledger/ledger_store.hpp"
#include "spendcap/ledger/rollup_sql.hpp"
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"
#include "spendcap/report/report.hpp"
#include "spendcap/report/report_rollup.hpp"

using namespace spendcap;
using SteadyClock = std::chrono::steady_clock;

namespace {

void seed(const std::string& path, std::int64_t runs) {
  { SqliteLedger ledger(path, {}); }  // creates the schema
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("open");
  // Bulk seeding: the rollups' triggers are dropped, and the rollups filled afterwards the way the
  // migration backfills them (one upsert per cut and run into b-trees far bigger than SQLite's
  // page cache made seeding a million runs take over ten minutes here).
  std::string unseeded =
      "PRAGMA synchronous = OFF; PRAGMA cache_size = -1000000; DROP TRIGGER runs_rollup_insert; "
      "DROP TRIGGER runs_rollup_update; DROP TRIGGER runs_rollup_delete; BEGIN";
  if (sqlite3_exec(db, unseeded.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    throw std::runtime_error(sqlite3_errmsg(db));
  }
  sqlite3_stmt* insert = nullptr;
  const char* sql =
      "INSERT INTO runs (id, job_key, team, experiment, project, user_name, tags, command, "
      "fingerprint, host, pid, mode, status, reason, exit_code, rate_micros_per_hour, "
      "reserve_micros, budget_micros, shutdown_ms, sync_ms, started_at, day, heartbeat_at, "
      "reconcile_at, finished_at, spend_micros, ceiling_micros, allowed_micros, reconciled, "
      "would_stop_at, would_stop_reason, elapsed_seconds) VALUES (?1, NULL, ?2, ?3, ?4, ?5, "
      "?6, '[\"python\",\"train.py\"]', 'f', 'host', 1, 'enforce', ?7, 'exited', 0, "
      "36000000, 110000, NULL, 11000, 5000, ?8, ?9, ?10, ?10, ?10, ?11, ?11, ?11, 0, NULL, '', "
      "?12)";
  if (sqlite3_prepare_v2(db, sql, -1, &insert, nullptr) != SQLITE_OK) {
    throw std::runtime_error(sqlite3_errmsg(db));
  }
  std::uint64_t state = 42;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const char* statuses[] = {"succeeded", "succeeded", "succeeded", "failed", "killed", "lost"};
  const double start = 1'780'000'000;
  for (std::int64_t i = 0; i < runs; ++i) {
    std::string id = "run-" + std::to_string(i);
    std::string team = "team-" + std::to_string(next() % 50);
    std::string experiment = "exp-" + std::to_string(next() % 2000);
    std::string project = "project-" + std::to_string(next() % 100);
    std::string user = "user-" + std::to_string(next() % 500);
    // One run in ten carries a tag (the rest '{}', as most runs do).
    std::string tags = i % 10 == 0 ? "{\"lr\":\"" + std::to_string(next() % 5) + "e-4\"}" : "{}";
    double started = start + static_cast<double>(next() % (90 * 86400));
    std::int64_t spend = static_cast<std::int64_t>(next() % 100'000'000);
    sqlite3_bind_text(insert, 1, id.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 2, team.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 3, experiment.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 4, project.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 5, user.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 6, tags.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(insert, 7, statuses[next() % 6], -1, SQLITE_STATIC);
    sqlite3_bind_double(insert, 8, started);
    sqlite3_bind_int64(insert, 9, static_cast<std::int64_t>(started / 86400));
    sqlite3_bind_double(insert, 10, started + 3600);
    sqlite3_bind_int64(insert, 11, spend);
    sqlite3_bind_double(insert, 12, 3600);
    if (sqlite3_step(insert) != SQLITE_DONE) throw std::runtime_error(sqlite3_errmsg(db));
    sqlite3_reset(insert);
  }
  sqlite3_finalize(insert);
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  std::string triggers = rollup_sql::sqlite_journal_triggers(rollup_sql::kLatestRules);
  if (sqlite3_exec(db, triggers.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    throw std::runtime_error(sqlite3_errmsg(db));
  }
  sqlite3_close(db);
  SqliteLedger(path, {}).rebuild_aggregates();  // the usage rows and the rollups
  // A ledger in use keeps its WAL short (SQLite checkpoints every 1,000 pages); the bulk writes
  // above leave hundreds of MB that every open would read again.
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("open");
  sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  sqlite3_close(db);
}

// CPU seconds of this process: on a loaded machine wall time measures the other processes too.
double cpu_seconds() {
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

// The ledger's scan alone (SQLite's steps and the projection into one record), to tell its cost
// from the grouping's.
void scan_only(const std::string& path) {
  auto started = SteadyClock::now();
  double cpu = cpu_seconds();
  SqliteLedger ledger(path, {});
  std::int64_t rows = 0;
  ledger.for_each_run_started(0, 1e18, [&](const RunRecord&) { ++rows; });
  std::printf("scan only: %lld runs in %.3f s (%.3f s CPU)\n", static_cast<long long>(rows),
              std::chrono::duration<double>(SteadyClock::now() - started).count(),
              cpu_seconds() - cpu);
}

struct Pass {
  double seconds = 0;
  std::int64_t groups = 0, cells = 0;
  Money total;
  std::string table;
};

// One report as `spendcap report --by ...` makes it: from the rollups, or (rollups = false) from
// every run, as before them.
Pass report_pass(const std::string& path, const std::vector<GroupBy>& by, bool rollups) {
  auto started = SteadyClock::now();
  double cpu = cpu_seconds();
  SqliteLedger ledger(path, {});
  ReportOptions options;
  options.by = by;
  ReportBuilder builder(options);
  ReportSource source;
  if (rollups) source.read = report_rollup_read(options, false);
  source.until = 1e18;
  Pass pass;
  source.on_cell = [&pass](const RollupCell&) { ++pass.cells; };
  bool from_rollups = add_ledger_runs(ledger, source, {&builder});
  if (from_rollups != rollups) throw std::runtime_error("rollups not read as asked");
  Report report = std::move(builder).finish();
  auto grouped = SteadyClock::now();
  // Written as `spendcap report` writes it (a part at a time), into a digest of its bytes: the
  // table is compared between the two ways without being held whole.
  std::uint64_t digest = 1469598103934665603ull;
  std::size_t bytes = 0;
  write_report_table(report, "USD", 160, [&](std::string_view part) {
    for (unsigned char c : part) digest = (digest ^ c) * 1099511628211ull;
    bytes += part.size();
  });
  pass.table = std::to_string(bytes) + " bytes, fnv-1a " + std::to_string(digest);
  std::printf(
      "  %s: read and grouped in %.3f s (%lld cells), table in %.3f s; %.3f s CPU\n",
      rollups ? "rollups" : "scan   ", std::chrono::duration<double>(grouped - started).count(),
      static_cast<long long>(pass.cells),
      std::chrono::duration<double>(SteadyClock::now() - grouped).count(), cpu_seconds() - cpu);
  pass.seconds = std::chrono::duration<double>(SteadyClock::now() - started).count();
  pass.groups = static_cast<std::int64_t>(report.groups.size());
  pass.total = report.total.spend;
  if (pass.table.empty()) throw std::runtime_error("no table");
  return pass;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t runs = 1'000'000;
  int repeat = 5;
  std::string dir;
  bool reuse = false;  // --reuse yes: time DIR's ledger of an earlier --dir run again
  bool rollups_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--runs") {
      runs = std::atoll(argv[i + 1]);
    } else if (flag == "--dir") {
      dir = argv[i + 1];
    } else if (flag == "--repeat") {
      repeat = std::atoi(argv[i + 1]);
    } else if (flag == "--reuse") {
      reuse = std::string(argv[i + 1]) == "yes";
    } else if (flag == "--rollups-only") {
      rollups_only = std::string(argv[i + 1]) == "yes";
    } else {
      std::fprintf(stderr,
                   "usage: report_bench [--runs N] [--dir DIR] [--repeat K] [--reuse yes] "
                   "[--rollups-only yes]\n");
      return 2;
    }
  }
  namespace fs = std::filesystem;
  fs::path base = dir.empty() ? fs::temp_directory_path() / "spendcap-report-bench" : fs::path(dir);
  std::string path = (base / "ledger.db").string();
  if (!(reuse && fs::exists(path))) {
    fs::remove_all(base);
    fs::create_directories(base);
    auto seeding = SteadyClock::now();
    seed(path, runs);
    std::printf("seeded %lld runs in %.1f s\n", static_cast<long long>(runs),
                std::chrono::duration<double>(SteadyClock::now() - seeding).count());
  }
  if (repeat < 1) repeat = 1;
  for (int i = 0; i < repeat && !rollups_only; ++i) scan_only(path);
  // As the issue asks: grouped by team, and grouped by experiment; and by both at once (the
  // cross product: 100,000 groups here, a table nobody reads, timed as the worst case).
  const std::vector<std::pair<std::string, std::vector<GroupBy>>> cases = {
      {"--by team", {*parse_group_by("team")}},
      {"--by experiment", {*parse_group_by("experiment")}},
      {"--by team --by experiment", {*parse_group_by("team"), *parse_group_by("experiment")}}};
  for (const auto& [name, by] : cases) {
    std::vector<double> scan, rollup;
    Pass last_scan, last_rollup;
    for (int i = 0; i < repeat; ++i) {
      last_rollup = report_pass(path, by, true);
      if (rollups_only) {
        last_scan = last_rollup;
      } else {
        last_scan = report_pass(path, by, false);
      }
      scan.push_back(last_scan.seconds);
      rollup.push_back(last_rollup.seconds);
      if (last_scan.table != last_rollup.table || last_scan.total != last_rollup.total) {
        std::fprintf(stderr, "report %s: the rollups' table differs from the scan's\n",
                     name.c_str());
        return 1;
      }
    }
    std::sort(scan.begin(), scan.end());
    std::sort(rollup.begin(), rollup.end());
    std::printf(
        "report %s over %lld runs (%lld groups, total %.2f, same table both ways): scan median "
        "%.3f s (min %.3f, max %.3f); rollups median %.3f s (min %.3f, max %.3f; %lld cells)\n",
        name.c_str(), static_cast<long long>(runs), static_cast<long long>(last_rollup.groups),
        last_rollup.total.units(), scan[scan.size() / 2], scan.front(), scan.back(),
        rollup[rollup.size() / 2], rollup.front(), rollup.back(),
        static_cast<long long>(last_rollup.cells));
  }
  if (dir.empty()) fs::remove_all(base);  // --dir DIR keeps the ledger, to time the CLI on it
  return 0;
}
