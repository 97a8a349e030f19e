// The SQLite store's budgets, usage rows, stop orders and webhook outbox. Contract in
// ledger_store.hpp.
#include "sqlite_impl.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "spendcap/base/json_text.hpp"
#include "spendcap/ledger/stored_text.hpp"

namespace spendcap {

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

bool SqliteStore::Impl::insert_warning(const Scope& scope, std::int64_t period_day, int percent,
                                       const std::string& run_id, double at) {
  query(
      "INSERT INTO budget_warnings (scope_kind, scope_name, period_day, percent, run_id, "
      "announced_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")
      .bind_all(to_string(scope.kind), scope.name, period_day, percent, run_id, at)
      .run();
  return changes() > 0;
}

// One row per user and minute. `recorded` stops at the limit, so this refusal is recorded exactly
// when the two counts are still equal; a write transaction holds the whole file.
RefusalCount SqliteStore::Impl::count_refusal(const std::string& user, double now) {
  auto minute = static_cast<std::int64_t>(std::floor(now / 60));
  query(
      "INSERT INTO refused_counts (user_name, minute, refused, recorded, last_at) "
      "VALUES (?, ?, 1, 1, ?) ON CONFLICT (user_name, minute) DO UPDATE SET "
      "refused = refused + 1, recorded = recorded + (recorded < ?), last_at = excluded.last_at")
      .bind_all(user, minute, now, kRecordedRefusalsPerMinute)
      .run();
  auto q = query("SELECT refused, recorded FROM refused_counts WHERE user_name = ? AND minute = ?");
  q.bind_all(user, minute);
  q.step();
  return RefusalCount{q.i64(0), q.i64(0) == q.i64(1)};
}

std::vector<RefusedCountRow> SqliteStore::Impl::refused_counts() {
  std::vector<RefusedCountRow> rows;
  auto q = query(
      "SELECT user_name, minute, refused, recorded, last_at FROM refused_counts "
      "ORDER BY user_name, minute");
  while (q.step()) rows.push_back({"", q.text(0), q.i64(1), q.i64(2), q.i64(3), q.f64(4)});
  return rows;
}

void SqliteStore::Impl::merge_refused_count(const RefusedCountRow& row) {
  query(
      "INSERT INTO refused_counts (user_name, minute, refused, recorded, last_at) "
      "VALUES (?, ?, ?, ?, ?) ON CONFLICT (user_name, minute) DO UPDATE SET "
      "refused = max(refused, excluded.refused), recorded = max(recorded, excluded.recorded), "
      "last_at = max(last_at, excluded.last_at)")
      .bind_all(row.user, row.minute, row.refused, row.recorded, row.last_at)
      .run();
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
  query(
      "UPDATE outbox SET attempts = attempts + 1, last_error = ?, claimed_by = '', "
      "claimed_until = 0 WHERE id = ?")
      .bind_all(error, id)
      .run();
}

// The write transaction (BEGIN IMMEDIATE) is the lock: one claimer at a time.
std::optional<OutboxClaim> SqliteStore::Impl::outbox_claim(std::int64_t id) {
  auto q = query("SELECT claimed_by, claimed_until FROM outbox WHERE id = ?");
  q.bind_all(id);
  if (!q.step()) return std::nullopt;
  return OutboxClaim{q.text(0), q.f64(1)};
}

void SqliteStore::Impl::set_outbox_claim(std::int64_t id, const OutboxClaim& claim) {
  query("UPDATE outbox SET claimed_by = ?, claimed_until = ? WHERE id = ?")
      .bind_all(claim.claimed_by, claim.claimed_until, id)
      .run();
}

}  // namespace spendcap
