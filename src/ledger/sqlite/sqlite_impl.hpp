// SqliteStore's connection and its rows, shared by the files of the SQLite store (private to them):
// sqlite_store.cpp opens the file and runs transactions, sqlite_schema.cpp migrates it,
// sqlite_runs.cpp, sqlite_budgets.cpp and sqlite_reports.cpp hold the row operations by concept.
#pragma once

#include <signal.h>
#include <sqlite3.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/ledger/ledger_store.hpp"
#include "spendcap/ledger/rollup_sql.hpp"
#include "spendcap/ledger/sqlite/sqlite_store.hpp"

namespace spendcap {

namespace sqlite_detail {

// The ledger file's and its -wal and -shm files' device and inode, read at the open (the
// directory may be searchable only then, with the ledger's group raised).
using FileIds = std::vector<std::pair<dev_t, ino_t>>;
FileIds ledger_file_ids(const std::string& path);

// Who holds a lock on those files, from /proc/locks: "pid 4242 (spendcap, user bob, stopped)",
// joined by "; "; "" when none can be named (another PID namespace, an OFD lock).
std::string lock_holders(const FileIds& files);

// The runs columns, in the order bind_run() and read_run() use.
#define SPENDCAP_RUN_COLUMNS                                                                     \
  "id, job_key, team, experiment, project, user_name, tags, command, fingerprint, host, pid, "   \
  "mode, status, reason, exit_code, rate_micros_per_hour, reserve_micros, budget_micros, "       \
  "shutdown_ms, sync_ms, started_at, day, heartbeat_at, reconcile_at, finished_at, "             \
  "spend_micros, ceiling_micros, allowed_micros, reconciled, would_stop_at, would_stop_reason, " \
  "elapsed_seconds, uid, reported_spend_micros, overrun, gpu_measured, gpu_not_measured, "       \
  "gpu_devices, gpu_allocated_seconds, gpu_busy_seconds, gpu_idle_spend_micros, "                \
  "gpu_energy_kwh, gpu_co2_kg, gpu_energy_cost_micros, gpu_sources, gpu_timeline, pricing, "     \
  "commitment_micros, cwd, run_budget_micros, budget_source, spendcap_exit_code, "               \
  "progress_step, progress_total_steps, progress_line, progress_eta_at"

// The ids runs_of_fingerprint reads (?1 the fingerprint, ?2 the window's start): the runs that are
// not succeeded, each user's latest success (by its end) and any run carrying the crash-loop
// guard's cleared tag. The tags are JSON text; a tag value holding the name keeps one row more, no
// fewer.
#define SPENDCAP_CRASH_LOOP_IDS                                                             \
  "SELECT id FROM (SELECT id, status, tags, coalesce(finished_at, started_at) AS ended_at," \
  " max(CASE WHEN status = 'succeeded' THEN coalesce(finished_at, started_at) END)"         \
  " OVER (PARTITION BY user_name) AS latest_success"                                        \
  " FROM runs WHERE fingerprint = ?1 AND started_at >= ?2)"                                 \
  " WHERE status <> 'succeeded' OR ended_at >= latest_success"                              \
  " OR instr(tags, '\"crash_loop_cleared\"') > 0"

// Thrown inside a transaction when SQLite reports the file locked; the transaction is retried.
struct Busy {};

// Thrown while opening when SQLite could open the ledger or a side file (-wal, -shm) only for
// reading: another process was creating it, not yet with the ledger's mode. The open is retried.
struct SideFileRace {};

// The schema version this spendcap migrates a ledger to (sqlite_schema.cpp).
int latest_schema_version();

}  // namespace sqlite_detail

using sqlite_detail::Busy;
using sqlite_detail::SideFileRace;

// ---- the connection ----

struct SqliteStore::Impl final : StoreTxn {
  std::string path, url;
  std::function<double()> wall_clock;  // the ledger's clock; the host's when empty
  SqliteOptions sqlite_options;
  sqlite3* db = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> statements;
  // The file's owner when it was opened: a setgid spendcap can no longer stat a file in the
  // ledger's 2770 directory once it has dropped the group (run/ledger_group.hpp).
  std::optional<uid_t> owner_at_open;
  sqlite_detail::FileIds file_ids;  // for naming who holds its lock
  bool shared_directory = false;    // a group-writable directory: a ledger several users write
  bool opening = false;             // within open(): a read-only side file is retried
  mutable std::string last_open_error;

  ~Impl() { close_connection(); }

  double now() override {
    if (wall_clock) return wall_clock();
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  Error error(std::string why, std::string hint = {}) const {
    return Error("ledger " + url, std::move(why), std::move(hint));
  }

  [[noreturn]] void fail(int rc) const {
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) throw Busy{};
    if (opening && (rc & 0xFF) == SQLITE_READONLY) {
      last_open_error = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
      throw SideFileRace{};
    }
    std::string why = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    switch (rc & 0xFF) {
      case SQLITE_CORRUPT:
      case SQLITE_NOTADB:
        throw error(why,
                    "restore " + path + " from a backup, or move it aside to start a new ledger");
      case SQLITE_READONLY:
      case SQLITE_PERM:
      case SQLITE_CANTOPEN:
        throw error(
            why, "check the permissions of " + path +
                     "; a shared ledger's group must be able to write the file and its directory");
      case SQLITE_FULL:
        throw error(why, "free space on the filesystem of " + path);
      default:
        throw error(why);
    }
  }

  // One use of a cached prepared statement: bind, step, read; reset when it goes out of scope.
  class Query {
   public:
    Query(const Impl& impl, sqlite3_stmt* statement) : impl_(impl), statement_(statement) {}
    ~Query() {
      sqlite3_reset(statement_);
      sqlite3_clear_bindings(statement_);
    }
    Query(const Query&) = delete;
    Query& operator=(const Query&) = delete;

    Query& bind(std::int64_t value) {
      return check(sqlite3_bind_int64(statement_, ++next_, value));
    }
    Query& bind(int value) { return bind(static_cast<std::int64_t>(value)); }
    Query& bind(double value) { return check(sqlite3_bind_double(statement_, ++next_, value)); }
    Query& bind(Money value) { return bind(value.micros); }
    Query& bind(std::string_view value) {
      return check(sqlite3_bind_text(statement_, ++next_, value.data(),
                                     static_cast<int>(value.size()), SQLITE_TRANSIENT));
    }
    Query& bind(const std::string& value) { return bind(std::string_view(value)); }
    Query& bind(const char* value) { return bind(std::string_view(value)); }
    Query& bind(std::nullopt_t) { return check(sqlite3_bind_null(statement_, ++next_)); }
    template <class T>
    Query& bind(const std::optional<T>& value) {
      return value ? bind(*value) : bind(std::nullopt);
    }
    template <class... Values>
    Query& bind_all(const Values&... values) {
      (bind(values), ...);
      return *this;
    }

    // True while there is a row to read.
    bool step() {
      int rc = sqlite3_step(statement_);
      if (rc == SQLITE_ROW) return true;
      if (rc == SQLITE_DONE) return false;
      impl_.fail(rc);
    }
    void run() {
      while (step()) {
      }
    }

    bool is_null(int column) { return sqlite3_column_type(statement_, column) == SQLITE_NULL; }
    std::int64_t i64(int column) { return sqlite3_column_int64(statement_, column); }
    int i32(int column) { return sqlite3_column_int(statement_, column); }
    double f64(int column) { return sqlite3_column_double(statement_, column); }
    Money money(int column) { return Money{i64(column)}; }
    std::string text(int column) {
      const unsigned char* text = sqlite3_column_text(statement_, column);
      return text ? reinterpret_cast<const char*>(text) : "";
    }
    // As text(), into `out`, reusing its buffer (reports stream a million rows).
    void text_into(int column, std::string& out) {
      const unsigned char* text = sqlite3_column_text(statement_, column);
      if (!text) {
        out.clear();
        return;
      }
      out.assign(reinterpret_cast<const char*>(text),
                 static_cast<size_t>(sqlite3_column_bytes(statement_, column)));
    }
    std::optional<Money> optional_money(int column) {
      return is_null(column) ? std::nullopt : std::optional<Money>(money(column));
    }
    std::optional<double> optional_f64(int column) {
      return is_null(column) ? std::nullopt : std::optional<double>(f64(column));
    }
    std::optional<std::string> optional_text(int column) {
      return is_null(column) ? std::nullopt : std::optional<std::string>(text(column));
    }

   private:
    Query& check(int rc) {
      if (rc != SQLITE_OK) impl_.fail(rc);
      return *this;
    }
    const Impl& impl_;
    sqlite3_stmt* statement_;
    int next_ = 0;
  };

  Query query(const std::string& sql) {
    auto found = statements.find(sql);
    if (found == statements.end()) {
      sqlite3_stmt* statement = nullptr;
      int rc = sqlite3_prepare_v3(db, sql.c_str(), static_cast<int>(sql.size()),
                                  SQLITE_PREPARE_PERSISTENT, &statement, nullptr);
      if (rc != SQLITE_OK) fail(rc);
      found = statements.emplace(sql, statement).first;
    }
    return Query(*this, found->second);
  }

  void exec(const std::string& sql) { query(sql).run(); }

  int changes() const { return sqlite3_changes(db); }

  // SQLite keeps no queue for its write lock: a waiter polls. Its default busy handler sleeps up
  // to 100 ms between tries, so under contention the writer that holds the lock takes it again
  // and again while the others sleep (ledger_bench: heartbeats of 32 writers waited seconds at
  // p99). Short jittered sleeps keep a wait near the lock's real hold time, a fraction of a ms.
  std::chrono::steady_clock::time_point busy_since;
  std::minstd_rand jitter{static_cast<unsigned>(getpid())};
  static int on_busy(void* self, int tries) {
    Impl& impl = *static_cast<Impl*>(self);
    auto now = std::chrono::steady_clock::now();
    if (tries == 0) impl.busy_since = now;
    if (now - impl.busy_since >= impl.sqlite_options.lock_timeout) return 0;
    if (pending_stop_signal()) return 0;
    int most_us = 50 * std::min(tries + 1, 40);  // up to 2 ms
    std::this_thread::sleep_for(std::chrono::microseconds(20 + impl.jitter() % most_us));
    return 1;
  }

  // Runs `body` again while the file is locked, up to the lock timeout. SQLite's busy handler
  // waits inside each attempt; the loop covers the cases where SQLite answers BUSY at once
  // (a concurrent WAL recovery or journal-mode change).
  template <class Body>
  auto retrying(Body&& body) -> decltype(body()) {
    auto started = std::chrono::steady_clock::now();
    for (int attempt = 1;; ++attempt) {
      try {
        return body();
      } catch (const Busy&) {
        if (int signal = pending_stop_signal()) {
          throw error(
              "locked; gave up waiting for its write lock on signal " + std::to_string(signal),
              "a stop signal came while waiting");
        }
        if (std::chrono::steady_clock::now() - started >= sqlite_options.lock_timeout) {
          std::string holders = sqlite_detail::lock_holders(file_ids);
          throw error("locked for more than " + format_duration(sqlite_options.lock_timeout) +
                          (holders.empty() ? "" : ": held by " + holders),
                      holders.empty() ? "another process holds its write lock (" + path + ")"
                                      : "the ledger's owner ends that process");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 20)));
      }
    }
  }

  // One transaction; `write` takes the write lock at BEGIN (IMMEDIATE), so that the reads that a
  // grant depends on and its writes are one serialised step. A write folds the rollups' journal
  // into the rollups once it holds `fold_at_rows` rows (fold_journal).
  template <class Body>
  auto transaction(bool write, Body&& body, int fold_at_rows = kFoldRows) -> decltype(body()) {
    return retrying([&]() -> decltype(body()) {
      exec(write ? "BEGIN IMMEDIATE" : "BEGIN");
      try {
        if constexpr (std::is_void_v<decltype(body())>) {
          body();
          if (write) fold_journal(fold_at_rows);
          exec("COMMIT");
        } else {
          auto result = body();
          if (write) fold_journal(fold_at_rows);
          exec("COMMIT");
          return result;
        }
      } catch (...) {
        if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
      }
    });
  }
  // The rollups' journal (rollup_sql::sqlite_journal), from schema v15 on: true once migrated.
  bool journaled = false;
  // Folding compiles one statement of about 3M instructions, which was a quarter of a short run's
  // (`spendcap run -- true`, callgrind): so writes fold only once the journal holds this many
  // rows (a finished run leaves one or two), a few ms once every few dozen runs. Until then the
  // rows wait in the journal, where reports and verify_aggregates count them beside the cells
  // (rollup_sql's *_and_pending), and a report folds them first when it can (settle_rollups).
  static constexpr int kFoldRows = 32;
  bool journal_holds(int rows) {
    if (!journaled) return false;
    auto q = query("SELECT 1 FROM rollup_journal LIMIT 1 OFFSET ?");
    q.bind(rows - 1);
    return q.step();
  }
  bool journal_pending() { return journal_holds(1); }
  // Adds the journal's rows to the rollups, in a write transaction, when it holds `at_rows` rows.
  void fold_journal(int at_rows) {
    if (!journal_holds(at_rows)) return;
    static const std::vector<std::string> fold = rollup_sql::sqlite_fold();
    exec(fold[0]);  // the cells
    // The metrics' ranges: most runs report none, and spare the statement's compilation.
    if (query("SELECT 1 FROM rollup_journal WHERE metric_name IS NOT NULL LIMIT 1").step()) {
      exec(fold[1]);
    }
    exec(fold[2]);  // emptied
  }
  void settle_rollups();

  template <class Body>
  auto write(Body&& body) {
    return transaction(true, std::forward<Body>(body));
  }
  template <class Body>
  auto read(Body&& body) {
    return transaction(false, std::forward<Body>(body));
  }

  // ---- opening ----

  void open();
  void open_once();
  void close_connection();
  void create_file();
  static void add_side_file(const std::string& file, const std::string& directory, gid_t group);
  int current_schema_version();
  void migrate();

  // ---- rows (StoreTxn) ----

  // One SQLite write lock serialises every write: the scopes' rows need no lock of their own.
  void lock_scopes(const std::vector<Scope>&) override {}

  std::optional<RunRecord> find_run(const std::string& id) override;
  void insert_run(const RunRecord& run) override;
  void update_run(const RunRecord& run) override;
  void set_run_tracker(const std::string& id, const std::string& tracker) override;
  void update_run_gpu(const std::string& id, const RunGpu& gpu);
  std::vector<RunRecord> unfinished_runs() override;
  std::vector<RunRecord> overrun_runs(std::int64_t since_day) override;
  std::vector<RunRecord> runs_due(double now) override;
  bool any_run_due(double now) override;
  std::vector<RunRecord> runs_of_job(const std::string& job_key) override;
  std::vector<RunRecord> runs_of_fingerprint(const std::string& fingerprint, double since) override;
  std::vector<RunRecord> list_runs(const RunQuery& query) override;
  std::vector<std::string> run_ids_with_prefix(const std::string& prefix, int limit) override;
  std::pair<std::string, std::string> neighbour_run_ids(const std::string& id) override;
  void read_progress(RunRecord& run);
  std::int64_t count_unfinished(const Scope& scope, DayRange days) override;
  Money overrun(const Scope& scope, DayRange days) override;

  std::optional<BudgetRule> budget_rule(const Scope& scope) override;
  std::vector<BudgetRule> budget_rules() override;
  void put_budget_rule(const BudgetRule& rule) override;
  void remove_budget_rule(const Scope& scope) override;

  Usage usage(const Scope& scope, DayRange days) override;
  void add_usage(const std::vector<Scope>& scopes, std::int64_t day, const Usage& delta) override;

  std::optional<StopOrder> first_stop_order(const std::vector<Scope>& scopes) override;
  StopOrder insert_stop_order(const Scope& scope, const std::string& reason,
                              const std::string& placed_by, double placed_at) override;
  int clear_stop_orders(const Scope& scope, double cleared_at) override;
  std::vector<StopOrder> active_stop_orders() override;
  std::vector<RunRecord> all_runs() override {
    auto q = query("SELECT " SPENDCAP_RUN_COLUMNS " FROM runs ORDER BY started_at, id");
    return read_runs(q);
  }

  bool insert_warning(const Scope& scope, std::int64_t period_day, int percent,
                      const std::string& run_id, double at) override;
  RefusalCount count_refusal(const std::string& user, double now) override;
  std::vector<RefusedCountRow> refused_counts() override;
  void merge_refused_count(const RefusedCountRow& row) override;
  std::int64_t insert_outbox(const OutboxEntry& entry) override;
  std::vector<OutboxEntry> outbox_entries(const std::string& user) override;
  void delete_outbox(std::int64_t id) override;
  void update_outbox_failure(std::int64_t id, const std::string& error) override;
  std::optional<OutboxClaim> outbox_claim(std::int64_t id) override;
  void set_outbox_claim(std::int64_t id, const OutboxClaim& claim) override;

  void for_each_run_started(double since, double until,
                            const std::function<void(const RunRecord&)>& each) override;
  bool has_rollups() override { return true; }
  void for_each_rollup_cell(const RollupSpan& span, const std::optional<std::string>& team,
                            const std::optional<std::string>& experiment,
                            const std::function<void(const RollupCell&)>& each) override;
  void for_each_rollup_metric(const RollupSpan& span, const std::optional<std::string>& team,
                              const std::optional<std::string>& experiment,
                              const std::function<void(const RollupMetric&)>& each) override;
  void put_accepted_result(const AcceptedResult& accepted) override;
  std::vector<AcceptedResult> accepted_results() override;

  void put_run_webhooks(const std::string& run_id, const std::vector<RunWebhook>& hooks) override;
  std::vector<std::pair<RunRecord, std::vector<RunWebhook>>> untold_lost_runs() override;
  bool claim_lost_run(const std::string& run_id, double at,
                      const std::vector<OutboxEntry>& entries) override;
  std::vector<RunRecord> reconciled_runs(std::int64_t since_day) override;

  static RunRecord read_run(Query& q);
  std::vector<RunRecord> read_runs(Query& q) {
    std::vector<RunRecord> runs;
    while (q.step()) runs.push_back(read_run(q));
    return runs;
  }
};

}  // namespace spendcap
