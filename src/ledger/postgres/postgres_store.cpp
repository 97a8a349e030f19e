// The PostgreSQL store of the ledger: connection, retries, transactions, migrations. Contract in
// postgres_store.hpp and ledger_store.hpp; the rules are BudgetLedger's. The rows are
// postgres_runs.cpp's, postgres_budgets.cpp's and postgres_reports.cpp's.
#include "spendcap/ledger/postgres/postgres_store.hpp"

#include "postgres_impl.hpp"

namespace spendcap {

bool is_postgres_url(const std::string& url) {
  return url.starts_with("postgresql://") || url.starts_with("postgres://");
}

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

std::optional<ServerGrant> PostgresStore::heartbeat_in_server(
    const std::string& run_id, Money spend, Money want, const std::vector<BudgetRule>& caps,
    const std::optional<HeartbeatProgress>& progress) {
  // The progress as the function takes it: null, or {step, total_steps, line, metric_name,
  // metric_value[, tracker][, seconds_left]} (the numbers and the metric may be null).
  nlohmann::json note;
  if (progress) {
    auto optional = [](const auto& value) {
      return value ? nlohmann::json(*value) : nlohmann::json();
    };
    note = {{"step", optional(progress->last.step)},
            {"total_steps", optional(progress->last.total_steps)},
            {"line", progress->last.line},
            {"metric_name", optional(progress->metric_name)},
            {"metric_value", optional(progress->metric_value)}};
    // v25: the tag `tracker` (a function before v25 ignores it).
    if (progress->tracker) note["tracker"] = *progress->tracker;
    if (progress->seconds_left) note["seconds_left"] = *progress->seconds_left;  // v27
  }
  return impl_->call_grant(
      "SELECT spendcap_heartbeat($1, $2, $3, $4::json, $5, $6::json)",
      {run_id, param(spend), param(want), postgres_schema::caps_json(caps), impl_->clock_param(),
       progress ? std::optional<std::string>(dump_json(note)) : std::nullopt});
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
    Result cells = impl_->exec(rollup_sql::differences(rollup_sql::Dialect::postgres));
    for (int i = 0; i < cells.rows(); ++i) {
      std::string key;
      for (int column = 0; column < rollup_sql::kKeyColumns; ++column) {
        key += (column ? " " : "") + cells.text(i, column);
      }
      differences.push_back("rollup (" + key + ") holds " + cells.text(i, 9) + " runs, spend " +
                            cells.text(i, 11) + "; the runs say " + cells.text(i, 8) + ", spend " +
                            cells.text(i, 10));
    }
  });
  return differences;
}

}  // namespace spendcap
