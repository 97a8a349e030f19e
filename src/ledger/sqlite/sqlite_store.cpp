// The SQLite store of the ledger: schema, file, locking. Contract in sqlite_store.hpp and
// ledger_store.hpp; the rules are BudgetLedger's.
#include "spendcap/ledger/sqlite/sqlite_store.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/ledger/stored_text.hpp"

namespace spendcap {

// ---- the schema ----

namespace {

// Migration N (1-based) takes the schema from version N-1 to N. Never edit one that has shipped:
// add the next.
const char* const kMigrations[] = {
    // v1
    R"sql(
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  job_key TEXT,                        -- NULL when the run has none
  team TEXT NOT NULL,
  experiment TEXT NOT NULL,
  project TEXT NOT NULL,
  user_name TEXT NOT NULL,             -- not "user": PostgreSQL reserves it; both schemas alike
  tags TEXT NOT NULL,                  -- JSON object
  command TEXT NOT NULL,               -- JSON array
  fingerprint TEXT NOT NULL,
  host TEXT NOT NULL,
  pid INTEGER NOT NULL,
  mode TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN
    ('running', 'succeeded', 'failed', 'killed', 'refused', 'lost')),
  reason TEXT NOT NULL,
  exit_code INTEGER,
  rate_micros_per_hour INTEGER NOT NULL,
  reserve_micros INTEGER NOT NULL,
  budget_micros INTEGER,               -- --budget as given; NULL when none
  shutdown_ms INTEGER NOT NULL,
  sync_ms INTEGER NOT NULL,
  started_at REAL NOT NULL,            -- unix seconds, the ledger's clock
  day INTEGER NOT NULL,                -- utc_day(started_at): the usage rows it adds to
  heartbeat_at REAL NOT NULL,
  reconcile_at REAL NOT NULL,          -- when it is charged its ceiling if no heartbeat comes
  finished_at REAL,
  spend_micros INTEGER NOT NULL,
  ceiling_micros INTEGER NOT NULL,
  allowed_micros INTEGER NOT NULL,     -- what enforce mode would hold (warn mode: below ceiling)
  reconciled INTEGER NOT NULL,         -- 1: lost and charged its ceiling, no final row yet
  would_stop_at REAL,
  would_stop_reason TEXT NOT NULL,
  elapsed_seconds REAL
);
-- Unfinished runs only (a few), ordered by when they are due to be reconciled: every transaction
-- asks this index first.
CREATE INDEX runs_unfinished ON runs(reconcile_at) WHERE status = 'running';
CREATE INDEX runs_job_key ON runs(job_key) WHERE job_key IS NOT NULL;

CREATE TABLE budgets (
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  amount_micros INTEGER NOT NULL,
  period TEXT NOT NULL,
  max_run_micros INTEGER,
  PRIMARY KEY (scope_kind, scope_name)
);

-- Per scope and UTC start day: spent = finished runs' spend, held = unfinished runs' ceilings,
-- live = unfinished runs' last reported spend.
CREATE TABLE usage (
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  day INTEGER NOT NULL,
  spent_micros INTEGER NOT NULL,
  held_micros INTEGER NOT NULL,
  live_micros INTEGER NOT NULL,
  PRIMARY KEY (scope_kind, scope_name, day)
) WITHOUT ROWID;

CREATE TABLE stop_orders (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  scope_kind TEXT NOT NULL,
  scope_name TEXT NOT NULL,
  reason TEXT NOT NULL,
  placed_by TEXT NOT NULL,
  placed_at REAL NOT NULL,
  cleared_at REAL
);
CREATE INDEX stop_orders_active ON stop_orders(scope_kind, scope_name) WHERE cleared_at IS NULL;
)sql",
    // v2: who admitted a run and its last reported spend, so that a spooled final row can be
    // checked before it is replayed; and overrun runs (final spend above the ceiling).
    R"sql(
ALTER TABLE runs ADD COLUMN uid INTEGER;  -- NULL: admitted before uids were recorded
ALTER TABLE runs ADD COLUMN reported_spend_micros INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN overrun INTEGER NOT NULL DEFAULT 0;
-- A reconciled run's spend is its ceiling; its last heartbeat's spend is not known any more.
UPDATE runs SET reported_spend_micros = spend_micros WHERE status = 'running';
)sql",
    // v3: the status `preempted`. Widening a CHECK constraint leaves every stored row valid, the
    // case SQLite documents for editing the schema text in place ("Making Other Kinds Of Table
    // Schema Changes"): no table rebuild, so columns that other migrations added are kept. The
    // CREATE/DROP bumps the schema cookie, so other connections reparse; migrate() resets this one.
    R"sql(
PRAGMA writable_schema = ON;
UPDATE sqlite_master
  SET sql = replace(sql, '''refused'', ''lost'')', '''refused'', ''lost'', ''preempted'')')
  WHERE type = 'table' AND name = 'runs';
PRAGMA writable_schema = OFF;
CREATE TABLE spendcap_schema_bump (x);
DROP TABLE spendcap_schema_bump;
)sql",
    // v4: the webhook outbox (issue 9): events not delivered before their spendcap exited. The
    // destination is named as the policy named it ("env:NAME"), never a secret URL.
    R"sql(
CREATE TABLE outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id TEXT NOT NULL,
  event TEXT NOT NULL,
  run_id TEXT NOT NULL,
  user_name TEXT NOT NULL,
  destination TEXT NOT NULL,
  format TEXT NOT NULL,
  secret_env TEXT NOT NULL,            -- '' when unsigned
  body TEXT NOT NULL,
  created_at REAL NOT NULL,            -- unix seconds, the ledger's clock
  attempts INTEGER NOT NULL,
  last_error TEXT NOT NULL
);
CREATE INDEX outbox_user ON outbox(user_name);
)sql",
    // v5: what a run's GPUs did (GPU measurement), written with its final row. NULL where not
    // measured, never 0; gpu_measured NULL: no GPU record at all.
    R"sql(
ALTER TABLE runs ADD COLUMN gpu_measured INTEGER;      -- 1 measured, 0 not (gpu_not_measured says why)
ALTER TABLE runs ADD COLUMN gpu_not_measured TEXT;
ALTER TABLE runs ADD COLUMN gpu_devices INTEGER;
ALTER TABLE runs ADD COLUMN gpu_allocated_seconds REAL;
ALTER TABLE runs ADD COLUMN gpu_busy_seconds REAL;
ALTER TABLE runs ADD COLUMN gpu_idle_spend_micros INTEGER;
ALTER TABLE runs ADD COLUMN gpu_energy_kwh REAL;       -- x PUE
ALTER TABLE runs ADD COLUMN gpu_co2_kg REAL;
ALTER TABLE runs ADD COLUMN gpu_energy_cost_micros INTEGER;  -- USD, never part of spend
ALTER TABLE runs ADD COLUMN gpu_sources TEXT;
ALTER TABLE runs ADD COLUMN gpu_timeline TEXT;         -- [[minute, utilisation, watts], ...]
)sql",
    // v6: accepted results
    // (`spendcap accept`). Reports scan the runs table: an index on started_at made a report of
    // 1M runs 10x slower (a b-tree lookup per row), and a scan is well under a second.
    R"sql(
CREATE TABLE accepted_results (
  run_id TEXT PRIMARY KEY,
  note TEXT NOT NULL,
  accepted_by TEXT NOT NULL,
  accepted_at REAL NOT NULL
);
)sql",
    // v7: the progress channel's last report
    // with the run, and the crash-loop guard's look-up of a command's recent runs.
    R"sql(
ALTER TABLE runs ADD COLUMN metric_name TEXT;  -- NULL: the job did not report it
ALTER TABLE runs ADD COLUMN metric_value REAL;
ALTER TABLE runs ADD COLUMN units REAL;
ALTER TABLE runs ADD COLUMN egress_gb REAL;
CREATE INDEX runs_fingerprint ON runs(fingerprint, started_at);
)sql",
    // v8: a budget's members, so that a shared ledger checks
    // them whatever policy its users load.
    R"sql(
ALTER TABLE budgets ADD COLUMN member_groups TEXT;  -- JSON array of Unix group names; NULL: anyone
)sql",
    // v10 (the 9th entry on this branch; v9 is another branch's): a run's checkpoint storage
    // (--checkpoint-dir); NULL: not measured.
    R"sql(
ALTER TABLE runs ADD COLUMN storage_peak_gb REAL;
ALTER TABLE runs ADD COLUMN storage_spend_micros INTEGER;  -- part of spend_micros
)sql",
    // v13 (issue 23: the grant rule in PostgreSQL's server): nothing changes here; the number
    // keeps both backends' versions equal.
    R"sql(
SELECT 1;
)sql",
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

// The runs columns, in the order bind_run() and read_run() use.
#define SPENDCAP_RUN_COLUMNS                                                                     \
  "id, job_key, team, experiment, project, user_name, tags, command, fingerprint, host, pid, "   \
  "mode, status, reason, exit_code, rate_micros_per_hour, reserve_micros, budget_micros, "       \
  "shutdown_ms, sync_ms, started_at, day, heartbeat_at, reconcile_at, finished_at, "             \
  "spend_micros, ceiling_micros, allowed_micros, reconciled, would_stop_at, would_stop_reason, " \
  "elapsed_seconds, uid, reported_spend_micros, overrun, gpu_measured, gpu_not_measured, "       \
  "gpu_devices, gpu_allocated_seconds, gpu_busy_seconds, gpu_idle_spend_micros, "                \
  "gpu_energy_kwh, gpu_co2_kg, gpu_energy_cost_micros, gpu_sources, gpu_timeline"

// Thrown inside a transaction when SQLite reports the file locked; the transaction is retried.
struct Busy {};

// A stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT: base/signals.hpp's kStopSignals) waiting while
// this thread has it blocked. `spendcap run` blocks them during setup so that it is never killed
// half-way; a wait on a locked ledger then ended only at the lock timeout (10 s, then exit 125).
// The wait gives up at once instead, and run re-raises the signal after cleaning up. Not consumed
// here: the caller takes it.
int pending_stop_signal() {
  sigset_t pending;
  if (::sigpending(&pending) != 0) return 0;
  for (int signal : kStopSignals) {
    if (sigismember(&pending, signal)) return signal;
  }
  return 0;
}

// Durations are stored in whole milliseconds (RunRecord's are already whole: rounding up only
// guards a caller that forgot).
std::int64_t to_ms_rounded_up(Nanos duration) {
  return (duration.count() + 999'999) / 1'000'000;
}

}  // namespace

// ---- network filesystems ----

std::optional<std::string> sqlite_path_of_url(const std::string& url) {
  std::string_view text = url;
  if (text.starts_with("sqlite:")) {
    text.remove_prefix(7);
    if (text.starts_with("//")) text.remove_prefix(2);  // sqlite:///var/x
    return std::string(text);
  }
  if (text.find("://") != std::string_view::npos) return std::nullopt;
  return std::string(text);
}

std::optional<std::string> network_filesystem_name(long f_type) {
  // statfs(2) magic numbers (linux/magic.h and the filesystems' own headers). f_type is signed on
  // some ABIs, so compare the low 32 bits: CIFS' 0xFF534D42 arrives negative there.
  static const std::map<std::uint32_t, const char*> kNetworkFilesystems = {
      {0x6969, "NFS"},          {0x517B, "SMB"},        {0xFF534D42, "CIFS"},
      {0xFE534D42, "SMB2"},     {0x0BD00BD0, "Lustre"}, {0x47504653, "GPFS"},
      {0x00C36400, "Ceph"},     {0x5346414F, "AFS"},    {0x6B414653, "kAFS"},
      {0x01021997, "9P"},       {0x19830326, "BeeGFS"}, {0x73757245, "Coda"},
      {0x564C, "NCP"},          {0x7461636F, "OCFS2"},  {0x01161970, "GFS2"},
      {0x20030528, "OrangeFS"}, {0xAAD7AAEA, "PanFS"},
  };
  auto found = kNetworkFilesystems.find(static_cast<std::uint32_t>(f_type));
  if (found == kNetworkFilesystems.end()) return std::nullopt;
  return std::string(found->second);
}

// ---- the connection ----

struct SqliteStore::Impl final : StoreTxn {
  std::string path, url;
  std::function<double()> wall_clock;  // the ledger's clock; the host's when empty
  SqliteOptions sqlite_options;
  sqlite3* db = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> statements;
  // The file's owner when it was opened: a setgid spendcap can no longer stat a file in the
  // ledger's 2770 directory once it has dropped the group (cli/ledger_group.hpp).
  std::optional<uid_t> owner_at_open;

  ~Impl() {
    for (auto& [sql, statement] : statements) sqlite3_finalize(statement);
    if (db) sqlite3_close_v2(db);
  }

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
          throw error("locked for more than " + format_duration(sqlite_options.lock_timeout),
                      "another process holds its write lock; if no spendcap is running, look "
                      "for a stuck sqlite3 shell on " +
                          path);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 20)));
      }
    }
  }

  // One transaction; `write` takes the write lock at BEGIN (IMMEDIATE), so that the reads that a
  // grant depends on and its writes are one serialised step.
  template <class Body>
  auto transaction(bool write, Body&& body) -> decltype(body()) {
    return retrying([&]() -> decltype(body()) {
      exec(write ? "BEGIN IMMEDIATE" : "BEGIN");
      try {
        if constexpr (std::is_void_v<decltype(body())>) {
          body();
          exec("COMMIT");
        } else {
          auto result = body();
          exec("COMMIT");
          return result;
        }
      } catch (...) {
        if (!sqlite3_get_autocommit(db)) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
      }
    });
  }
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
  void create_file();
  int current_schema_version();
  void migrate();

  // ---- rows (StoreTxn) ----

  // One SQLite write lock serialises every write: the scopes' rows need no lock of their own.
  void lock_scopes(const std::vector<Scope>&) override {}

  std::optional<RunRecord> find_run(const std::string& id) override;
  void insert_run(const RunRecord& run) override;
  void update_run(const RunRecord& run) override;
  void update_run_gpu(const std::string& id, const RunGpu& gpu);
  std::vector<RunRecord> unfinished_runs() override;
  std::vector<RunRecord> overrun_runs(std::int64_t since_day) override;
  std::vector<RunRecord> runs_due(double now) override;
  bool any_run_due(double now) override;
  std::vector<RunRecord> runs_of_job(const std::string& job_key) override;
  std::vector<RunRecord> runs_of_fingerprint(const std::string& fingerprint, double since) override;
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

  std::int64_t insert_outbox(const OutboxEntry& entry) override;
  std::vector<OutboxEntry> outbox_entries(const std::string& user) override;
  void delete_outbox(std::int64_t id) override;
  void update_outbox_failure(std::int64_t id, const std::string& error) override;

  void for_each_run_started(double since, double until,
                            const std::function<void(const RunRecord&)>& each) override;
  void put_accepted_result(const AcceptedResult& accepted) override;
  std::vector<AcceptedResult> accepted_results() override;

  static RunRecord read_run(Query& q);
  std::vector<RunRecord> read_runs(Query& q) {
    std::vector<RunRecord> runs;
    while (q.step()) runs.push_back(read_run(q));
    return runs;
  }
};

namespace {

// A budget's member groups (stored_text.hpp).
std::vector<std::string> group_list(auto& q, int column) {
  return member_groups_of_json(q.is_null(column) ? std::nullopt
                                                 : std::optional<std::string>(q.text(column)));
}

StopOrder read_stop_order(auto& q) {
  StopOrder order;
  order.id = q.i64(0);
  order.scope = {parse_scope_kind(q.text(1)).value_or(ScopeKind::run), q.text(2)};
  order.reason = q.text(3);
  order.placed_by = q.text(4);
  order.placed_at = q.f64(5);
  return order;
}

}  // namespace

RunRecord SqliteStore::Impl::read_run(Query& q) {
  RunRecord r;
  r.id = q.text(0);
  r.job_key = q.text(1);
  r.team = q.text(2);
  r.experiment = q.text(3);
  r.project = q.text(4);
  r.user = q.text(5);
  r.tags = tags_of_json(q.text(6));
  r.command = command_of_json(q.text(7));
  r.fingerprint = q.text(8);
  r.host = q.text(9);
  r.pid = q.i32(10);
  r.mode = parse_mode(q.text(11)).value_or(Mode::enforce);
  r.status = parse_run_status(q.text(12)).value_or(RunStatus::running);
  r.reason = q.text(13);
  if (!q.is_null(14)) r.exit_code = q.i32(14);
  r.rate_per_hour = q.money(15);
  r.reserve = q.money(16);
  r.budget = q.optional_money(17);
  r.shutdown = std::chrono::milliseconds(q.i64(18));
  r.sync = std::chrono::milliseconds(q.i64(19));
  r.started_at = q.f64(20);
  r.day = q.i64(21);
  r.heartbeat_at = q.f64(22);
  r.reconcile_at = q.f64(23);
  r.finished_at = q.optional_f64(24);
  r.spend = q.money(25);
  r.ceiling = q.money(26);
  r.allowed = q.money(27);
  r.reconciled = q.i64(28) != 0;
  r.would_stop_at = q.optional_f64(29);
  r.would_stop_reason = q.text(30);
  r.elapsed_seconds = q.optional_f64(31);
  if (!q.is_null(32)) r.uid = q.i64(32);
  r.reported_spend = q.money(33);
  r.overrun = q.i64(34) != 0;
  if (!q.is_null(35)) {
    RunGpu& g = r.gpu.emplace();
    g.not_measured = q.text(36);
    if (!q.is_null(37)) g.devices = q.i32(37);
    g.allocated_seconds = q.optional_f64(38).value_or(0);
    g.busy_seconds = q.optional_f64(39);
    g.idle_spend = q.optional_money(40);
    g.energy_kwh = q.optional_f64(41);
    g.co2_kg = q.optional_f64(42);
    g.energy_cost = q.optional_money(43);
    g.sources = q.text(44);
    g.timeline = timeline_from_text(q.text(45));
  }
  return r;
}

std::optional<RunRecord> SqliteStore::Impl::find_run(const std::string& id) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS " FROM runs WHERE id = ?");
  q.bind(id);
  if (!q.step()) return std::nullopt;
  RunRecord run = read_run(q);
  read_progress(run);
  return run;
}

// The progress columns (v5), outside SPENDCAP_RUN_COLUMNS: only find_run needs them.
void SqliteStore::Impl::read_progress(RunRecord& run) {
  auto q = query(
      "SELECT metric_name, metric_value, units, egress_gb, storage_peak_gb, storage_spend_micros "
      "FROM runs WHERE id = ?");
  q.bind(run.id);
  if (!q.step()) return;
  if (!q.is_null(0)) run.metric_name = q.text(0);
  run.metric_value = q.optional_f64(1);
  run.units = q.optional_f64(2);
  run.egress_gb = q.optional_f64(3);
  run.storage_peak_gb = q.optional_f64(4);
  run.storage_spend = q.optional_money(5);
}

void SqliteStore::Impl::insert_run(const RunRecord& r) {
  auto q = query(
      "INSERT INTO runs (" SPENDCAP_RUN_COLUMNS
      ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
      "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
      "NULL, NULL)");
  q.bind_all(r.id, r.job_key.empty() ? std::nullopt : std::optional<std::string>(r.job_key), r.team,
             r.experiment, r.project, r.user, json_of(r.tags), json_of(r.command), r.fingerprint,
             r.host, r.pid, to_string(r.mode), to_string(r.status), r.reason, r.exit_code,
             r.rate_per_hour, r.reserve, r.budget, to_ms_rounded_up(r.shutdown),
             to_ms_rounded_up(r.sync), r.started_at, r.day, r.heartbeat_at, r.reconcile_at,
             r.finished_at, r.spend, r.ceiling, r.allowed, r.reconciled ? 1 : 0, r.would_stop_at,
             r.would_stop_reason, r.elapsed_seconds, r.uid, r.reported_spend, r.overrun ? 1 : 0);
  q.run();
}

void SqliteStore::Impl::update_run(const RunRecord& r) {
  auto q = query(
      "UPDATE runs SET status = ?, reason = ?, exit_code = ?, heartbeat_at = ?, reconcile_at = ?, "
      "finished_at = ?, spend_micros = ?, ceiling_micros = ?, allowed_micros = ?, reconciled = ?, "
      "would_stop_at = ?, would_stop_reason = ?, elapsed_seconds = ?, reported_spend_micros = ?, "
      "overrun = ? WHERE id = ?");
  q.bind_all(to_string(r.status), r.reason, r.exit_code, r.heartbeat_at, r.reconcile_at,
             r.finished_at, r.spend, r.ceiling, r.allowed, r.reconciled ? 1 : 0, r.would_stop_at,
             r.would_stop_reason, r.elapsed_seconds, r.reported_spend, r.overrun ? 1 : 0, r.id);
  q.run();
  if (r.metric_name || r.units || r.egress_gb) {
    auto progress = query(
        "UPDATE runs SET metric_name = ?, metric_value = ?, units = ?, egress_gb = ? "
        "WHERE id = ?");
    progress.bind_all(r.metric_name, r.metric_value, r.units, r.egress_gb, r.id);
    progress.run();
  }
  if (r.gpu) update_run_gpu(r.id, *r.gpu);
  if (r.storage_peak_gb || r.storage_spend) {
    auto storage =
        query("UPDATE runs SET storage_peak_gb = ?, storage_spend_micros = ? WHERE id = ?");
    storage.bind_all(r.storage_peak_gb, r.storage_spend, r.id);
    storage.run();
  }
}

void SqliteStore::Impl::update_run_gpu(const std::string& id, const RunGpu& g) {
  auto q = query(
      "UPDATE runs SET gpu_measured = ?, gpu_not_measured = ?, gpu_devices = ?, "
      "gpu_allocated_seconds = ?, gpu_busy_seconds = ?, gpu_idle_spend_micros = ?, "
      "gpu_energy_kwh = ?, gpu_co2_kg = ?, gpu_energy_cost_micros = ?, gpu_sources = ?, "
      "gpu_timeline = ? WHERE id = ?");
  bool measured = g.not_measured.empty();
  q.bind_all(measured ? 1 : 0, g.not_measured,
             measured ? std::optional<int>(g.devices) : std::nullopt,
             measured ? std::optional<double>(g.allocated_seconds) : std::nullopt, g.busy_seconds,
             g.idle_spend, g.energy_kwh, g.co2_kg, g.energy_cost, g.sources,
             timeline_to_text(g.timeline), id);
  q.run();
}

std::vector<RunRecord> SqliteStore::Impl::unfinished_runs() {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE status = 'running' ORDER BY started_at, id");
  return read_runs(q);
}

std::vector<RunRecord> SqliteStore::Impl::overrun_runs(std::int64_t since_day) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE overrun = 1 AND day >= ? ORDER BY started_at, id");
  q.bind_all(since_day);
  return read_runs(q);
}

std::vector<RunRecord> SqliteStore::Impl::runs_due(double now) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE status = 'running' AND reconcile_at <= ?");
  q.bind(now);
  return read_runs(q);
}

bool SqliteStore::Impl::any_run_due(double now) {
  auto q = query("SELECT 1 FROM runs WHERE status = 'running' AND reconcile_at <= ? LIMIT 1");
  q.bind(now);
  return q.step();
}

std::vector<RunRecord> SqliteStore::Impl::runs_of_fingerprint(const std::string& fingerprint,
                                                              double since) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                 " FROM runs WHERE fingerprint = ? AND started_at >= ? ORDER BY started_at, id");
  q.bind_all(fingerprint, since);
  return read_runs(q);
}

std::vector<RunRecord> SqliteStore::Impl::runs_of_job(const std::string& job_key) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS " FROM runs WHERE job_key = ?");
  q.bind(job_key);
  return read_runs(q);
}

// The runs of one scope (bound: first day, last day, scope kind, scope name) started in a range of
// days: the scope's kind names the column that holds its name.
constexpr const char* kRunsOfScopeInDays =
    "day BETWEEN ? AND ? AND CASE ? WHEN 'team' THEN team WHEN 'experiment' THEN experiment "
    "WHEN 'project' THEN project WHEN 'user' THEN user_name END = ?";

std::int64_t SqliteStore::Impl::count_unfinished(const Scope& scope, DayRange days) {
  auto q = query(std::string("SELECT count(*) FROM runs WHERE status = 'running' AND ") +
                 kRunsOfScopeInDays);
  q.bind_all(days.first_day, days.last_day, to_string(scope.kind), scope.name);
  q.step();
  return q.i64(0);
}

Money SqliteStore::Impl::overrun(const Scope& scope, DayRange days) {
  auto q =
      query(std::string("SELECT COALESCE(SUM(spend_micros - ceiling_micros), 0) FROM runs WHERE "
                        "overrun = 1 AND ") +
            kRunsOfScopeInDays);
  q.bind_all(days.first_day, days.last_day, to_string(scope.kind), scope.name);
  q.step();
  return q.money(0);
}

// ---- budgets and usage ----

std::optional<BudgetRule> SqliteStore::Impl::budget_rule(const Scope& scope) {
  auto q = query(
      "SELECT amount_micros, period, max_run_micros, member_groups FROM budgets "
      "WHERE scope_kind = ? AND scope_name = ?");
  q.bind_all(to_string(scope.kind), scope.name);
  if (!q.step()) return std::nullopt;
  return BudgetRule{scope, q.money(0), parse_period(q.text(1)).value_or(Period::total),
                    q.optional_money(2), group_list(q, 3)};
}

std::vector<BudgetRule> SqliteStore::Impl::budget_rules() {
  std::vector<BudgetRule> result;
  auto q = query(
      "SELECT scope_kind, scope_name, amount_micros, period, max_run_micros, member_groups "
      "FROM budgets");
  while (q.step()) {
    auto kind = parse_scope_kind(q.text(0));
    auto period = parse_period(q.text(3));
    if (!kind || !period) continue;  // written by a newer spendcap
    result.push_back(
        {{*kind, q.text(1)}, q.money(2), *period, q.optional_money(4), group_list(q, 5)});
  }
  return result;
}

void SqliteStore::Impl::put_budget_rule(const BudgetRule& rule) {
  query(
      "INSERT INTO budgets (scope_kind, scope_name, amount_micros, period, max_run_micros, "
      "member_groups) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope_kind, scope_name) DO UPDATE SET "
      "amount_micros = excluded.amount_micros, period = excluded.period, "
      "max_run_micros = excluded.max_run_micros, member_groups = excluded.member_groups")
      .bind_all(to_string(rule.scope.kind), rule.scope.name, rule.amount, to_string(rule.period),
                rule.max_run,
                rule.member_groups.empty()
                    ? std::optional<std::string>()
                    : std::optional(nlohmann::json(rule.member_groups).dump()))
      .run();
}

void SqliteStore::Impl::remove_budget_rule(const Scope& scope) {
  query("DELETE FROM budgets WHERE scope_kind = ? AND scope_name = ?")
      .bind_all(to_string(scope.kind), scope.name)
      .run();
}

Usage SqliteStore::Impl::usage(const Scope& scope, DayRange days) {
  auto q = query(
      "SELECT COALESCE(SUM(spent_micros), 0), COALESCE(SUM(held_micros), 0), "
      "COALESCE(SUM(live_micros), 0) FROM usage "
      "WHERE scope_kind = ? AND scope_name = ? AND day BETWEEN ? AND ?");
  q.bind_all(to_string(scope.kind), scope.name, days.first_day, days.last_day);
  q.step();
  return {q.money(0), q.money(1), q.money(2)};
}

void SqliteStore::Impl::add_usage(const std::vector<Scope>& scopes, std::int64_t day,
                                  const Usage& delta) {
  for (const Scope& scope : scopes) {
    auto q = query(
        "INSERT INTO usage (scope_kind, scope_name, day, spent_micros, held_micros, live_micros) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope_kind, scope_name, day) DO UPDATE SET "
        "spent_micros = spent_micros + excluded.spent_micros, "
        "held_micros = held_micros + excluded.held_micros, "
        "live_micros = live_micros + excluded.live_micros");
    q.bind_all(to_string(scope.kind), scope.name, day, delta.spent, delta.held, delta.live);
    q.run();
  }
}

// ---- stop orders ----

std::optional<StopOrder> SqliteStore::Impl::first_stop_order(const std::vector<Scope>& scopes) {
  if (scopes.empty()) return std::nullopt;
  // One cached statement per number of scopes (BudgetLedger always asks with six).
  std::string sql =
      "SELECT id, scope_kind, scope_name, reason, placed_by, placed_at FROM stop_orders "
      "WHERE cleared_at IS NULL AND (";
  for (std::size_t i = 0; i < scopes.size(); ++i) {
    sql +=
        i == 0 ? "(scope_kind = ? AND scope_name = ?)" : " OR (scope_kind = ? AND scope_name = ?)";
  }
  sql += ") ORDER BY id LIMIT 1";
  auto q = query(sql);
  for (const Scope& scope : scopes) q.bind_all(to_string(scope.kind), scope.name);
  if (!q.step()) return std::nullopt;
  return read_stop_order(q);
}

StopOrder SqliteStore::Impl::insert_stop_order(const Scope& scope, const std::string& reason,
                                               const std::string& placed_by, double placed_at) {
  query(
      "INSERT INTO stop_orders (scope_kind, scope_name, reason, placed_by, placed_at) "
      "VALUES (?, ?, ?, ?, ?)")
      .bind_all(to_string(scope.kind), scope.name, reason, placed_by, placed_at)
      .run();
  return StopOrder{sqlite3_last_insert_rowid(db), scope, reason, placed_by, placed_at};
}

int SqliteStore::Impl::clear_stop_orders(const Scope& scope, double cleared_at) {
  query(
      "UPDATE stop_orders SET cleared_at = ? "
      "WHERE scope_kind = ? AND scope_name = ? AND cleared_at IS NULL")
      .bind_all(cleared_at, to_string(scope.kind), scope.name)
      .run();
  return changes();
}

std::vector<StopOrder> SqliteStore::Impl::active_stop_orders() {
  std::vector<StopOrder> orders;
  auto q = query(
      "SELECT id, scope_kind, scope_name, reason, placed_by, placed_at FROM stop_orders "
      "WHERE cleared_at IS NULL ORDER BY id");
  while (q.step()) orders.push_back(read_stop_order(q));
  return orders;
}

// ---- the webhook outbox ----

std::int64_t SqliteStore::Impl::insert_outbox(const OutboxEntry& e) {
  query(
      "INSERT INTO outbox (event_id, event, run_id, user_name, destination, format, secret_env, "
      "body, created_at, attempts, last_error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
      .bind_all(e.event_id, e.event, e.run_id, e.user, e.destination, e.format, e.secret_env,
                e.body, e.created_at, e.attempts, e.last_error)
      .run();
  return sqlite3_last_insert_rowid(db);
}

std::vector<OutboxEntry> SqliteStore::Impl::outbox_entries(const std::string& user) {
  std::vector<OutboxEntry> entries;
  auto q = query(
      "SELECT id, event_id, event, run_id, user_name, destination, format, secret_env, body, "
      "created_at, attempts, last_error FROM outbox WHERE ? = '' OR user_name = ? ORDER BY id");
  q.bind_all(user, user);
  while (q.step()) {
    entries.push_back(OutboxEntry{q.i64(0), q.text(1), q.text(2), q.text(3), q.text(4), q.text(5),
                                  q.text(6), q.text(7), q.text(8), q.f64(9), q.i32(10),
                                  q.text(11)});
  }
  return entries;
}

void SqliteStore::Impl::delete_outbox(std::int64_t id) {
  query("DELETE FROM outbox WHERE id = ?").bind_all(id).run();
}

void SqliteStore::Impl::update_outbox_failure(std::int64_t id, const std::string& error) {
  query("UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?")
      .bind_all(error, id)
      .run();
}

// ---- reports ----

void SqliteStore::Impl::for_each_run_started(double since, double until,
                                             const std::function<void(const RunRecord&)>& each) {
  // Only the columns a report reads; one record reused, so a million runs stream without a
  // million allocations.
  auto q = query(
      "SELECT id, team, experiment, project, user_name, host, tags, status, reason, exit_code, "
      "rate_micros_per_hour, started_at, day, heartbeat_at, finished_at, spend_micros, "
      "ceiling_micros, reconciled, overrun, elapsed_seconds, gpu_measured, gpu_not_measured, "
      "gpu_allocated_seconds, gpu_busy_seconds, gpu_idle_spend_micros, gpu_energy_kwh, "
      "gpu_co2_kg, metric_name, metric_value, units, egress_gb, storage_peak_gb, "
      "storage_spend_micros FROM runs "
      "WHERE started_at >= ? AND started_at < ?");
  q.bind_all(since, until);
  RunRecord r;
  std::string tags, status;
  while (q.step()) {
    q.text_into(0, r.id);
    q.text_into(1, r.team);
    q.text_into(2, r.experiment);
    q.text_into(3, r.project);
    q.text_into(4, r.user);
    q.text_into(5, r.host);
    q.text_into(6, tags);
    if (tags == "{}") {
      r.tags.clear();
    } else {
      r.tags = tags_of_json(tags);
    }
    q.text_into(7, status);
    r.status = parse_run_status(status).value_or(RunStatus::running);
    q.text_into(8, r.reason);
    r.exit_code = q.is_null(9) ? std::nullopt : std::optional<int>(q.i32(9));
    r.rate_per_hour = q.money(10);
    r.started_at = q.f64(11);
    r.day = q.i64(12);
    r.heartbeat_at = q.f64(13);
    r.finished_at = q.optional_f64(14);
    r.spend = q.money(15);
    r.ceiling = q.money(16);
    r.reconciled = q.i64(17) != 0;
    r.overrun = q.i64(18) != 0;
    r.elapsed_seconds = q.optional_f64(19);
    // What the run measured (v5, v7): the GPU figures a report sums, and the progress channel's
    // last report. The timeline and sources are not read.
    if (q.is_null(20)) {
      r.gpu.reset();
    } else {
      RunGpu& g = r.gpu.emplace();
      q.text_into(21, g.not_measured);
      g.allocated_seconds = q.optional_f64(22).value_or(0);
      g.busy_seconds = q.optional_f64(23);
      g.idle_spend = q.optional_money(24);
      g.energy_kwh = q.optional_f64(25);
      g.co2_kg = q.optional_f64(26);
    }
    if (q.is_null(27)) {
      r.metric_name.reset();
    } else {
      q.text_into(27, r.metric_name.emplace());
    }
    r.metric_value = q.optional_f64(28);
    r.units = q.optional_f64(29);
    r.egress_gb = q.optional_f64(30);
    r.storage_peak_gb = q.optional_f64(31);
    r.storage_spend = q.optional_money(32);
    each(r);
  }
}

void SqliteStore::Impl::put_accepted_result(const AcceptedResult& a) {
  query(
      "INSERT INTO accepted_results (run_id, note, accepted_by, accepted_at) VALUES (?, ?, ?, ?) "
      "ON CONFLICT (run_id) DO UPDATE SET note = excluded.note, "
      "accepted_by = excluded.accepted_by, accepted_at = excluded.accepted_at")
      .bind_all(a.run_id, a.note, a.accepted_by, a.accepted_at)
      .run();
}

std::vector<AcceptedResult> SqliteStore::Impl::accepted_results() {
  std::vector<AcceptedResult> results;
  auto q =
      query("SELECT run_id, note, accepted_by, accepted_at FROM accepted_results ORDER BY run_id");
  while (q.step()) results.push_back({q.text(0), q.text(1), q.text(2), q.f64(3)});
  return results;
}

// ---- opening ----

void SqliteStore::Impl::create_file() {
  namespace fs = std::filesystem;
  fs::path file(path);
  fs::path directory = file.parent_path();
  // Missing directories are created private; a shared ledger's directory is set up by its owner.
  std::vector<fs::path> missing;
  std::error_code ignored;
  for (fs::path dir = directory; !dir.empty() && !fs::exists(dir, ignored);
       dir = dir.parent_path()) {
    missing.push_back(dir);
    if (dir == dir.parent_path()) break;
  }
  for (auto dir = missing.rbegin(); dir != missing.rend(); ++dir) {
    if (mkdir(dir->c_str(), 0700) != 0 && errno != EEXIST) {
      throw error("cannot create " + dir->string() + ": " + errno_text(errno));
    }
  }

  struct statfs filesystem {};
  if (statfs(directory.c_str(), &filesystem) != 0) {
    throw error("cannot inspect " + directory.string() + ": " + errno_text(errno));
  }
  if (auto name = network_filesystem_name(static_cast<long>(filesystem.f_type))) {
    throw error(
        directory.string() + " is on " + *name + ", where SQLite's locks and WAL do not work",
        "use a PostgreSQL ledger: \"ledger\": \"postgresql://...\" in the policy, or "
        "--ledger postgresql://...");
  }

  struct stat dir_status {};
  if (stat(directory.c_str(), &dir_status) != 0) {
    throw error("cannot inspect " + directory.string() + ": " + errno_text(errno));
  }
  // A group-writable directory is a shared ledger: its group's members must write their runs.
  bool shared = (dir_status.st_mode & S_IWGRP) != 0;
  mode_t mode = shared ? 0660 : 0600;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) return;  // it exists, or another process just created it
    throw error("cannot create " + path + ": " + errno_text(errno));
  }
  // The umask may have taken the group's write bit; and without a setgid directory the file
  // would get the creator's group rather than the ledger's. SQLite gives the -wal and -shm
  // files the database file's mode and owner.
  // Both best effort: a ledger that ends up 0600 still works for its owner.
  if (fchmod(fd, mode) != 0) {
  }
  if (shared && dir_status.st_gid != getegid() &&
      fchown(fd, static_cast<uid_t>(-1), dir_status.st_gid) != 0) {
  }
  ::close(fd);
}

int SqliteStore::Impl::current_schema_version() {
  auto tables = query(
      "SELECT count(*), sum(name = 'schema_version') FROM sqlite_master "
      "WHERE type = 'table'");
  tables.step();
  std::int64_t table_count = tables.i64(0);
  bool has_version = tables.i64(1) > 0;
  if (!has_version) {
    if (table_count > 0) {
      throw error("not a spendcap ledger (an SQLite file with other tables)",
                  "give --ledger another file");
    }
    return 0;
  }
  auto q = query("SELECT COALESCE(MAX(version), 0) FROM schema_version");
  q.step();
  return static_cast<int>(q.i64(0));
}

void SqliteStore::Impl::migrate() {
  int version = read([&] { return current_schema_version(); });
  if (version == kSchemaVersion) return;
  // One migration per transaction, and the connection's schema reread after each: a migration
  // that edits the schema text in place (v3) must be seen before the next one alters the table
  // (ALTER TABLE ADD COLUMN splices into the text at the offset this connection parsed).
  for (bool done = false; !done;) {
    write([&] {
      version = current_schema_version();  // another process may have migrated meanwhile
      if (version >= kSchemaVersion) {
        done = true;
        return;
      }
      if (version == 0)
        exec("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL)");
      int next = version + 1;
      char* message = nullptr;
      int rc = sqlite3_exec(db, kMigrations[next - 1], nullptr, nullptr, &message);
      if (rc != SQLITE_OK) {
        std::string why = message ? message : sqlite3_errstr(rc);
        sqlite3_free(message);
        if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) throw Busy{};
        throw error("migration to schema " + std::to_string(next) + " failed: " + why);
      }
      query("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)")
          .bind_all(next, now())
          .run();
    });
    exec("PRAGMA writable_schema = RESET");
  }
  if (version > kSchemaVersion) {
    throw error("its schema version " + std::to_string(version) +
                    " is newer than this spendcap's (" + std::to_string(kSchemaVersion) + ")",
                "upgrade spendcap on this host");
  }
}

void SqliteStore::Impl::open() {
  create_file();
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) fail(rc);
  // Short-lived connections are the common case (one per `spendcap run`). By default the last
  // connection to close checkpoints and deletes the WAL, syncing the database, and the next one
  // recreates it, syncing its header and the directory: four fsyncs per run. Instead the WAL stays,
  // close does not checkpoint, and SQLite checkpoints every 100 pages. The price is that the first
  // connection rebuilds the WAL index from the WAL (at most ~400 KB to read). Measured here for
  // `spendcap run -- true`: 8.4 ms by default, 9.5 ms keeping the WAL only, 6.2 ms like this.
  int persist_wal = 1;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist_wal);
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  sqlite3_wal_autocheckpoint(db, 100);
  sqlite3_extended_result_codes(db, 0);
  sqlite3_busy_handler(db, &Impl::on_busy, this);
  std::string journal_mode = retrying([&] {
    auto q = query("PRAGMA journal_mode = WAL");
    q.step();
    return q.text(0);
  });
  if (journal_mode != "wal") {
    throw error("cannot switch it to WAL (journal mode stays " + journal_mode + ")");
  }
  // NORMAL syncs the WAL at checkpoints, not at every commit. A power loss can then lose the last
  // commits (never corrupt the file): a heartbeat lost that way leaves its run looking lost, and a
  // lost run is charged its ceiling, which is conservative; a lost final row is replaced by the
  // run's spooled one. What it buys: a heartbeat costs no fsync.
  exec("PRAGMA synchronous = NORMAL");
  migrate();
  struct stat file_status {};
  if (stat(path.c_str(), &file_status) == 0) owner_at_open = file_status.st_uid;
}

// ---- SqliteStore ----

SqliteStore::SqliteStore(const std::string& path, std::function<double()> wall_clock,
                         SqliteOptions sqlite_options)
    : impl_(std::make_unique<Impl>()) {
  std::error_code ignored;
  auto absolute = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ignored);
  impl_->path = absolute.empty() ? path : absolute.string();
  impl_->url = "sqlite:" + impl_->path;
  impl_->wall_clock = std::move(wall_clock);
  impl_->sqlite_options = sqlite_options;
  impl_->open();
}

SqliteStore::~SqliteStore() = default;

std::string SqliteStore::url() const {
  return impl_->url;
}
const std::string& SqliteStore::path() const {
  return impl_->path;
}

void SqliteStore::transact(Access access, const std::function<void(StoreTxn&)>& body) {
  impl_->transaction(access == Access::write, [&] { body(*impl_); });
}

int SqliteStore::schema_version() {
  return impl_->read([&] { return impl_->current_schema_version(); });
}

bool SqliteStore::caller_is_owner() {
  struct stat file_status {};
  if (stat(impl_->path.c_str(), &file_status) == 0) {
    impl_->owner_at_open = file_status.st_uid;
  } else if (!impl_->owner_at_open) {
    throw impl_->error("cannot inspect " + impl_->path + ": " + errno_text(errno));
  }
  uid_t caller = impl_->sqlite_options.effective_uid.value_or(geteuid());
  return caller == 0 || caller == *impl_->owner_at_open;
}

bool SqliteStore::is_personal() {
  struct stat file_status {
  }, dir_status{};
  std::string directory = std::filesystem::path(impl_->path).parent_path().string();
  if (stat(impl_->path.c_str(), &file_status) != 0 || stat(directory.c_str(), &dir_status) != 0) {
    return false;
  }
  uid_t caller = impl_->sqlite_options.effective_uid.value_or(geteuid());
  bool others_may_write = (file_status.st_mode | dir_status.st_mode) & (S_IWGRP | S_IWOTH);
  return file_status.st_uid == caller && !others_may_write;
}

std::string SqliteStore::owner_name() {
  struct stat file_status {};
  std::optional<uid_t> owner = impl_->owner_at_open;
  if (stat(impl_->path.c_str(), &file_status) == 0) owner = file_status.st_uid;
  if (!owner) return "its owner";
  const passwd* entry = getpwuid(*owner);
  return entry ? entry->pw_name : "uid " + std::to_string(*owner);
}

// ---- aggregates ----

namespace {
// The usage rows as the runs table says they should be (zero rows left out).
constexpr const char* kRecomputedUsage = R"sql(
WITH scoped (scope_kind, scope_name, day, status, spend_micros, ceiling_micros) AS (
  SELECT 'team', team, day, status, spend_micros, ceiling_micros FROM runs WHERE team <> ''
  UNION ALL
  SELECT 'experiment', experiment, day, status, spend_micros, ceiling_micros FROM runs
    WHERE experiment <> ''
  UNION ALL
  SELECT 'project', project, day, status, spend_micros, ceiling_micros FROM runs WHERE project <> ''
  UNION ALL
  SELECT 'user', user_name, day, status, spend_micros, ceiling_micros FROM runs WHERE user_name <> ''
)
SELECT scope_kind, scope_name, day,
  SUM(CASE WHEN status = 'running' THEN 0 ELSE spend_micros END) AS spent_micros,
  SUM(CASE WHEN status = 'running' THEN ceiling_micros ELSE 0 END) AS held_micros,
  SUM(CASE WHEN status = 'running' THEN spend_micros ELSE 0 END) AS live_micros
FROM scoped GROUP BY scope_kind, scope_name, day
HAVING spent_micros <> 0 OR held_micros <> 0 OR live_micros <> 0
)sql";
}  // namespace

std::vector<std::string> SqliteStore::verify_aggregates() {
  return impl_->read([&] {
    std::vector<std::string> differences;
    // A missing row and a row of zeros are the same thing. The join finds each usage row by its
    // primary key: linear in the number of rows.
    auto q = impl_->query(std::string("WITH expected AS MATERIALIZED (") + kRecomputedUsage +
                          ") SELECT COALESCE(e.scope_kind, a.scope_kind), "
                          "COALESCE(e.scope_name, a.scope_name), COALESCE(e.day, a.day), "
                          "COALESCE(e.spent_micros, 0), COALESCE(e.held_micros, 0), "
                          "COALESCE(e.live_micros, 0), COALESCE(a.spent_micros, 0), "
                          "COALESCE(a.held_micros, 0), COALESCE(a.live_micros, 0) "
                          "FROM expected e FULL JOIN usage a ON a.scope_kind = e.scope_kind "
                          "AND a.scope_name = e.scope_name AND a.day = e.day "
                          "WHERE COALESCE(e.spent_micros, 0) <> COALESCE(a.spent_micros, 0) "
                          "OR COALESCE(e.held_micros, 0) <> COALESCE(a.held_micros, 0) "
                          "OR COALESCE(e.live_micros, 0) <> COALESCE(a.live_micros, 0)");
    auto sums = [&](int column) {
      return "spent " + q.text(column) + ", held " + q.text(column + 1) + ", live " +
             q.text(column + 2);
    };
    while (q.step()) {
      differences.push_back("usage " + q.text(0) + ":" + q.text(1) + " day " + q.text(2) + " is (" +
                            sums(6) + "), the runs say (" + sums(3) + ")");
    }
    return differences;
  });
}

void SqliteStore::rebuild_aggregates() {
  impl_->write([&] {
    impl_->exec("DELETE FROM usage");
    impl_->exec(std::string("INSERT INTO usage (scope_kind, scope_name, day, spent_micros, "
                            "held_micros, live_micros) ") +
                kRecomputedUsage);
  });
}

#undef SPENDCAP_RUN_COLUMNS

}  // namespace spendcap
