// PostgresStore's connection, shared by the files of the PostgreSQL store (private to them):
// postgres_store.cpp connects, retries and migrates; postgres_runs.cpp, postgres_budgets.cpp and
// postgres_reports.cpp hold the row operations by concept, over postgres_rows.hpp's helpers.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "libpq.hpp"
#include "postgres_rows.hpp"
#include "postgres_schema.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/postgres/postgres_store.hpp"
#include "spendcap/ledger/rollup_sql.hpp"

namespace spendcap {

using namespace postgres_detail;

// ---- the connection ----

struct PostgresStore::Impl final : StoreTxn {
  std::string url;           // as given: libpq's, may hold a password
  std::string redacted_url;  // for messages
  std::function<double()> wall_clock;
  PostgresOptions options;
  libpq::PGconn* conn = nullptr;
  std::minstd_rand jitter{static_cast<unsigned>(getpid())};
  // A transaction's BEGIN, not sent yet: it goes with the transaction's first statement in one
  // round trip (pipeline mode), and a transaction that sends no statement begins nothing.
  const char* pending_begin = nullptr;
  // A read transaction's COMMIT, sent without waiting for its answer: a read-only transaction
  // loses nothing at its commit, and the server still ends it at once (no snapshot is held while
  // the run goes on). The answer is read before the connection's next statement.
  bool commit_unread = false;

  ~Impl() { disconnect(); }

  Error error(std::string why, std::string hint = {}) const {
    return Error("ledger " + redacted_url, std::move(why), std::move(hint));
  }

  void disconnect() {
    if (conn) libpq::api().finish(conn);
    conn = nullptr;
    pending_begin = nullptr;
    commit_unread = false;
  }

  void read_unread_commit() {
    if (!conn || !std::exchange(commit_unread, false)) return;
    bool failed = false;
    while (libpq::PGresult* raw = libpq::api().get_result(conn)) {
      failed = failed || libpq::api().result_status(raw) != libpq::PGRES_COMMAND_OK;
      libpq::api().clear(raw);
    }
    // The reads were answered before it; a connection whose COMMIT failed is not used again.
    if (failed) disconnect();
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
                       message.find("no such user") != std::string::npos ||  // pgbouncer's
                       message.find("invalid") != std::string::npos;
      throw PgFailure{"", "cannot connect: " + message, !permanent};
    }
  }

  // One statement, its parameters bound (never spliced into the text); the transaction's BEGIN
  // goes with it when it is the first.
  Result exec(const std::string& sql, const std::vector<Param>& params = {}) {
    read_unread_commit();
    if (!conn) throw PgFailure{"", "not connected", true};
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const Param& value : params) values.push_back(value ? value->c_str() : nullptr);
    if (const char* begin = std::exchange(pending_begin, nullptr)) {
      if (libpq::api().enter_pipeline_mode) return exec_after(begin, sql, values);
      checked(libpq::api().exec_params(conn, begin, 0, nullptr, nullptr, nullptr, nullptr, 0));
    }
    return checked(libpq::api().exec_params(conn, sql.c_str(), static_cast<int>(values.size()),
                                            nullptr, values.data(), nullptr, nullptr, 0));
  }

  // `begin`, then `sql`, in one round trip: both sent in a pipeline with one sync, then the
  // answers read (each statement's result and a null, then the sync's).
  Result exec_after(const char* begin, const std::string& sql,
                    const std::vector<const char*>& values) {
    const libpq::Api& pq = libpq::api();
    if (!pq.enter_pipeline_mode(conn)) {
      checked(pq.exec_params(conn, begin, 0, nullptr, nullptr, nullptr, nullptr, 0));
      return checked(pq.exec_params(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                    values.data(), nullptr, nullptr, 0));
    }
    bool sent = pq.send_query_params(conn, begin, 0, nullptr, nullptr, nullptr, nullptr, 0) &&
                pq.send_query_params(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                     values.data(), nullptr, nullptr, 0) &&
                pq.pipeline_sync(conn);
    std::vector<Result> results;
    bool synced = false;
    // Two nulls in a row, or a broken connection: the answers stopped short of the sync.
    for (int nulls = 0; sent && nulls < 2;) {
      libpq::PGresult* raw = pq.get_result(conn);
      if (!raw) {
        if (pq.status(conn) != libpq::CONNECTION_OK) break;
        ++nulls;
        continue;
      }
      nulls = 0;
      if (pq.result_status(raw) == libpq::PGRES_PIPELINE_SYNC) {
        pq.clear(raw);
        synced = true;
        break;
      }
      results.emplace_back(raw);
    }
    if (synced && results.size() == 2 && pq.exit_pipeline_mode(conn)) {
      checked(std::move(results[0]));
      return checked(std::move(results[1]));
    }
    // The pipeline broke off: a statement's own error if it has one, else the connection's; the
    // connection is not used again.
    for (Result& result : results) checked(std::move(result));
    std::string message = trimmed(pq.error_message(conn));
    disconnect();
    throw PgFailure{"", message.empty() ? "the connection's pipeline broke off" : message, true};
  }

  // A script of this file's own statements (the schema), without parameters.
  void exec_script(const std::string& sql) {
    read_unread_commit();
    if (!conn) throw PgFailure{"", "not connected", true};
    if (const char* begin = std::exchange(pending_begin, nullptr))
      checked(libpq::api().exec(conn, begin));
    checked(libpq::api().exec(conn, sql.c_str()));
  }

  Result checked(libpq::PGresult* raw_result) { return checked(Result(raw_result)); }
  Result checked(Result result) {
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
          pending_begin = write ? "BEGIN ISOLATION LEVEL READ COMMITTED"
                                : "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
        }
        try {
          body();
        } catch (...) {
          if (!autocommit) rollback();
          throw;
        }
        if (!autocommit) commit(write);
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

  // A write transaction's COMMIT is waited for: its caller learns that it is durable. A read
  // transaction's is sent and its answer read later (commit_unread).
  void commit(bool write) {
    if (std::exchange(pending_begin, nullptr)) return;  // no statement: nothing was begun
    if (write ||
        !libpq::api().send_query_params(conn, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0)) {
      exec("COMMIT");
      return;
    }
    commit_unread = true;
  }

  void rollback() {
    if (std::exchange(pending_begin, nullptr)) return;  // no statement: nothing was begun
    read_unread_commit();
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
      // One migrator at a time per schema, by a lock no user can take: EXCLUSIVE on
      // schema_version, which LOCK TABLE grants only with UPDATE, DELETE or TRUNCATE on it (its
      // owner's; users hold SELECT). It conflicts with itself and with the ROW EXCLUSIVE of an
      // older spendcap's INSERT there, not with the ACCESS SHARE of a reader (the version check
      // of every open), so opens go on while a migration runs. An advisory lock's key anyone can
      // compute, and a user holding it in an open transaction delayed every upgrade (issue 38):
      // it is taken only for an empty schema, which has no table to lock yet (an install, before
      // users' roles can reach it).
      Result found = exec(
          "SELECT to_regclass('schema_version') IS NOT NULL, "
          "to_regclass('schema_version') IS NOT NULL AND "
          "(has_table_privilege('schema_version', 'UPDATE') OR "
          "has_table_privilege('schema_version', 'DELETE') OR "
          "has_table_privilege('schema_version', 'TRUNCATE'))");
      if (found.text(0, 0) == "t" && found.text(0, 1) != "t") {
        // A role that may not lock it may not migrate either: said as the migration would.
        version = current_schema_version();
        if (version >= latest) return;
        throw PgFailure{"42501",
                        "its schema is version " + std::to_string(version) +
                            ", older than this spendcap's (" + std::to_string(latest) +
                            "), and this role may not migrate it (no UPDATE on schema_version); "
                            "the ledger's owner upgrades it by running spendcap once",
                        false};
      }
      if (found.text(0, 0) == "t") {
        exec("LOCK TABLE schema_version IN EXCLUSIVE MODE");
      } else {
        exec(
            "SELECT pg_advisory_xact_lock(hashtextextended('spendcap-migrate:' || "
            "current_schema(), 0))");
      }
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

  // ---- runs (postgres_runs.cpp) ----
  double now() override;
  void lock_scopes(const std::vector<Scope>& scopes) override;
  std::optional<RunRecord> find_run(const std::string& id) override;
  void insert_run(const RunRecord& run) override;
  void update_run(const RunRecord& run) override;
  void set_run_tracker(const std::string& id, const std::string& tracker) override;
  std::vector<RunRecord> all_runs() override;
  std::vector<RunRecord> unfinished_runs() override;
  std::vector<RunRecord> overrun_runs(std::int64_t since_day) override;
  std::vector<RunRecord> runs_due(double now) override;
  bool any_run_due(double now) override;
  std::vector<RunRecord> runs_of_job(const std::string& job_key) override;
  std::vector<RunRecord> runs_of_fingerprint(const std::string& fingerprint, double since) override;
  std::vector<RunRecord> list_runs(const RunQuery& rq) override;
  std::vector<std::string> run_ids_with_prefix(const std::string& prefix, int limit) override;
  std::pair<std::string, std::string> neighbour_run_ids(const std::string& id) override;
  std::int64_t count_unfinished(const Scope& scope, DayRange days) override;
  Money overrun(const Scope& scope, DayRange days) override;

  // ---- budgets, usage, stop orders, the outbox (postgres_budgets.cpp) ----
  std::optional<BudgetRule> budget_rule(const Scope& scope) override;
  std::vector<BudgetRule> budget_rules() override;
  void put_budget_rule(const BudgetRule& rule) override;
  void remove_budget_rule(const Scope& scope) override;
  Usage usage(const Scope& scope, DayRange days) override;
  // The runs table's trigger keeps the usage rows (nobody writes them, runners included); the
  // deltas BudgetLedger computes are the same ones.
  void add_usage(const std::vector<Scope>&, std::int64_t, const Usage&) override {}
  std::optional<StopOrder> first_stop_order(const std::vector<Scope>& scopes) override;
  StopOrder insert_stop_order(const Scope& scope, const std::string& reason,
                              const std::string& placed_by, double placed_at) override;
  int clear_stop_orders(const Scope& scope, double cleared_at) override;
  std::vector<StopOrder> active_stop_orders() override;
  bool insert_warning(const Scope& scope, std::int64_t period_day, int percent,
                      const std::string& run_id, double at) override;
  RefusalCount count_refusal(const std::string& user, double now) override;
  std::vector<RefusedCountRow> refused_counts() override;
  void merge_refused_count(const RefusedCountRow& row) override;
  std::int64_t insert_outbox(const OutboxEntry& e) override;
  std::vector<OutboxEntry> outbox_entries(const std::string& user) override;
  void delete_outbox(std::int64_t id) override;
  void update_outbox_failure(std::int64_t id, const std::string& error) override;
  std::optional<OutboxClaim> outbox_claim(std::int64_t id) override;
  void set_outbox_claim(std::int64_t id, const OutboxClaim& claim) override;

  // ---- reports, rollups, accepted results (postgres_reports.cpp) ----
  void for_each_run_started(double since, double until,
                            const std::function<void(const RunRecord&)>& each) override;
  bool has_rollups() override { return true; }
  void for_each_row(const std::string& sql, const std::vector<Param>& params,
                    const std::function<void(const Result&, int)>& each);
  static std::vector<Param> span_params(const RollupSpan& span,
                                        const std::optional<std::string>& team,
                                        const std::optional<std::string>& experiment);
  static void read_key(const Result& q, int i, RollupKey& key);
  void for_each_rollup_cell(const RollupSpan& span, const std::optional<std::string>& team,
                            const std::optional<std::string>& experiment,
                            const std::function<void(const RollupCell&)>& each) override;
  void for_each_rollup_metric(const RollupSpan& span, const std::optional<std::string>& team,
                              const std::optional<std::string>& experiment,
                              const std::function<void(const RollupMetric&)>& each) override;
  void put_accepted_result(const AcceptedResult& a) override;
  std::vector<AcceptedResult> accepted_results() override;

  // ---- runs (postgres_runs.cpp) ----
  void put_run_webhooks(const std::string& run_id, const std::vector<RunWebhook>& hooks) override;
  std::vector<std::pair<RunRecord, std::vector<RunWebhook>>> untold_lost_runs() override;
  bool claim_lost_run(const std::string& run_id, double at,
                      const std::vector<OutboxEntry>& entries) override;
  std::vector<RunRecord> reconciled_runs(std::int64_t since_day) override;

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

}  // namespace spendcap
