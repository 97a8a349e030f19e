// The PostgreSQL store of the ledger: connection, retries, schema, roles. Contract in
// postgres_store.hpp and ledger_store.hpp; the rules are BudgetLedger's.
#include "spendcap/ledger/postgres/postgres_store.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "libpq.hpp"
#include "postgres_schema.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/stored_text.hpp"

namespace spendcap {

bool is_postgres_url(const std::string& url) {
  return url.starts_with("postgresql://") || url.starts_with("postgres://");
}

namespace {

using postgres_schema::kRunColumns;

// A failed statement or connection, inside a transaction: retried when `retryable`.
struct PgFailure {
  std::string sqlstate;  // "" when the connection failed
  std::string message;
  bool retryable = false;
};

bool retryable_sqlstate(const std::string& state) {
  // Serialization failure, deadlock; the connection class (08); the server shutting down or
  // starting (57P01..57P03).
  return state == "40001" || state == "40P01" || state.starts_with("08") || state == "57P01" ||
         state == "57P02" || state == "57P03";
}

// A stop signal waiting while this thread blocks it (as SqliteStore's): a retry gives up at once.
int pending_stop_signal() {
  sigset_t pending;
  if (::sigpending(&pending) != 0) return 0;
  for (int signal : kStopSignals) {
    if (sigismember(&pending, signal)) return signal;
  }
  return 0;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// A statement's parameters, as text (libpq's text format).
using Param = std::optional<std::string>;
Param param(std::int64_t value) {
  return std::to_string(value);
}
Param param(int value) {
  return std::to_string(value);
}
Param param(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return std::string(text);
}
Param param(Money value) {
  return std::to_string(value.micros);
}
template <class T>
Param param(const std::optional<T>& value) {
  return value ? param(*value) : std::nullopt;
}

// One statement's result rows.
class Result {
 public:
  explicit Result(libpq::PGresult* result) : result_(result) {}
  ~Result() {
    if (result_) libpq::api().clear(result_);
  }
  Result(Result&& other) noexcept : result_(std::exchange(other.result_, nullptr)) {}
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  Result& operator=(Result&& other) noexcept {
    std::swap(result_, other.result_);
    return *this;
  }

  libpq::PGresult* raw() const { return result_; }
  int rows() const { return libpq::api().ntuples(result_); }
  bool is_null(int row, int column) const {
    return libpq::api().getisnull(result_, row, column) != 0;
  }
  std::string text(int row, int column) const {
    return libpq::api().getvalue(result_, row, column);
  }
  std::int64_t i64(int row, int column) const {
    std::string value = text(row, column);
    std::int64_t number = 0;
    std::from_chars(value.data(), value.data() + value.size(), number);
    return number;
  }
  double f64(int row, int column) const { return std::strtod(text(row, column).c_str(), nullptr); }
  Money money(int row, int column) const { return Money{i64(row, column)}; }
  std::optional<Money> optional_money(int row, int column) const {
    return is_null(row, column) ? std::nullopt : std::optional<Money>(money(row, column));
  }
  std::optional<double> optional_f64(int row, int column) const {
    return is_null(row, column) ? std::nullopt : std::optional<double>(f64(row, column));
  }
  std::int64_t affected() const { return std::atoll(libpq::api().cmd_tuples(result_)); }

 private:
  libpq::PGresult* result_;
};

std::int64_t to_ms_rounded_up(Nanos duration) {
  return (duration.count() + 999'999) / 1'000'000;
}

// A run as the JSON object the ledger's functions take (json_populate_record over runs).
std::string run_json(const RunRecord& r) {
  nlohmann::json row = {
      {"id", r.id},
      {"job_key", r.job_key.empty() ? nlohmann::json() : nlohmann::json(r.job_key)},
      {"team", r.team},
      {"experiment", r.experiment},
      {"project", r.project},
      {"user_name", r.user},
      {"tags", json_of(r.tags)},
      {"command", json_of(r.command)},
      {"fingerprint", r.fingerprint},
      {"host", r.host},
      {"pid", r.pid},
      {"mode", to_string(r.mode)},
      {"status", to_string(r.status)},
      {"reason", r.reason},
      {"exit_code", r.exit_code ? nlohmann::json(*r.exit_code) : nlohmann::json()},
      {"rate_micros_per_hour", r.rate_per_hour.micros},
      {"reserve_micros", r.reserve.micros},
      {"budget_micros", r.budget ? nlohmann::json(r.budget->micros) : nlohmann::json()},
      {"shutdown_ms", to_ms_rounded_up(r.shutdown)},
      {"sync_ms", to_ms_rounded_up(r.sync)},
      {"started_at", r.started_at},
      {"day", r.day},
      {"heartbeat_at", r.heartbeat_at},
      {"reconcile_at", r.reconcile_at},
      {"finished_at", r.finished_at ? nlohmann::json(*r.finished_at) : nlohmann::json()},
      {"spend_micros", r.spend.micros},
      {"ceiling_micros", r.ceiling.micros},
      {"allowed_micros", r.allowed.micros},
      {"reconciled", r.reconciled ? 1 : 0},
      {"would_stop_at", r.would_stop_at ? nlohmann::json(*r.would_stop_at) : nlohmann::json()},
      {"would_stop_reason", r.would_stop_reason},
      {"elapsed_seconds",
       r.elapsed_seconds ? nlohmann::json(*r.elapsed_seconds) : nlohmann::json()},
      {"uid", r.uid ? nlohmann::json(*r.uid) : nlohmann::json()},
      {"reported_spend_micros", r.reported_spend.micros},
      {"overrun", r.overrun ? 1 : 0},
  };
  auto optional = [](const auto& value) {
    return value ? nlohmann::json(*value) : nlohmann::json();
  };
  auto money = [](const std::optional<Money>& value) {
    return value ? nlohmann::json(value->micros) : nlohmann::json();
  };
  // As SQLite's: gpu_measured NULL is no GPU record; figures not measured are NULL, never 0.
  if (r.gpu) {
    const RunGpu& g = *r.gpu;
    bool measured = g.not_measured.empty();
    row["gpu_measured"] = measured ? 1 : 0;
    row["gpu_not_measured"] = g.not_measured;
    row["gpu_devices"] = measured ? nlohmann::json(g.devices) : nlohmann::json();
    row["gpu_allocated_seconds"] =
        measured ? nlohmann::json(g.allocated_seconds) : nlohmann::json();
    row["gpu_busy_seconds"] = optional(g.busy_seconds);
    row["gpu_idle_spend_micros"] = money(g.idle_spend);
    row["gpu_energy_kwh"] = optional(g.energy_kwh);
    row["gpu_co2_kg"] = optional(g.co2_kg);
    row["gpu_energy_cost_micros"] = money(g.energy_cost);
    row["gpu_sources"] = g.sources;
    row["gpu_timeline"] = timeline_to_text(g.timeline);
  }
  row["metric_name"] = optional(r.metric_name);
  row["metric_value"] = optional(r.metric_value);
  row["units"] = optional(r.units);
  row["egress_gb"] = optional(r.egress_gb);
  row["storage_peak_gb"] = optional(r.storage_peak_gb);
  row["storage_spend_micros"] = money(r.storage_spend);
  return dump_json(row);
}

RunRecord read_run(const Result& q, int i) {
  RunRecord r;
  r.id = q.text(i, 0);
  r.job_key = q.text(i, 1);
  r.team = q.text(i, 2);
  r.experiment = q.text(i, 3);
  r.project = q.text(i, 4);
  r.user = q.text(i, 5);
  r.tags = tags_of_json(q.text(i, 6));
  r.command = command_of_json(q.text(i, 7));
  r.fingerprint = q.text(i, 8);
  r.host = q.text(i, 9);
  r.pid = static_cast<int>(q.i64(i, 10));
  r.mode = parse_mode(q.text(i, 11)).value_or(Mode::enforce);
  r.status = parse_run_status(q.text(i, 12)).value_or(RunStatus::running);
  r.reason = q.text(i, 13);
  if (!q.is_null(i, 14)) r.exit_code = static_cast<int>(q.i64(i, 14));
  r.rate_per_hour = q.money(i, 15);
  r.reserve = q.money(i, 16);
  r.budget = q.optional_money(i, 17);
  r.shutdown = std::chrono::milliseconds(q.i64(i, 18));
  r.sync = std::chrono::milliseconds(q.i64(i, 19));
  r.started_at = q.f64(i, 20);
  r.day = q.i64(i, 21);
  r.heartbeat_at = q.f64(i, 22);
  r.reconcile_at = q.f64(i, 23);
  r.finished_at = q.optional_f64(i, 24);
  r.spend = q.money(i, 25);
  r.ceiling = q.money(i, 26);
  r.allowed = q.money(i, 27);
  r.reconciled = q.i64(i, 28) != 0;
  r.would_stop_at = q.optional_f64(i, 29);
  r.would_stop_reason = q.text(i, 30);
  r.elapsed_seconds = q.optional_f64(i, 31);
  if (!q.is_null(i, 32)) r.uid = q.i64(i, 32);
  r.reported_spend = q.money(i, 33);
  r.overrun = q.i64(i, 34) != 0;
  if (!q.is_null(i, 35)) {
    RunGpu& g = r.gpu.emplace();
    g.not_measured = q.text(i, 36);
    if (!q.is_null(i, 37)) g.devices = static_cast<int>(q.i64(i, 37));
    g.allocated_seconds = q.optional_f64(i, 38).value_or(0);
    g.busy_seconds = q.optional_f64(i, 39);
    g.idle_spend = q.optional_money(i, 40);
    g.energy_kwh = q.optional_f64(i, 41);
    g.co2_kg = q.optional_f64(i, 42);
    g.energy_cost = q.optional_money(i, 43);
    g.sources = q.text(i, 44);
    g.timeline = timeline_from_text(q.text(i, 45));
  }
  if (!q.is_null(i, 46)) r.metric_name = q.text(i, 46);
  r.metric_value = q.optional_f64(i, 47);
  r.units = q.optional_f64(i, 48);
  r.egress_gb = q.optional_f64(i, 49);
  r.storage_peak_gb = q.optional_f64(i, 50);
  r.storage_spend = q.optional_money(i, 51);
  return r;
}

// A budget's member groups (NULL: anyone). A list that cannot be read admits nobody but the
// ledger's owner: membership fails closed (as SQLite's).
std::vector<std::string> group_list(const Result& q, int i, int column) {
  return member_groups_of_json(
      q.is_null(i, column) ? std::nullopt : std::optional<std::string>(q.text(i, column)));
}

Param member_groups_param(const BudgetRule& rule) {
  if (rule.member_groups.empty()) return std::nullopt;
  return nlohmann::json(rule.member_groups).dump();
}

OutboxEntry read_outbox_entry(const Result& q, int i) {
  return OutboxEntry{q.i64(i, 0),
                     q.text(i, 1),
                     q.text(i, 2),
                     q.text(i, 3),
                     q.text(i, 4),
                     q.text(i, 5),
                     q.text(i, 6),
                     q.text(i, 7),
                     q.text(i, 8),
                     q.f64(i, 9),
                     static_cast<int>(q.i64(i, 10)),
                     q.text(i, 11)};
}

std::vector<RunRecord> read_runs(const Result& q) {
  std::vector<RunRecord> runs;
  for (int i = 0; i < q.rows(); ++i) runs.push_back(read_run(q, i));
  return runs;
}

StopOrder read_stop_order(const Result& q, int i) {
  StopOrder order;
  order.id = q.i64(i, 0);
  order.scope = {parse_scope_kind(q.text(i, 1)).value_or(ScopeKind::run), q.text(i, 2)};
  order.reason = q.text(i, 3);
  order.placed_by = q.text(i, 4);
  order.placed_at = q.f64(i, 5);
  return order;
}

// The column that holds the name of a scope of this kind.
const char* scope_column(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::team:
      return "team";
    case ScopeKind::experiment:
      return "experiment";
    case ScopeKind::project:
      return "project";
    case ScopeKind::user:
      return "user_name";
    case ScopeKind::job:
      return "job_key";
    case ScopeKind::run:
      return "id";
  }
  return "id";
}

}  // namespace

// ---- the connection ----

struct PostgresStore::Impl final : StoreTxn {
  std::string url;           // as given: libpq's, may hold a password
  std::string redacted_url;  // for messages
  std::function<double()> wall_clock;
  PostgresOptions options;
  libpq::PGconn* conn = nullptr;
  std::minstd_rand jitter{static_cast<unsigned>(getpid())};

  ~Impl() { disconnect(); }

  Error error(std::string why, std::string hint = {}) const {
    return Error("ledger " + redacted_url, std::move(why), std::move(hint));
  }

  void disconnect() {
    if (conn) libpq::api().finish(conn);
    conn = nullptr;
  }

  // A connection, made when there is none or the last one broke; throws PgFailure (retryable).
  void connect() {
    if (conn && libpq::api().status(conn) == libpq::CONNECTION_OK) return;
    disconnect();
    // The url's own settings win over these defaults (expand_dbname: later keywords override).
    // A password from ledger_password_file comes after dbname, so it overrides the url's.
    const char* keywords[] = {"connect_timeout", "application_name", "dbname",
                              options.password.empty() ? nullptr : "password", nullptr};
    const char* values[] = {"5", "spendcap", url.c_str(), options.password.c_str(), nullptr};
    conn = libpq::api().connectdb_params(keywords, values, 1);
    if (!conn) throw PgFailure{"", "out of memory", false};
    // The server's notices (a ROLLBACK with nothing to roll back...) are not for the user.
    libpq::api().set_notice_processor(
        conn, [](void*, const char*) {}, nullptr);
    if (libpq::api().status(conn) != libpq::CONNECTION_OK) {
      std::string message = trimmed(libpq::api().error_message(conn));
      disconnect();
      // A refused password or a missing database does not get better by waiting.
      bool permanent = message.find("password") != std::string::npos ||
                       message.find("does not exist") != std::string::npos ||
                       message.find("invalid") != std::string::npos;
      throw PgFailure{"", "cannot connect: " + message, !permanent};
    }
  }

  // One statement, its parameters bound (never spliced into the text).
  Result exec(const std::string& sql, const std::vector<Param>& params = {}) {
    if (!conn) throw PgFailure{"", "not connected", true};
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const Param& value : params) values.push_back(value ? value->c_str() : nullptr);
    return checked(libpq::api().exec_params(conn, sql.c_str(), static_cast<int>(values.size()),
                                            nullptr, values.data(), nullptr, nullptr, 0));
  }

  // A script of this file's own statements (the schema), without parameters.
  void exec_script(const std::string& sql) {
    if (!conn) throw PgFailure{"", "not connected", true};
    checked(libpq::api().exec(conn, sql.c_str()));
  }

  Result checked(libpq::PGresult* raw_result) {
    Result result(raw_result);
    libpq::PGresult* raw = result.raw();
    auto status = raw ? libpq::api().result_status(raw) : libpq::PGRES_FATAL_ERROR;
    if (status == libpq::PGRES_COMMAND_OK || status == libpq::PGRES_TUPLES_OK) return result;
    std::string state, message;
    if (raw) {
      const char* field = libpq::api().result_error_field(raw, libpq::PG_DIAG_SQLSTATE);
      state = field ? field : "";
      message = trimmed(libpq::api().result_error_message(raw));
    }
    if (message.empty()) message = trimmed(libpq::api().error_message(conn));
    bool lost = libpq::api().status(conn) != libpq::CONNECTION_OK;
    throw PgFailure{state, message, lost || retryable_sqlstate(state)};
  }

  // Runs `body` in one transaction, again after a retryable failure, until the retry timeout.
  // `autocommit`: `body` is one statement, its own transaction (one round trip: the grant
  // functions), so no BEGIN and COMMIT are sent.
  template <class Body>
  void transaction(bool write, Body&& body, bool autocommit = false) {
    auto started = std::chrono::steady_clock::now();
    for (int attempt = 1;; ++attempt) {
      try {
        connect();
        if (!autocommit) {
          exec(write ? "BEGIN ISOLATION LEVEL READ COMMITTED"
                     : "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
        }
        try {
          body();
        } catch (...) {
          if (!autocommit) rollback();
          throw;
        }
        if (!autocommit) exec("COMMIT");
        return;
      } catch (const PgFailure& failure) {
        rollback();
        std::string what = failure.sqlstate.empty()
                               ? failure.message
                               : failure.message + " (SQLSTATE " + failure.sqlstate + ")";
        if (!failure.retryable) {
          throw error(what, failure.sqlstate == "42501"
                                ? "the ledger's roles allow this only to its owner"
                                : "");
        }
        if (int signal = pending_stop_signal()) {
          throw error(what + "; gave up retrying on signal " + std::to_string(signal),
                      "a stop signal came while retrying");
        }
        if (std::chrono::steady_clock::now() - started >= options.retry_timeout) {
          throw error(
              "unreachable or failing for " + format_duration(options.retry_timeout) + ": " + what,
              "check that the PostgreSQL server is up and reachable from this host");
        }
        // Back-off with jitter: 5 ms doubling to 1 s.
        int most_ms = 5 << std::min(attempt, 8);
        std::this_thread::sleep_for(
            std::chrono::milliseconds(most_ms / 2 + jitter() % (most_ms / 2 + 1)));
      }
    }
  }

  void rollback() {
    if (!conn) return;
    if (libpq::api().status(conn) != libpq::CONNECTION_OK) {
      disconnect();
      return;
    }
    libpq::PGresult* result =
        libpq::api().exec_params(conn, "ROLLBACK", 0, nullptr, nullptr, nullptr, nullptr, 0);
    if (result) libpq::api().clear(result);
  }

  // ---- opening ----

  // The schema of the tables: the first of the search_path, created when the url names one that
  // does not exist yet.
  std::string current_schema() {
    Result q = exec("SELECT current_schema()");
    if (q.is_null(0, 0)) {
      Result first =
          exec("SELECT trim(both ' \"' FROM split_part(current_setting('search_path'), ',', 1))");
      std::string name = first.text(0, 0);
      if (!name.empty() && name != "$user") {
        exec("SELECT set_config('spendcap.schema', $1, true)", {name});
        exec(
            "DO $$ BEGIN EXECUTE format('CREATE SCHEMA IF NOT EXISTS %I', "
            "current_setting('spendcap.schema')); END $$");
        q = exec("SELECT current_schema()");
      }
    }
    if (q.is_null(0, 0)) {
      throw error("its search_path names no schema that exists",
                  "create the schema, or name one with ?options=-csearch_path%3Dname in the url");
    }
    return q.text(0, 0);
  }

  int current_schema_version() {
    Result tables = exec(
        "SELECT to_regclass('schema_version') IS NOT NULL, "
        "(SELECT count(*) FROM pg_tables WHERE schemaname = current_schema())");
    if (tables.text(0, 0) != "t") {
      if (tables.i64(0, 1) > 0) {
        throw error("not a spendcap ledger (schema " + current_schema() + " has other tables)",
                    "name another schema in the url's search_path");
      }
      return 0;
    }
    return static_cast<int>(exec("SELECT COALESCE(MAX(version), 0) FROM schema_version").i64(0, 0));
  }

  void migrate() {
    const int latest = static_cast<int>(postgres_schema::kMigrations.size());
    int version = 0;
    // Most opens find the schema current: one statement says so (spendcap_schema_version, since
    // v13), instead of the migrator's transaction and lock. Any failure (an older schema without
    // the function, no schema yet) takes the full path below.
    try {
      connect();
      version = static_cast<int>(exec("SELECT spendcap_schema_version()").i64(0, 0));
      if (version == latest) return;
    } catch (const PgFailure&) {
    }
    transaction(true, [&] {
      current_schema();
      // One migrator at a time per schema.
      exec(
          "SELECT pg_advisory_xact_lock(hashtextextended('spendcap-migrate:' || "
          "current_schema(), 0))");
      version = current_schema_version();
      if (version >= latest) return;
      if (version == 0) {
        exec(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE "
            "PRECISION)");
      }
      for (int next = version + 1; next <= latest; ++next) {
        try {
          exec_script(postgres_schema::kMigrations[next - 1]);
        } catch (PgFailure& failure) {
          if (failure.sqlstate == "42501") {
            failure.message = "its schema is version " + std::to_string(version) +
                              ", older than this spendcap's (" + std::to_string(latest) +
                              "), and this role may not migrate it (" + failure.message +
                              "); the ledger's owner upgrades it by running spendcap once";
          }
          throw;
        }
        exec(
            "INSERT INTO schema_version (version, applied_at) "
            "VALUES ($1, extract(epoch FROM clock_timestamp()))",
            {param(next)});
      }
      exec_script(postgres_schema::routines());
    });
    if (version > latest) {
      throw error("its schema version " + std::to_string(version) +
                      " is newer than this spendcap's (" + std::to_string(latest) + ")",
                  "upgrade spendcap on this host");
    }
  }

  // ---- rows (StoreTxn) ----

  double now() override {
    if (wall_clock) return wall_clock();
    return exec("SELECT extract(epoch FROM clock_timestamp())::double precision").f64(0, 0);
  }

  // One advisory lock per scope, in the order given (sorted by BudgetLedger): every transaction
  // that reads a scope's usage to raise a ceiling holds it until it ends.
  void lock_scopes(const std::vector<Scope>& scopes) override {
    for (const Scope& scope : scopes) {
      exec("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || $1, 0))",
           {to_string(scope)});
    }
  }

  std::optional<RunRecord> find_run(const std::string& id) override {
    Result q = exec(std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = $1", {id});
    if (q.rows() == 0) return std::nullopt;
    return read_run(q, 0);
  }
  void insert_run(const RunRecord& run) override {
    exec("SELECT spendcap_insert_run($1::json)", {run_json(run)});
  }
  void update_run(const RunRecord& run) override {
    exec("SELECT spendcap_update_run($1::json)", {run_json(run)});
  }
  std::vector<RunRecord> all_runs() override {
    return read_runs(
        exec(std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY started_at, id"));
  }
  std::vector<RunRecord> unfinished_runs() override {
    return read_runs(exec(std::string("SELECT ") + kRunColumns +
                          " FROM runs WHERE status = 'running' ORDER BY started_at, id"));
  }
  std::vector<RunRecord> overrun_runs(std::int64_t since_day) override {
    return read_runs(exec(std::string("SELECT ") + kRunColumns +
                              " FROM runs WHERE overrun = 1 AND day >= $1 ORDER BY started_at, id",
                          {param(since_day)}));
  }
  std::vector<RunRecord> runs_due(double now) override {
    return read_runs(exec(std::string("SELECT ") + kRunColumns +
                              " FROM runs WHERE status = 'running' AND reconcile_at <= $1",
                          {param(now)}));
  }
  bool any_run_due(double now) override {
    return exec("SELECT 1 FROM runs WHERE status = 'running' AND reconcile_at <= $1 LIMIT 1",
                {param(now)})
               .rows() > 0;
  }
  std::vector<RunRecord> runs_of_job(const std::string& job_key) override {
    return read_runs(
        exec(std::string("SELECT ") + kRunColumns + " FROM runs WHERE job_key = $1", {job_key}));
  }
  std::vector<RunRecord> runs_of_fingerprint(const std::string& fingerprint,
                                             double since) override {
    return read_runs(exec(std::string("SELECT ") + kRunColumns +
                              " FROM runs WHERE fingerprint = $1 AND started_at >= $2 "
                              "ORDER BY started_at, id",
                          {fingerprint, param(since)}));
  }
  std::int64_t count_unfinished(const Scope& scope, DayRange days) override {
    return exec(std::string("SELECT count(*) FROM runs WHERE status = 'running' AND day BETWEEN "
                            "$1 AND $2 AND ") +
                    scope_column(scope.kind) + " = $3",
                {param(days.first_day), param(days.last_day), scope.name})
        .i64(0, 0);
  }
  Money overrun(const Scope& scope, DayRange days) override {
    return exec(std::string("SELECT COALESCE(SUM(spend_micros - ceiling_micros), 0) FROM runs "
                            "WHERE overrun = 1 AND day BETWEEN $1 AND $2 AND ") +
                    scope_column(scope.kind) + " = $3",
                {param(days.first_day), param(days.last_day), scope.name})
        .money(0, 0);
  }

  std::optional<BudgetRule> budget_rule(const Scope& scope) override {
    Result q = exec(
        "SELECT amount_micros, period, max_run_micros, member_groups FROM budgets "
        "WHERE scope_kind = $1 AND scope_name = $2",
        {to_string(scope.kind), scope.name});
    if (q.rows() == 0) return std::nullopt;
    return BudgetRule{scope, q.money(0, 0), parse_period(q.text(0, 1)).value_or(Period::total),
                      q.optional_money(0, 2), group_list(q, 0, 3)};
  }
  std::vector<BudgetRule> budget_rules() override {
    std::vector<BudgetRule> result;
    Result q = exec(
        "SELECT scope_kind, scope_name, amount_micros, period, max_run_micros, member_groups "
        "FROM budgets");
    for (int i = 0; i < q.rows(); ++i) {
      auto kind = parse_scope_kind(q.text(i, 0));
      auto period = parse_period(q.text(i, 3));
      if (!kind || !period) continue;  // written by a newer spendcap
      result.push_back({{*kind, q.text(i, 1)},
                        q.money(i, 2),
                        *period,
                        q.optional_money(i, 4),
                        group_list(q, i, 5)});
    }
    return result;
  }
  void put_budget_rule(const BudgetRule& rule) override {
    exec(
        "INSERT INTO budgets (scope_kind, scope_name, amount_micros, period, max_run_micros, "
        "member_groups) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope_kind, scope_name) "
        "DO UPDATE SET amount_micros = excluded.amount_micros, period = excluded.period, "
        "max_run_micros = excluded.max_run_micros, member_groups = excluded.member_groups",
        {to_string(rule.scope.kind), rule.scope.name, param(rule.amount), to_string(rule.period),
         param(rule.max_run), member_groups_param(rule)});
  }
  void remove_budget_rule(const Scope& scope) override {
    exec("DELETE FROM budgets WHERE scope_kind = $1 AND scope_name = $2",
         {to_string(scope.kind), scope.name});
  }

  // live: the usage rows count an unfinished run's spend as of its last raise (v13); the runs
  // give the rest.
  Usage usage(const Scope& scope, DayRange days) override {
    Result q =
        exec(std::string("SELECT COALESCE(SUM(spent_micros), 0), COALESCE(SUM(held_micros), 0), "
                         "COALESCE(SUM(live_micros), 0) + (SELECT COALESCE(SUM(spend_micros - "
                         "usage_live_micros), 0) FROM runs WHERE status = 'running' AND ") +
                 scope_column(scope.kind) +
                 " = $2 AND day BETWEEN $3 AND $4) FROM usage "
                 "WHERE scope_kind = $1 AND scope_name = $2 AND day BETWEEN $3 AND $4",
             {to_string(scope.kind), scope.name, param(days.first_day), param(days.last_day)});
    return {q.money(0, 0), q.money(0, 1), q.money(0, 2)};
  }
  // The runs table's trigger keeps the usage rows (nobody writes them, runners included); the
  // deltas BudgetLedger computes are the same ones.
  void add_usage(const std::vector<Scope>&, std::int64_t, const Usage&) override {}

  std::optional<StopOrder> first_stop_order(const std::vector<Scope>& scopes) override {
    if (scopes.empty()) return std::nullopt;
    std::vector<std::string> names;
    for (const Scope& scope : scopes) names.push_back(to_string(scope));
    Result q = exec(
        "SELECT id, scope_kind, scope_name, reason, placed_by, placed_at FROM stop_orders "
        "WHERE cleared_at IS NULL AND scope_kind || ':' || scope_name = ANY($1::text[]) "
        "ORDER BY id LIMIT 1",
        {text_array(names)});
    if (q.rows() == 0) return std::nullopt;
    return read_stop_order(q, 0);
  }
  StopOrder insert_stop_order(const Scope& scope, const std::string& reason,
                              const std::string& placed_by, double placed_at) override {
    Result q = exec("SELECT spendcap_place_stop_order($1, $2, $3, $4, $5)",
                    {to_string(scope.kind), scope.name, reason, placed_by, param(placed_at)});
    return StopOrder{q.i64(0, 0), scope, reason, placed_by, placed_at};
  }
  int clear_stop_orders(const Scope& scope, double cleared_at) override {
    return static_cast<int>(exec("SELECT spendcap_clear_stop_orders($1, $2, $3)",
                                 {to_string(scope.kind), scope.name, param(cleared_at)})
                                .i64(0, 0));
  }
  std::vector<StopOrder> active_stop_orders() override {
    Result q = exec(
        "SELECT id, scope_kind, scope_name, reason, placed_by, placed_at FROM stop_orders "
        "WHERE cleared_at IS NULL ORDER BY id");
    std::vector<StopOrder> orders;
    for (int i = 0; i < q.rows(); ++i) orders.push_back(read_stop_order(q, i));
    return orders;
  }

  // ---- the webhook outbox: row-level security shows a runner only its own entries ----

  std::int64_t insert_outbox(const OutboxEntry& e) override {
    return exec(
               "INSERT INTO outbox (event_id, event, run_id, user_name, destination, format, "
               "secret_env, body, created_at, attempts, last_error) "
               "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
               {e.event_id, e.event, e.run_id, e.user, e.destination, e.format, e.secret_env,
                e.body, param(e.created_at), param(e.attempts), e.last_error})
        .i64(0, 0);
  }
  std::vector<OutboxEntry> outbox_entries(const std::string& user) override {
    Result q = exec(
        "SELECT id, event_id, event, run_id, user_name, destination, format, secret_env, body, "
        "created_at, attempts, last_error FROM outbox WHERE $1 = '' OR user_name = $1 "
        "ORDER BY id",
        {user});
    std::vector<OutboxEntry> entries;
    for (int i = 0; i < q.rows(); ++i) entries.push_back(read_outbox_entry(q, i));
    return entries;
  }
  void delete_outbox(std::int64_t id) override {
    exec("DELETE FROM outbox WHERE id = $1", {param(id)});
  }
  void update_outbox_failure(std::int64_t id, const std::string& error) override {
    exec("UPDATE outbox SET attempts = attempts + 1, last_error = $1 WHERE id = $2",
         {error, param(id)});
  }

  // ---- reports ----

  // Through a cursor, a batch at a time: a report of a million runs is never held whole. Once a
  // row has gone to `each`, a failure is not retried (the rows would be seen twice).
  void for_each_run_started(double since, double until,
                            const std::function<void(const RunRecord&)>& each) override {
    bool delivered = false;
    try {
      exec(
          "DECLARE spendcap_report NO SCROLL CURSOR FOR SELECT id, team, experiment, project, "
          "user_name, host, tags, status, reason, exit_code, rate_micros_per_hour, started_at, "
          "day, heartbeat_at, finished_at, spend_micros, ceiling_micros, reconciled, overrun, "
          "elapsed_seconds, storage_peak_gb, storage_spend_micros FROM runs "
          "WHERE started_at >= $1 AND started_at < $2",
          {param(since), param(until)});
      RunRecord r;
      for (;;) {
        Result q = exec("FETCH 5000 FROM spendcap_report");
        if (q.rows() == 0) break;
        for (int i = 0; i < q.rows(); ++i) {
          r.id = q.text(i, 0);
          r.team = q.text(i, 1);
          r.experiment = q.text(i, 2);
          r.project = q.text(i, 3);
          r.user = q.text(i, 4);
          r.host = q.text(i, 5);
          r.tags = tags_of_json(q.text(i, 6));
          r.status = parse_run_status(q.text(i, 7)).value_or(RunStatus::running);
          r.reason = q.text(i, 8);
          r.exit_code =
              q.is_null(i, 9) ? std::nullopt : std::optional<int>(static_cast<int>(q.i64(i, 9)));
          r.rate_per_hour = q.money(i, 10);
          r.started_at = q.f64(i, 11);
          r.day = q.i64(i, 12);
          r.heartbeat_at = q.f64(i, 13);
          r.finished_at = q.optional_f64(i, 14);
          r.spend = q.money(i, 15);
          r.ceiling = q.money(i, 16);
          r.reconciled = q.i64(i, 17) != 0;
          r.overrun = q.i64(i, 18) != 0;
          r.elapsed_seconds = q.optional_f64(i, 19);
          r.storage_peak_gb = q.optional_f64(i, 20);
          r.storage_spend = q.optional_money(i, 21);
          delivered = true;
          each(r);
        }
      }
      exec("CLOSE spendcap_report");
    } catch (PgFailure& failure) {
      if (delivered) failure.retryable = false;
      throw;
    }
  }

  // ---- accepted results ----

  // Through the ledger's function: a runner accepts only the runs it admitted.
  void put_accepted_result(const AcceptedResult& a) override {
    exec("SELECT spendcap_accept_result($1, $2, $3, $4)",
         {a.run_id, a.note, a.accepted_by, param(a.accepted_at)});
  }
  std::vector<AcceptedResult> accepted_results() override {
    Result q = exec(
        "SELECT run_id, note, accepted_by, accepted_at FROM accepted_results ORDER BY run_id "
        "COLLATE \"C\"");
    std::vector<AcceptedResult> results;
    for (int i = 0; i < q.rows(); ++i) {
      results.push_back({q.text(i, 0), q.text(i, 1), q.text(i, 2), q.f64(i, 3)});
    }
    return results;
  }

  // A text[] literal: every element quoted, '"' and '\' escaped.
  static std::string text_array(const std::vector<std::string>& items) {
    std::string text = "{";
    for (const std::string& item : items) {
      if (text.size() > 1) text += ',';
      text += '"';
      for (char c : item) {
        if (c == '"' || c == '\\') text += '\\';
        text += c;
      }
      text += '"';
    }
    return text + "}";
  }

  // The grant functions (postgres_grants.cpp): one statement, one round trip.
  ServerGrant call_grant(const std::string& sql, const std::vector<Param>& params) {
    std::string answer;
    transaction(
        true, [&] { answer = exec(sql, params).text(0, 0); }, true);
    return postgres_schema::server_grant_of_json(answer);
  }
  Param clock_param() { return wall_clock ? param(wall_clock()) : std::nullopt; }
};

// ---- PostgresStore ----

PostgresStore::PostgresStore(const std::string& url, std::function<double()> wall_clock,
                             PostgresOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->url = url;
  impl_->redacted_url = redact_password(url);
  impl_->wall_clock = std::move(wall_clock);
  impl_->options = options;
  try {
    libpq::api();
  } catch (const Error& error) {
    throw impl_->error(error.what(), "install libpq5 on this host to use a PostgreSQL ledger");
  }
  impl_->migrate();
}

PostgresStore::~PostgresStore() = default;

std::string PostgresStore::url() const {
  return impl_->redacted_url;
}

void PostgresStore::transact(Access access, const std::function<void(StoreTxn&)>& body) {
  impl_->transaction(access == Access::write, [&] { body(*impl_); });
}

bool PostgresStore::caller_is_owner() {
  bool owner = false;
  impl_->transaction(
      false, [&] { owner = impl_->exec("SELECT spendcap_caller_is_owner()").text(0, 0) == "t"; });
  return owner;
}

std::string PostgresStore::owner_name() {
  std::string name;
  impl_->transaction(false, [&] {
    name = impl_
               ->exec(
                   "SELECT pg_get_userbyid(nspowner) FROM pg_namespace "
                   "WHERE nspname = current_schema()")
               .text(0, 0);
  });
  return name;
}

std::optional<ServerGrant> PostgresStore::admit_in_server(const RunRecord& run, Money want,
                                                          const std::vector<BudgetRule>& caps) {
  return impl_->call_grant(
      "SELECT spendcap_admit($1::json, $2, $3::json, $4)",
      {run_json(run), param(want), postgres_schema::caps_json(caps), impl_->clock_param()});
}

std::optional<ServerGrant> PostgresStore::heartbeat_in_server(const std::string& run_id,
                                                              Money spend, Money want,
                                                              const std::vector<BudgetRule>& caps) {
  return impl_->call_grant(
      "SELECT spendcap_heartbeat($1, $2, $3, $4::json, $5)",
      {run_id, param(spend), param(want), postgres_schema::caps_json(caps), impl_->clock_param()});
}

std::optional<std::string> PostgresStore::finish_in_server(const RunRecord& final) {
  std::string answer;
  bool null = false;
  impl_->transaction(
      true,
      [&] {
        Result q = impl_->exec("SELECT spendcap_finish($1::json, $2)",
                               {run_json(final), impl_->clock_param()});
        null = q.is_null(0, 0);
        answer = q.text(0, 0);
      },
      true);
  if (null) return std::string("missing");
  return std::string(answer == "t" ? "written" : "final already");
}

int PostgresStore::schema_version() {
  int version = 0;
  impl_->transaction(false, [&] { version = impl_->current_schema_version(); });
  return version;
}

std::string PostgresStore::schema() {
  std::string name;
  impl_->transaction(false, [&] { name = impl_->current_schema(); });
  return name;
}

std::vector<std::string> PostgresStore::verify_aggregates() {
  std::vector<std::string> differences;
  impl_->transaction(false, [&] {
    differences.clear();
    Result q = impl_->exec(R"sql(
WITH scoped (scope_kind, scope_name, day, status, spend_micros, ceiling_micros,
    usage_live_micros) AS (
  SELECT 'team', team, day, status, spend_micros, ceiling_micros, usage_live_micros FROM runs
    WHERE team <> ''
  UNION ALL
  SELECT 'experiment', experiment, day, status, spend_micros, ceiling_micros, usage_live_micros
    FROM runs WHERE experiment <> ''
  UNION ALL
  SELECT 'project', project, day, status, spend_micros, ceiling_micros, usage_live_micros
    FROM runs WHERE project <> ''
  UNION ALL
  SELECT 'user', user_name, day, status, spend_micros, ceiling_micros, usage_live_micros
    FROM runs WHERE user_name <> ''
), expected AS (
  SELECT scope_kind, scope_name, day,
    SUM(CASE WHEN status = 'running' THEN 0 ELSE spend_micros END) AS spent_micros,
    SUM(CASE WHEN status = 'running' THEN ceiling_micros ELSE 0 END) AS held_micros,
    SUM(CASE WHEN status = 'running' THEN usage_live_micros ELSE 0 END) AS live_micros
  FROM scoped GROUP BY scope_kind, scope_name, day
)
SELECT COALESCE(e.scope_kind, a.scope_kind), COALESCE(e.scope_name, a.scope_name),
  COALESCE(e.day, a.day), COALESCE(e.spent_micros, 0), COALESCE(e.held_micros, 0),
  COALESCE(e.live_micros, 0), COALESCE(a.spent_micros, 0), COALESCE(a.held_micros, 0),
  COALESCE(a.live_micros, 0)
FROM expected e FULL JOIN usage a ON a.scope_kind = e.scope_kind
  AND a.scope_name = e.scope_name AND a.day = e.day
WHERE COALESCE(e.spent_micros, 0) <> COALESCE(a.spent_micros, 0)
  OR COALESCE(e.held_micros, 0) <> COALESCE(a.held_micros, 0)
  OR COALESCE(e.live_micros, 0) <> COALESCE(a.live_micros, 0)
)sql");
    auto sums = [&](int i, int column) {
      return "spent " + q.text(i, column) + ", held " + q.text(i, column + 1) + ", live " +
             q.text(i, column + 2);
    };
    for (int i = 0; i < q.rows(); ++i) {
      differences.push_back("usage " + q.text(i, 0) + ":" + q.text(i, 1) + " day " + q.text(i, 2) +
                            " is (" + sums(i, 6) + "), the runs say (" + sums(i, 3) + ")");
    }
  });
  return differences;
}

}  // namespace spendcap
