// The SQLite ledger. Contract in ledger.hpp; file, locking and permissions in sqlite_ledger.hpp.
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"

#include <fcntl.h>
#include <pwd.h>
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
};
constexpr int kSchemaVersion = static_cast<int>(std::size(kMigrations));

// The runs columns, in the order bind_run() and read_run() use.
#define SPENDCAP_RUN_COLUMNS                                                                     \
  "id, job_key, team, experiment, project, user_name, tags, command, fingerprint, host, pid, "   \
  "mode, status, reason, exit_code, rate_micros_per_hour, reserve_micros, budget_micros, "       \
  "shutdown_ms, sync_ms, started_at, day, heartbeat_at, reconcile_at, finished_at, "             \
  "spend_micros, ceiling_micros, allowed_micros, reconciled, would_stop_at, would_stop_reason, " \
  "elapsed_seconds"

// Thrown inside a transaction when SQLite reports the file locked; the transaction is retried.
struct Busy {};

// A run as its row holds it.
struct RunRow {
  std::string id, job_key, team, experiment, project, user, tags_json, command_json, fingerprint,
      host;
  int pid = 0;
  Mode mode = Mode::enforce;
  RunStatus status = RunStatus::running;
  std::string reason;
  std::optional<int> exit_code;
  Money rate_per_hour, reserve;
  std::optional<Money> budget;
  Nanos shutdown{}, sync{};
  double started_at = 0;
  std::int64_t day = 0;
  double heartbeat_at = 0, reconcile_at = 0;
  std::optional<double> finished_at;
  Money spend, ceiling, allowed;
  bool reconciled = false;
  std::optional<double> would_stop_at;
  std::string would_stop_reason;
  std::optional<double> elapsed_seconds;

  // The usage scopes: team, experiment, project, user, those that are named.
  std::vector<Scope> named_scopes() const {
    std::vector<Scope> scopes;
    for (auto [kind, name] :
         {std::pair{ScopeKind::team, &team}, std::pair{ScopeKind::experiment, &experiment},
          std::pair{ScopeKind::project, &project}, std::pair{ScopeKind::user, &user}}) {
      if (!name->empty()) scopes.push_back({kind, *name});
    }
    return scopes;
  }
  // What the run is budgeted as itself: its job across runs, or the run alone.
  Scope own_scope() const {
    return job_key.empty() ? Scope{ScopeKind::run, id} : Scope{ScopeKind::job, job_key};
  }
  void refresh_reconcile_at() {
    reconcile_at =
        spendcap::reconcile_at(heartbeat_at, ceiling, spend, rate_per_hour, shutdown, sync);
  }
};

// Durations are stored in whole milliseconds, rounded up: a longer shutdown or sync only delays a
// reconciliation, a shorter one could charge a run that may still be spending.
std::int64_t to_ms_rounded_up(Nanos duration) {
  return (duration.count() + 999'999) / 1'000'000;
}

std::string plural(std::int64_t count, const std::string& word) {
  return std::to_string(count) + " " + word + (count == 1 ? "" : "s");
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

struct SqliteLedger::Impl {
  std::string path, url;
  LedgerOptions options;
  SqliteOptions sqlite_options;
  sqlite3* db = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> statements;

  ~Impl() {
    for (auto& [sql, statement] : statements) sqlite3_finalize(statement);
    if (db) sqlite3_close_v2(db);
  }

  double now() const {
    if (options.wall_clock) return options.wall_clock();
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

  // ---- rows ----

  static void bind_run(Query& q, const RunRow& run);
  static RunRow read_run(Query& q);
  std::optional<RunRow> load_run(const std::string& id);
  RunRow load_run_or_throw(const std::string& id);
  void insert_run(const RunRow& run);
  RunView view_of(const RunRow& run, double now) const;

  std::optional<BudgetRule> rule_for(const Scope& scope);
  std::vector<BudgetRule> load_rules();  // sorted by scope
  struct Sums {
    Money spent, held, live;
  };
  Sums usage_sums(const Scope& scope, DayRange days);
  void add_usage(const RunRow& run, Money spent_delta, Money held_delta, Money live_delta);
  Money job_use_of_others(const RunRow& run);
  std::int64_t count_unfinished(const Scope& scope, DayRange days);
  std::optional<StopOrder> stop_order_for(const RunRow& run);

  // The grant for `run` asking for `want`, and the state of its budgeted scopes.
  struct ScopeState {
    BudgetRule rule;
    DayRange days;
    Sums sums;
    Money headroom;
  };
  struct GrantPlan {
    RunBudget run_budget;
    std::vector<ScopeState> scopes;
    std::optional<ScopeHeadroom> own;  // the run or job scope, when the run has a budget
    Money job_others;                  // with a job key: other runs' spend and ceilings
    GrantDecision decision;
  };
  GrantPlan plan_grant(const RunRow& run, Money want);
  std::vector<ScopeUse> scope_uses(const GrantPlan& plan, Money live_delta, Money held_delta) const;
  std::string refusal_message(const RunRow& run, const GrantPlan& plan);

  int reconcile(double now);
  void reconcile_if_due();
};

void SqliteLedger::Impl::bind_run(Query& q, const RunRow& r) {
  q.bind_all(r.id, r.job_key.empty() ? std::nullopt : std::optional<std::string>(r.job_key), r.team,
             r.experiment, r.project, r.user, r.tags_json, r.command_json, r.fingerprint, r.host,
             r.pid, to_string(r.mode), to_string(r.status), r.reason, r.exit_code, r.rate_per_hour,
             r.reserve, r.budget, to_ms_rounded_up(r.shutdown), to_ms_rounded_up(r.sync),
             r.started_at, r.day, r.heartbeat_at, r.reconcile_at, r.finished_at, r.spend, r.ceiling,
             r.allowed, r.reconciled ? 1 : 0, r.would_stop_at, r.would_stop_reason,
             r.elapsed_seconds);
}

RunRow SqliteLedger::Impl::read_run(Query& q) {
  RunRow r;
  r.id = q.text(0);
  r.job_key = q.text(1);
  r.team = q.text(2);
  r.experiment = q.text(3);
  r.project = q.text(4);
  r.user = q.text(5);
  r.tags_json = q.text(6);
  r.command_json = q.text(7);
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
  return r;
}

std::optional<RunRow> SqliteLedger::Impl::load_run(const std::string& id) {
  auto q = query("SELECT " SPENDCAP_RUN_COLUMNS " FROM runs WHERE id = ?");
  q.bind(id);
  if (!q.step()) return std::nullopt;
  return read_run(q);
}

RunRow SqliteLedger::Impl::load_run_or_throw(const std::string& id) {
  if (auto run = load_run(id)) return *run;
  throw Error("run " + id, "not in the ledger " + url);
}

void SqliteLedger::Impl::insert_run(const RunRow& run) {
  auto q =
      query("INSERT INTO runs (" SPENDCAP_RUN_COLUMNS
            ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?, ?, ?, ?, ?)");
  bind_run(q, run);
  q.run();
}

RunView SqliteLedger::Impl::view_of(const RunRow& r, double now) const {
  RunView view;
  view.id = r.id;
  view.job_key = r.job_key;
  view.team = r.team;
  view.experiment = r.experiment;
  view.project = r.project;
  view.user = r.user;
  view.host = r.host;
  auto tags = nlohmann::json::parse(r.tags_json, nullptr, /*allow_exceptions=*/false);
  if (tags.is_object()) {
    for (const auto& [key, value] : tags.items()) {
      if (value.is_string()) view.tags[key] = value.get<std::string>();
    }
  }
  view.pid = r.pid;
  view.mode = r.mode;
  view.status = r.status;
  if (r.status == RunStatus::running && is_stale(r.heartbeat_at, r.sync, now)) {
    view.status = RunStatus::lost;
  }
  view.reconciled = r.reconciled;
  view.reason = r.reason;
  view.exit_code = r.exit_code;
  view.spend = r.spend;
  view.ceiling = r.ceiling;
  view.rate_per_hour = r.rate_per_hour;
  view.budget = r.budget;
  view.started_at = r.started_at;
  view.heartbeat_at = r.heartbeat_at;
  view.finished_at = r.finished_at;
  view.would_stop_at = r.would_stop_at;
  view.would_stop_reason = r.would_stop_reason;
  return view;
}

// ---- budgets and usage ----

std::optional<BudgetRule> SqliteLedger::Impl::rule_for(const Scope& scope) {
  auto q = query(
      "SELECT amount_micros, period, max_run_micros FROM budgets "
      "WHERE scope_kind = ? AND scope_name = ?");
  q.bind_all(to_string(scope.kind), scope.name);
  if (!q.step()) return std::nullopt;
  return BudgetRule{scope, q.money(0), parse_period(q.text(1)).value_or(Period::total),
                    q.optional_money(2)};
}

SqliteLedger::Impl::Sums SqliteLedger::Impl::usage_sums(const Scope& scope, DayRange days) {
  auto q = query(
      "SELECT COALESCE(SUM(spent_micros), 0), COALESCE(SUM(held_micros), 0), "
      "COALESCE(SUM(live_micros), 0) FROM usage "
      "WHERE scope_kind = ? AND scope_name = ? AND day BETWEEN ? AND ?");
  q.bind_all(to_string(scope.kind), scope.name, days.first_day, days.last_day);
  q.step();
  return {q.money(0), q.money(1), q.money(2)};
}

void SqliteLedger::Impl::add_usage(const RunRow& run, Money spent_delta, Money held_delta,
                                   Money live_delta) {
  if (spent_delta == Money{} && held_delta == Money{} && live_delta == Money{}) return;
  for (const Scope& scope : run.named_scopes()) {
    auto q = query(
        "INSERT INTO usage (scope_kind, scope_name, day, spent_micros, held_micros, live_micros) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope_kind, scope_name, day) DO UPDATE SET "
        "spent_micros = spent_micros + excluded.spent_micros, "
        "held_micros = held_micros + excluded.held_micros, "
        "live_micros = live_micros + excluded.live_micros");
    q.bind_all(to_string(scope.kind), scope.name, run.day, spent_delta, held_delta, live_delta);
    q.run();
  }
}

Money SqliteLedger::Impl::job_use_of_others(const RunRow& run) {
  auto q = query(
      "SELECT COALESCE(SUM(CASE WHEN status = 'running' THEN ceiling_micros "
      "ELSE spend_micros END), 0) FROM runs WHERE job_key = ? AND id <> ?");
  q.bind_all(run.job_key, run.id);
  q.step();
  return q.money(0);
}

std::int64_t SqliteLedger::Impl::count_unfinished(const Scope& scope, DayRange days) {
  auto q = query(
      "SELECT count(*) FROM runs WHERE status = 'running' AND day BETWEEN ? AND ? AND "
      "CASE ? WHEN 'team' THEN team WHEN 'experiment' THEN experiment "
      "WHEN 'project' THEN project WHEN 'user' THEN user_name END = ?");
  q.bind_all(days.first_day, days.last_day, to_string(scope.kind), scope.name);
  q.step();
  return q.i64(0);
}

namespace {
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

std::optional<StopOrder> SqliteLedger::Impl::stop_order_for(const RunRow& run) {
  // Unnamed scopes bind "" and match nothing: a stop order always names its scope.
  auto q = query(
      "SELECT id, scope_kind, scope_name, reason, placed_by, placed_at FROM stop_orders "
      "WHERE cleared_at IS NULL AND ((scope_kind = 'team' AND scope_name = ?) "
      "OR (scope_kind = 'experiment' AND scope_name = ?) "
      "OR (scope_kind = 'project' AND scope_name = ?) "
      "OR (scope_kind = 'user' AND scope_name = ?) "
      "OR (scope_kind = 'job' AND scope_name = ?) "
      "OR (scope_kind = 'run' AND scope_name = ?)) ORDER BY id LIMIT 1");
  q.bind_all(run.team, run.experiment, run.project, run.user, run.job_key, run.id);
  if (!q.step()) return std::nullopt;
  return read_stop_order(q);
}

// ---- grants ----

SqliteLedger::Impl::GrantPlan SqliteLedger::Impl::plan_grant(const RunRow& run, Money want) {
  // The run's own ceiling is in its scopes' held sums (its day is in each of its periods) while
  // it is unfinished; the headroom excludes it.
  bool holding = run.status == RunStatus::running;
  Money own_ceiling = holding ? run.ceiling : Money{};
  GrantPlan plan;
  std::vector<BudgetRule> rules;
  for (const Scope& scope : run.named_scopes()) {
    if (auto rule = rule_for(scope)) rules.push_back(*rule);
  }
  std::vector<ScopeHeadroom> headrooms;
  for (const BudgetRule& rule : rules) {
    ScopeState state{rule, period_days(rule.period, run.day), {}, {}};
    state.sums = usage_sums(rule.scope, state.days);
    Money others = state.sums.spent + state.sums.held - own_ceiling;
    state.headroom = rule.amount - (options.ignore_other_runs ? Money{} : others);
    headrooms.push_back({rule.scope, state.headroom});
    plan.scopes.push_back(state);
  }
  plan.run_budget = effective_run_budget(run.budget, rules);
  if (plan.run_budget.amount) {
    if (!run.job_key.empty() && !options.ignore_other_runs)
      plan.job_others = job_use_of_others(run);
    plan.own = ScopeHeadroom{run.own_scope(), *plan.run_budget.amount - plan.job_others};
    headrooms.push_back(*plan.own);
  }
  plan.decision =
      decide_grant(own_ceiling, holding ? run.allowed : Money{}, want, run.mode, headrooms);
  return plan;
}

std::vector<ScopeUse> SqliteLedger::Impl::scope_uses(const GrantPlan& plan, Money live_delta,
                                                     Money held_delta) const {
  std::vector<ScopeUse> uses;
  for (const ScopeState& state : plan.scopes) {
    uses.push_back({state.rule.scope, state.rule.period, state.rule.amount,
                    state.sums.spent + state.sums.live + live_delta, state.sums.held + held_delta});
  }
  return uses;
}

std::string SqliteLedger::Impl::refusal_message(const RunRow& run, const GrantPlan& plan) {
  const std::optional<Scope>& binding = plan.decision.binding;
  std::string needs =
      "this run needs more than its " + format_money(run.reserve) + " shutdown reserve";
  if (!binding) {
    return "the first ceiling it asks for cannot cover its " + format_money(run.reserve) +
           " shutdown reserve";
  }
  for (const ScopeState& state : plan.scopes) {
    if (state.rule.scope != *binding) continue;
    std::int64_t unfinished = count_unfinished(state.rule.scope, state.days);
    return to_string(state.rule.scope) + " budget " + format_money(state.rule.amount) + " (" +
           to_string(state.rule.period) + ") has " +
           format_money(std::max(state.headroom, Money{})) +
           " left: " + format_money(state.sums.spent) + " spent, " + format_money(state.sums.held) +
           " held by " + plural(unfinished, "running run") + "; " + needs;
  }
  if (binding->kind == ScopeKind::job) {
    return to_string(*binding) + " budget " + format_money(*plan.run_budget.amount) + " has " +
           format_money(std::max(plan.own->headroom, Money{})) +
           " left: " + format_money(plan.job_others) + " spent or held by its other runs; " + needs;
  }
  return "the run budget " + format_money(*plan.run_budget.amount) +
         " cannot cover the shutdown reserve " + format_money(run.reserve);
}

// ---- lost runs ----

int SqliteLedger::Impl::reconcile(double now) {
  std::vector<RunRow> due;
  {
    auto q = query("SELECT " SPENDCAP_RUN_COLUMNS
                   " FROM runs WHERE status = 'running' AND reconcile_at <= ?");
    q.bind(now);
    while (q.step()) due.push_back(read_run(q));
  }
  int reconciled = 0;
  for (const RunRow& run : due) {
    if (!is_stale(run.heartbeat_at, run.sync, now)) continue;
    // finished_at: when it could last have been spending, not when someone noticed.
    auto q = query(
        "UPDATE runs SET status = 'lost', reconciled = 1, reason = 'lost: no heartbeat', "
        "spend_micros = ceiling_micros, finished_at = reconcile_at WHERE id = ?");
    q.bind(run.id);
    q.run();
    add_usage(run, run.ceiling, Money{} - run.ceiling, Money{} - run.spend);
    ++reconciled;
  }
  return reconciled;
}

void SqliteLedger::Impl::reconcile_if_due() {
  double now_seconds = now();
  bool due = read([&] {
    auto q = query("SELECT 1 FROM runs WHERE status = 'running' AND reconcile_at <= ? LIMIT 1");
    q.bind(now_seconds);
    return q.step();
  });
  if (due) write([&] { return reconcile(now()); });
}

// ---- opening ----

void SqliteLedger::Impl::create_file() {
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

int SqliteLedger::Impl::current_schema_version() {
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

void SqliteLedger::Impl::migrate() {
  int version = read([&] { return current_schema_version(); });
  if (version == kSchemaVersion) return;
  write([&] {
    version = current_schema_version();  // another process may have migrated meanwhile
    if (version > kSchemaVersion) return;
    if (version == 0)
      exec("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL)");
    for (int next = version + 1; next <= kSchemaVersion; ++next) {
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
    }
  });
  if (version > kSchemaVersion) {
    throw error("its schema version " + std::to_string(version) +
                    " is newer than this spendcap's (" + std::to_string(kSchemaVersion) + ")",
                "upgrade spendcap on this host");
  }
}

void SqliteLedger::Impl::open() {
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
}

// ---- SqliteLedger ----

SqliteLedger::SqliteLedger(const std::string& path, LedgerOptions options,
                           SqliteOptions sqlite_options)
    : impl_(std::make_unique<Impl>()) {
  std::error_code ignored;
  auto absolute = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ignored);
  impl_->path = absolute.empty() ? path : absolute.string();
  impl_->url = "sqlite:" + impl_->path;
  impl_->options = std::move(options);
  impl_->sqlite_options = sqlite_options;
  impl_->open();
}

SqliteLedger::~SqliteLedger() = default;

std::string SqliteLedger::url() const {
  return impl_->url;
}
const std::string& SqliteLedger::path() const {
  return impl_->path;
}

int SqliteLedger::schema_version() {
  return impl_->read([&] { return impl_->current_schema_version(); });
}

bool SqliteLedger::caller_is_owner() {
  struct stat file_status {};
  if (stat(impl_->path.c_str(), &file_status) != 0) {
    throw impl_->error("cannot inspect " + impl_->path + ": " + errno_text(errno));
  }
  uid_t caller = impl_->sqlite_options.effective_uid.value_or(geteuid());
  return caller == 0 || caller == file_status.st_uid;
}

bool SqliteLedger::is_personal() {
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

void SqliteLedger::apply_budgets(const std::vector<BudgetRule>& rules, bool remove_others) {
  if (!caller_is_owner()) {
    struct stat file_status {};
    std::string owner = "its owner";
    if (stat(impl_->path.c_str(), &file_status) == 0) {
      const passwd* entry = getpwuid(file_status.st_uid);
      owner = entry ? entry->pw_name : "uid " + std::to_string(file_status.st_uid);
    }
    throw Error("budgets", "only " + owner + " may change budgets in " + impl_->url,
                "ask them to run `spendcap budgets apply POLICY`");
  }
  for (const BudgetRule& rule : rules) {
    if (rule.scope.kind == ScopeKind::job || rule.scope.kind == ScopeKind::run ||
        rule.scope.name.empty() || rule.amount < Money{}) {
      throw Error("budget " + to_string(rule.scope),
                  "a budget needs a team, experiment, project or user and an amount >= 0");
    }
  }
  impl_->write([&] {
    impl_->reconcile(impl_->now());
    std::set<Scope> keep;
    for (const BudgetRule& rule : rules) {
      impl_
          ->query(
              "INSERT INTO budgets (scope_kind, scope_name, amount_micros, period, max_run_micros) "
              "VALUES (?, ?, ?, ?, ?) ON CONFLICT (scope_kind, scope_name) DO UPDATE SET "
              "amount_micros = excluded.amount_micros, period = excluded.period, "
              "max_run_micros = excluded.max_run_micros")
          .bind_all(to_string(rule.scope.kind), rule.scope.name, rule.amount,
                    to_string(rule.period), rule.max_run)
          .run();
      keep.insert(rule.scope);
    }
    if (!remove_others) return;
    std::vector<Scope> existing;
    {
      auto q = impl_->query("SELECT scope_kind, scope_name FROM budgets");
      while (q.step())
        existing.push_back({parse_scope_kind(q.text(0)).value_or(ScopeKind::run), q.text(1)});
    }
    for (const Scope& scope : existing) {
      if (keep.count(scope)) continue;
      impl_->query("DELETE FROM budgets WHERE scope_kind = ? AND scope_name = ?")
          .bind_all(to_string(scope.kind), scope.name)
          .run();
    }
  });
}

std::vector<BudgetRule> SqliteLedger::Impl::load_rules() {
  std::vector<BudgetRule> result;
  auto q =
      query("SELECT scope_kind, scope_name, amount_micros, period, max_run_micros FROM budgets");
  while (q.step()) {
    auto kind = parse_scope_kind(q.text(0));
    auto period = parse_period(q.text(3));
    if (!kind || !period) continue;  // written by a newer spendcap
    result.push_back({{*kind, q.text(1)}, q.money(2), *period, q.optional_money(4)});
  }
  std::sort(result.begin(), result.end(),
            [](const BudgetRule& a, const BudgetRule& b) { return a.scope < b.scope; });
  return result;
}

std::vector<BudgetRule> SqliteLedger::budget_rules() {
  return impl_->read([&] { return impl_->load_rules(); });
}

std::vector<BudgetView> SqliteLedger::budgets() {
  impl_->reconcile_if_due();
  return impl_->read([&] {
    std::int64_t today = utc_day(impl_->now());
    std::vector<BudgetView> views;
    for (const BudgetRule& rule : impl_->load_rules()) {
      DayRange days = period_days(rule.period, today);
      Impl::Sums sums = impl_->usage_sums(rule.scope, days);
      double period_start = rule.period == Period::total ? 0.0 : days.first_day * 86400.0;
      views.push_back({rule, period_start, sums.spent, sums.live, sums.held});
    }
    return views;
  });
}

Admission SqliteLedger::begin_run(const RunStart& start) {
  if (start.id.empty()) throw Error("run", "has no id");
  for (Money amount :
       {start.rate_per_hour, start.reserve, start.want, start.budget.value_or(Money{})}) {
    if (amount < Money{}) throw Error("run " + start.id, "negative amount of money");
  }
  return impl_->write([&] {
    double now = impl_->now();
    impl_->reconcile(now);
    if (impl_->load_run(start.id)) {
      throw Error("run " + start.id, "is already in the ledger " + impl_->url);
    }
    RunRow run;
    run.id = start.id;
    run.job_key = start.job_key;
    run.team = start.team;
    run.experiment = start.experiment;
    run.project = start.project;
    run.user = start.user;
    run.tags_json = nlohmann::json(start.tags).dump();
    run.command_json = nlohmann::json(start.command).dump();
    run.fingerprint = start.fingerprint;
    run.host = start.host;
    run.pid = start.pid;
    run.mode = start.mode;
    run.rate_per_hour = start.rate_per_hour;
    run.reserve = start.reserve;
    run.budget = start.budget;
    run.shutdown = std::chrono::milliseconds(to_ms_rounded_up(start.shutdown));
    run.sync = std::chrono::milliseconds(to_ms_rounded_up(start.sync));
    run.started_at = run.heartbeat_at = now;
    run.day = utc_day(now);
    run.status = RunStatus::refused;  // not holding anything while the grant is planned

    Impl::GrantPlan plan = impl_->plan_grant(run, start.want);
    if (!plan.run_budget.amount && plan.scopes.empty()) {
      throw Error("run", "no budget applies to this run",
                  "give --budget USD, or define a team, experiment, project or user budget in "
                  "the policy");
    }
    Admission admission;
    admission.run_budget = plan.run_budget.amount;
    admission.lowered_by = plan.run_budget.lowered_by;
    admission.grant.allowed = plan.decision.allowed;
    admission.grant.binding = plan.decision.binding;

    auto refuse = [&](std::string message, std::optional<Scope> scope, std::string reason) {
      admission.refusal = std::move(message);
      admission.refused_by = std::move(scope);
      run.reason = std::move(reason);
      run.finished_at = now;
      admission.grant.scopes = impl_->scope_uses(plan, Money{}, Money{});
      impl_->insert_run(run);
      return admission;
    };
    if (auto order = impl_->stop_order_for(run)) {
      admission.grant.stop = order;
      std::string where = to_string(order->scope);
      return refuse("stop order on " + where + " by " + order->placed_by +
                        (order->reason.empty() ? "" : ": " + order->reason),
                    order->scope, "refused: stop order on " + where);
    }
    bool fits = plan.decision.allowed > start.reserve;
    if (!fits && start.mode == Mode::enforce) {
      std::optional<Scope> by = plan.decision.binding;
      return refuse(impl_->refusal_message(run, plan), by,
                    "refused: budget" + (by ? " " + to_string(*by) : std::string()));
    }
    if (!fits) {  // warn mode: admitted, and the ledger says it would have been refused
      admission.refusal = impl_->refusal_message(run, plan);
      admission.refused_by = plan.decision.binding;
      run.would_stop_at = now;
      run.would_stop_reason = "would be refused: " + admission.refusal;
    }
    run.status = RunStatus::running;
    run.ceiling = plan.decision.ceiling;
    run.allowed = plan.decision.allowed;
    run.refresh_reconcile_at();
    impl_->insert_run(run);
    impl_->add_usage(run, Money{}, run.ceiling, Money{});
    admission.admitted = true;
    admission.grant.ceiling = run.ceiling;
    admission.grant.scopes = impl_->scope_uses(plan, Money{}, run.ceiling);
    return admission;
  });
}

Grant SqliteLedger::heartbeat(const std::string& run_id, Money spend, Money want) {
  return impl_->write([&] {
    double now = impl_->now();
    impl_->reconcile(now);
    RunRow run = impl_->load_run_or_throw(run_id);
    Impl::GrantPlan plan = impl_->plan_grant(run, want);
    Grant grant;
    grant.stop = impl_->stop_order_for(run);
    if (run.status != RunStatus::running) {  // final already: it holds nothing more
      grant.ceiling = run.ceiling;
      grant.allowed = run.allowed;
      grant.scopes = impl_->scope_uses(plan, Money{}, Money{});
      return grant;
    }
    Money live_delta = spend - run.spend;
    Money held_delta = plan.decision.ceiling - run.ceiling;
    run.spend = spend;
    run.ceiling = plan.decision.ceiling;
    run.allowed = plan.decision.allowed;
    run.heartbeat_at = now;
    run.refresh_reconcile_at();
    impl_
        ->query(
            "UPDATE runs SET spend_micros = ?, ceiling_micros = ?, allowed_micros = ?, "
            "heartbeat_at = ?, reconcile_at = ? WHERE id = ?")
        .bind_all(run.spend, run.ceiling, run.allowed, run.heartbeat_at, run.reconcile_at, run.id)
        .run();
    impl_->add_usage(run, Money{}, held_delta, live_delta);
    grant.ceiling = run.ceiling;
    grant.allowed = plan.decision.allowed;
    grant.binding = plan.decision.binding;
    grant.scopes = impl_->scope_uses(plan, live_delta, held_delta);
    return grant;
  });
}

void SqliteLedger::record_would_stop(const std::string& run_id, const std::string& reason) {
  impl_->write([&] {
    double now = impl_->now();
    impl_->reconcile(now);
    impl_->load_run_or_throw(run_id);
    // The first time is the one that matters: when it would have been stopped.
    impl_
        ->query(
            "UPDATE runs SET would_stop_at = ?, would_stop_reason = ? "
            "WHERE id = ? AND would_stop_at IS NULL")
        .bind_all(now, reason, run_id)
        .run();
  });
}

bool SqliteLedger::finish_run(const RunFinal& final) {
  if (final.status == RunStatus::running) {
    throw Error("run " + final.id, "cannot be finished with status running");
  }
  return impl_->write([&] {
    double now = impl_->now();
    impl_->reconcile(now);
    RunRow run = impl_->load_run_or_throw(final.id);
    bool unfinished = run.status == RunStatus::running;
    if (!unfinished && !run.reconciled) return false;
    impl_
        ->query(
            "UPDATE runs SET status = ?, reason = ?, exit_code = ?, spend_micros = ?, "
            "elapsed_seconds = ?, reconciled = 0, finished_at = COALESCE(finished_at, ?) "
            "WHERE id = ?")
        .bind_all(to_string(final.status), final.reason, final.exit_code, final.spend,
                  final.elapsed_seconds, now, final.id)
        .run();
    if (unfinished) {
      impl_->add_usage(run, final.spend, Money{} - run.ceiling, Money{} - run.spend);
    } else {  // a reconciled lost run: its real spend replaces the ceiling it was charged
      impl_->add_usage(run, final.spend - run.spend, Money{}, Money{});
    }
    return true;
  });
}

std::vector<RunView> SqliteLedger::active_runs() {
  impl_->reconcile_if_due();
  return impl_->read([&] {
    double now = impl_->now();
    std::vector<RunView> views;
    auto q = impl_->query("SELECT " SPENDCAP_RUN_COLUMNS
                          " FROM runs WHERE status = 'running' ORDER BY started_at, id");
    while (q.step()) views.push_back(impl_->view_of(Impl::read_run(q), now));
    return views;
  });
}

std::optional<RunView> SqliteLedger::find_run(const std::string& run_id) {
  impl_->reconcile_if_due();
  return impl_->read([&]() -> std::optional<RunView> {
    auto run = impl_->load_run(run_id);
    if (!run) return std::nullopt;
    return impl_->view_of(*run, impl_->now());
  });
}

int SqliteLedger::reconcile_lost_runs() {
  return impl_->write([&] { return impl_->reconcile(impl_->now()); });
}

StopOrder SqliteLedger::place_stop_order(const Scope& scope, const std::string& reason,
                                         const std::string& placed_by) {
  if (scope.name.empty()) throw Error("stop order", "names no " + to_string(scope.kind));
  return impl_->write([&] {
    double now = impl_->now();
    impl_->reconcile(now);
    impl_
        ->query(
            "INSERT INTO stop_orders (scope_kind, scope_name, reason, placed_by, placed_at) "
            "VALUES (?, ?, ?, ?, ?)")
        .bind_all(to_string(scope.kind), scope.name, reason, placed_by, now)
        .run();
    return StopOrder{sqlite3_last_insert_rowid(impl_->db), scope, reason, placed_by, now};
  });
}

int SqliteLedger::clear_stop_orders(const Scope& scope) {
  return impl_->write([&] {
    double now = impl_->now();
    impl_->reconcile(now);
    impl_
        ->query(
            "UPDATE stop_orders SET cleared_at = ? "
            "WHERE scope_kind = ? AND scope_name = ? AND cleared_at IS NULL")
        .bind_all(now, to_string(scope.kind), scope.name)
        .run();
    return impl_->changes();
  });
}

std::vector<StopOrder> SqliteLedger::active_stop_orders() {
  return impl_->read([&] {
    std::vector<StopOrder> orders;
    auto q = impl_->query(
        "SELECT id, scope_kind, scope_name, reason, placed_by, placed_at FROM stop_orders "
        "WHERE cleared_at IS NULL ORDER BY id");
    while (q.step()) orders.push_back(read_stop_order(q));
    return orders;
  });
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

std::vector<std::string> SqliteLedger::verify_aggregates() {
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

void SqliteLedger::rebuild_aggregates() {
  impl_->write([&] {
    impl_->exec("DELETE FROM usage");
    impl_->exec(std::string("INSERT INTO usage (scope_kind, scope_name, day, spent_micros, "
                            "held_micros, live_micros) ") +
                kRecomputedUsage);
  });
}

#undef SPENDCAP_RUN_COLUMNS

}  // namespace spendcap
