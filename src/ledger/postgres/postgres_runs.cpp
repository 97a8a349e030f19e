// The PostgreSQL store's runs: a run's row through the ledger's functions, the look-ups the rules
// make, and lost runs' events. Contract in ledger_store.hpp.
#include "postgres_impl.hpp"

namespace spendcap {

double PostgresStore::Impl::now() {
  if (wall_clock) return wall_clock();
  return exec("SELECT extract(epoch FROM clock_timestamp())::double precision").f64(0, 0);
}

// One advisory lock per scope, in the order given (sorted by BudgetLedger): every transaction
// that reads a scope's usage to raise a ceiling holds it until it ends. The key hashes a salt
// only the ledger's owner reads, so the server's function computes it (spendcap_lock_scopes).
void PostgresStore::Impl::lock_scopes(const std::vector<Scope>& scopes) {
  if (scopes.empty()) return;
  std::vector<std::string> names;
  for (const Scope& scope : scopes) names.push_back(to_string(scope));
  exec("SELECT spendcap_lock_scopes($1::text[], $2)", {text_array(names), clock_param()});
}

std::optional<RunRecord> PostgresStore::Impl::find_run(const std::string& id) {
  Result q = exec(std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = $1", {id});
  if (q.rows() == 0) return std::nullopt;
  return read_run(q, 0);
}

void PostgresStore::Impl::insert_run(const RunRecord& run) {
  exec("SELECT spendcap_insert_run($1::json)", {run_json(run)});
}

void PostgresStore::Impl::update_run(const RunRecord& run) {
  exec("SELECT spendcap_update_run($1::json)", {run_json(run)});
}

void PostgresStore::Impl::set_run_tracker(const std::string& id, const std::string& tracker) {
  exec("SELECT spendcap_set_tracker($1, $2)", {id, tracker});
}

std::vector<RunRecord> PostgresStore::Impl::all_runs() {
  return read_runs(
      exec(std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY started_at, id"));
}

std::vector<RunRecord> PostgresStore::Impl::unfinished_runs() {
  return read_runs(exec(std::string("SELECT ") + kRunColumns +
                        " FROM runs WHERE status = 'running' ORDER BY started_at, id"));
}

std::vector<RunRecord> PostgresStore::Impl::overrun_runs(std::int64_t since_day) {
  return read_runs(exec(std::string("SELECT ") + kRunColumns +
                            " FROM runs WHERE overrun = 1 AND day >= $1 ORDER BY started_at, id",
                        {param(since_day)}));
}

std::vector<RunRecord> PostgresStore::Impl::runs_due(double now) {
  return read_runs(exec(std::string("SELECT ") + kRunColumns +
                            " FROM runs WHERE status = 'running' AND reconcile_at <= $1",
                        {param(now)}));
}

bool PostgresStore::Impl::any_run_due(double now) {
  return exec("SELECT 1 FROM runs WHERE status = 'running' AND reconcile_at <= $1 LIMIT 1",
              {param(now)})
             .rows() > 0;
}

std::vector<RunRecord> PostgresStore::Impl::runs_of_job(const std::string& job_key) {
  return read_runs(
      exec(std::string("SELECT ") + kRunColumns + " FROM runs WHERE job_key = $1", {job_key}));
}

std::vector<RunRecord> PostgresStore::Impl::runs_of_fingerprint(const std::string& fingerprint,
                                                                double since) {
  // As SQLite's (sqlite_impl.hpp, SPENDCAP_CRASH_LOOP_IDS): superseded successes are not read.
  return read_runs(
      exec(std::string("SELECT ") + kRunColumns +
               " FROM runs WHERE id IN (SELECT id FROM (SELECT id, status, tags,"
               " coalesce(finished_at, started_at) AS ended_at,"
               " max(CASE WHEN status = 'succeeded' THEN coalesce(finished_at, started_at) END)"
               " OVER (PARTITION BY user_name) AS latest_success"
               " FROM runs WHERE fingerprint = $1 AND started_at >= $2) AS w"
               " WHERE status <> 'succeeded' OR ended_at >= latest_success"
               " OR strpos(tags, '\"crash_loop_cleared\"') > 0)"
               " ORDER BY started_at, id",
           {fingerprint, param(since)}));
}

// `spendcap runs`: an unset filter is NULL and matches every row.
std::vector<RunRecord> PostgresStore::Impl::list_runs(const RunQuery& rq) {
  std::optional<std::string> status;
  if (rq.status) status = to_string(*rq.status);
  return read_runs(exec(std::string("SELECT ") + kRunColumns +
                            " FROM runs WHERE started_at >= $1 AND started_at < $2"
                            " AND ($3::text IS NULL OR team = $3)"
                            " AND ($4::text IS NULL OR experiment = $4)"
                            " AND ($5::text IS NULL OR user_name = $5)"
                            " AND ($6::text IS NULL OR status = $6)"
                            " ORDER BY started_at DESC, id DESC LIMIT $7",
                        {param(rq.since), param(rq.until), rq.team, rq.experiment, rq.user, status,
                         param(rq.limit)}));
}

std::vector<std::string> PostgresStore::Impl::run_ids_with_prefix(const std::string& prefix,
                                                                  int limit) {
  Result q = exec(
      "SELECT id FROM runs WHERE substr(id, 1, $1) = $2 ORDER BY id COLLATE \"C\" "
      "LIMIT $3",
      {param(static_cast<std::int64_t>(prefix.size())), prefix, param(limit)});
  std::vector<std::string> ids;
  for (int i = 0; i < q.rows(); ++i) ids.push_back(q.text(i, 0));
  return ids;
}

std::pair<std::string, std::string> PostgresStore::Impl::neighbour_run_ids(const std::string& id) {
  Result q = exec(
      // Byte order (COLLATE "C"), as SQLite's: a locale's order would skip the true neighbour.
      "SELECT (SELECT max(id COLLATE \"C\") FROM runs WHERE id COLLATE \"C\" < $1), "
      "(SELECT min(id COLLATE \"C\") FROM runs WHERE id COLLATE \"C\" > $1)",
      {id});
  return {q.is_null(0, 0) ? "" : q.text(0, 0), q.is_null(0, 1) ? "" : q.text(0, 1)};
}

std::int64_t PostgresStore::Impl::count_unfinished(const Scope& scope, DayRange days) {
  return exec(std::string("SELECT count(*) FROM runs WHERE status = 'running' AND day BETWEEN "
                          "$1 AND $2 AND ") +
                  scope_column(scope.kind) + " = $3",
              {param(days.first_day), param(days.last_day), scope.name})
      .i64(0, 0);
}

Money PostgresStore::Impl::overrun(const Scope& scope, DayRange days) {
  return exec(std::string("SELECT COALESCE(SUM(spend_micros - ceiling_micros), 0) FROM runs "
                          "WHERE overrun = 1 AND day BETWEEN $1 AND $2 AND ") +
                  scope_column(scope.kind) + " = $3",
              {param(days.first_day), param(days.last_day), scope.name})
      .money(0, 0);
}

// ---- lost runs' events (v12; the functions are postgres_access.cpp's) ----
void PostgresStore::Impl::put_run_webhooks(const std::string& run_id,
                                           const std::vector<RunWebhook>& hooks) {
  exec("SELECT spendcap_put_run_webhooks($1, $2)", {run_id, webhooks_json(hooks)});
}

std::vector<std::pair<RunRecord, std::vector<RunWebhook>>> PostgresStore::Impl::untold_lost_runs() {
  Result q = exec(std::string("SELECT ") + kRunColumns +
                  " FROM runs WHERE reconciled = 1 AND id IN (SELECT run_id FROM run_webhooks "
                  "WHERE lost_told_at IS NULL) ORDER BY started_at, id COLLATE \"C\"");
  std::vector<std::pair<RunRecord, std::vector<RunWebhook>>> lost;
  for (RunRecord& run : read_runs(q)) {
    Result hooks = exec("SELECT webhooks FROM run_webhooks WHERE run_id = $1", {run.id});
    std::vector<RunWebhook> named;
    if (hooks.rows() == 1) named = webhooks_of_json(hooks.text(0, 0));
    lost.emplace_back(std::move(run), std::move(named));
  }
  return lost;
}

bool PostgresStore::Impl::claim_lost_run(const std::string& run_id, double at,
                                         const std::vector<OutboxEntry>& entries) {
  nlohmann::json list = nlohmann::json::array();
  for (const OutboxEntry& e : entries) {
    list.push_back({{"event_id", e.event_id},
                    {"event", e.event},
                    {"run_id", e.run_id},
                    {"destination", e.destination},
                    {"format", e.format},
                    {"secret_env", e.secret_env},
                    {"body", e.body}});
  }
  return exec("SELECT spendcap_tell_lost_run($1, $2, $3)", {run_id, param(at), list.dump()})
             .text(0, 0) == "t";
}

std::vector<RunRecord> PostgresStore::Impl::reconciled_runs(std::int64_t since_day) {
  return read_runs(exec(std::string("SELECT ") + kRunColumns +
                            " FROM runs WHERE reconciled = 1 AND day >= $1 "
                            "ORDER BY started_at, id COLLATE \"C\"",
                        {param(since_day)}));
}

}  // namespace spendcap
