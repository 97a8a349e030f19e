// The PostgreSQL store's budgets, usage sums, stop orders and webhook outbox. Contract in
// ledger_store.hpp.
#include "postgres_impl.hpp"

namespace spendcap {

std::optional<BudgetRule> PostgresStore::Impl::budget_rule(const Scope& scope) {
  Result q = exec(
      "SELECT amount_micros, period, max_run_micros, member_groups FROM budgets "
      "WHERE scope_kind = $1 AND scope_name = $2",
      {to_string(scope.kind), scope.name});
  if (q.rows() == 0) return std::nullopt;
  return BudgetRule{scope, q.money(0, 0), parse_period(q.text(0, 1)).value_or(Period::total),
                    q.optional_money(0, 2), group_list(q, 0, 3)};
}

std::vector<BudgetRule> PostgresStore::Impl::budget_rules() {
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

void PostgresStore::Impl::put_budget_rule(const BudgetRule& rule) {
  exec(
      "INSERT INTO budgets (scope_kind, scope_name, amount_micros, period, max_run_micros, "
      "member_groups) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope_kind, scope_name) "
      "DO UPDATE SET amount_micros = excluded.amount_micros, period = excluded.period, "
      "max_run_micros = excluded.max_run_micros, member_groups = excluded.member_groups",
      {to_string(rule.scope.kind), rule.scope.name, param(rule.amount), to_string(rule.period),
       param(rule.max_run), member_groups_param(rule)});
}

void PostgresStore::Impl::remove_budget_rule(const Scope& scope) {
  exec("DELETE FROM budgets WHERE scope_kind = $1 AND scope_name = $2",
       {to_string(scope.kind), scope.name});
}

// live: the usage rows count an unfinished run's spend as of its last raise (v13); the runs
// give the rest.
Usage PostgresStore::Impl::usage(const Scope& scope, DayRange days) {
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

std::optional<StopOrder> PostgresStore::Impl::first_stop_order(const std::vector<Scope>& scopes) {
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

StopOrder PostgresStore::Impl::insert_stop_order(const Scope& scope, const std::string& reason,
                                                 const std::string& placed_by, double placed_at) {
  Result q = exec("SELECT spendcap_place_stop_order($1, $2, $3, $4, $5)",
                  {to_string(scope.kind), scope.name, reason, placed_by, param(placed_at)});
  return StopOrder{q.i64(0, 0), scope, reason, placed_by, placed_at};
}

int PostgresStore::Impl::clear_stop_orders(const Scope& scope, double cleared_at) {
  return static_cast<int>(exec("SELECT spendcap_clear_stop_orders($1, $2, $3)",
                               {to_string(scope.kind), scope.name, param(cleared_at)})
                              .i64(0, 0));
}

std::vector<StopOrder> PostgresStore::Impl::active_stop_orders() {
  Result q = exec(
      "SELECT id, scope_kind, scope_name, reason, placed_by, placed_at FROM stop_orders "
      "WHERE cleared_at IS NULL ORDER BY id");
  std::vector<StopOrder> orders;
  for (int i = 0; i < q.rows(); ++i) orders.push_back(read_stop_order(q, i));
  return orders;
}

// ---- the webhook outbox: row-level security shows a runner only its own entries ----
bool PostgresStore::Impl::insert_warning(const Scope& scope, std::int64_t period_day, int percent,
                                         const std::string& run_id, double at) {
  // A concurrent insert of the same key waits for the other transaction, then does nothing.
  return exec(
             "INSERT INTO budget_warnings (scope_kind, scope_name, period_day, percent, run_id, "
             "announced_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING 1",
             {to_string(scope.kind), scope.name, param(period_day), param(percent), run_id,
              param(at)})
             .rows() > 0;
}

// Counted by the server's clock (spendcap_count_refusal): `now` is the transaction's reading of it.
RefusalCount PostgresStore::Impl::count_refusal(const std::string& user, double now) {
  (void)now;
  return postgres_schema::refusal_count_of_json(
      exec("SELECT spendcap_count_refusal($1, $2)", {user, clock_param()}).text(0, 0));
}

std::vector<RefusedCountRow> PostgresStore::Impl::refused_counts() {
  Result q = exec(
      "SELECT db_role, user_name, minute, refused, recorded, last_at FROM refused_counts "
      "ORDER BY user_name, minute, db_role");
  std::vector<RefusedCountRow> rows;
  for (int i = 0; i < q.rows(); ++i) {
    rows.push_back(
        {q.text(i, 0), q.text(i, 1), q.i64(i, 2), q.i64(i, 3), q.i64(i, 4), q.f64(i, 5)});
  }
  return rows;
}

// Written directly: only the ledger's owner copies into it (copy_ledger checks), and the owner
// owns the table; the row is keyed by the copier's login role, as the copied runs are.
void PostgresStore::Impl::merge_refused_count(const RefusedCountRow& row) {
  exec(
      "INSERT INTO refused_counts AS t (db_role, user_name, minute, refused, recorded, last_at) "
      "VALUES (session_user, $1, $2, $3, $4, $5) ON CONFLICT (db_role, user_name, minute) DO "
      "UPDATE SET refused = GREATEST(t.refused, excluded.refused), "
      "recorded = GREATEST(t.recorded, excluded.recorded), "
      "last_at = GREATEST(t.last_at, excluded.last_at)",
      {row.user, param(row.minute), param(row.refused), param(row.recorded), param(row.last_at)});
}

std::int64_t PostgresStore::Impl::insert_outbox(const OutboxEntry& e) {
  return exec(
             "INSERT INTO outbox (event_id, event, run_id, user_name, destination, format, "
             "secret_env, body, created_at, attempts, last_error) "
             "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
             {e.event_id, e.event, e.run_id, e.user, e.destination, e.format, e.secret_env, e.body,
              param(e.created_at), param(e.attempts), e.last_error})
      .i64(0, 0);
}

std::vector<OutboxEntry> PostgresStore::Impl::outbox_entries(const std::string& user) {
  Result q = exec(
      "SELECT id, event_id, event, run_id, user_name, destination, format, secret_env, body, "
      "created_at, attempts, last_error FROM outbox WHERE $1 = '' OR user_name = $1 "
      "ORDER BY id",
      {user});
  std::vector<OutboxEntry> entries;
  for (int i = 0; i < q.rows(); ++i) entries.push_back(read_outbox_entry(q, i));
  return entries;
}

void PostgresStore::Impl::delete_outbox(std::int64_t id) {
  exec("DELETE FROM outbox WHERE id = $1", {param(id)});
}

void PostgresStore::Impl::update_outbox_failure(std::int64_t id, const std::string& error) {
  exec(
      "UPDATE outbox SET attempts = attempts + 1, last_error = $1, claimed_by = '', "
      "claimed_until = 0 WHERE id = $2",
      {error, param(id)});
}

// FOR UPDATE: a second claimer waits for the first's transaction, then reads its claim.
std::optional<OutboxClaim> PostgresStore::Impl::outbox_claim(std::int64_t id) {
  Result q =
      exec("SELECT claimed_by, claimed_until FROM outbox WHERE id = $1 FOR UPDATE", {param(id)});
  if (q.rows() == 0) return std::nullopt;
  return OutboxClaim{q.text(0, 0), q.f64(0, 1)};
}

void PostgresStore::Impl::set_outbox_claim(std::int64_t id, const OutboxClaim& claim) {
  exec("UPDATE outbox SET claimed_by = $1, claimed_until = $2 WHERE id = $3",
       {claim.claimed_by, param(claim.claimed_until), param(id)});
}

}  // namespace spendcap
