// The PostgreSQL store's rows as libpq hands them: a statement's parameters and result, a run as
// the JSON the ledger's functions take and as read back, budgets' member groups, outbox entries
// and stop orders (private to the files of the PostgreSQL store; split from postgres_impl.hpp,
// which holds the connection).
#pragma once

#include <charconv>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "libpq.hpp"
#include "postgres_schema.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/postgres/postgres_store.hpp"
#include "spendcap/ledger/stored_text.hpp"

namespace spendcap {

namespace postgres_detail {

using postgres_schema::kRunColumns;

// A failed statement or connection, inside a transaction: retried when `retryable`.
struct PgFailure {
  std::string sqlstate;  // "" when the connection failed
  std::string message;
  bool retryable = false;
};

inline bool retryable_sqlstate(const std::string& state) {
  // Serialization failure, deadlock; a lock not had within lock_timeout (55P03: a holder that
  // stopped, which the server ends when its transaction idles too long); the connection class
  // (08); the server shutting down or starting (57P01..57P03).
  return state == "40001" || state == "40P01" || state == "55P03" || state.starts_with("08") ||
         state == "57P01" || state == "57P02" || state == "57P03";
}

inline std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// A statement's parameters, as text (libpq's text format).
using Param = std::optional<std::string>;
inline Param param(std::int64_t value) {
  return std::to_string(value);
}
inline Param param(int value) {
  return std::to_string(value);
}
inline Param param(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return std::string(text);
}
inline Param param(Money value) {
  return std::to_string(value.micros);
}
template <class T>
inline Param param(const std::optional<T>& value) {
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
  std::optional<std::string> optional_text(int row, int column) const {
    return is_null(row, column) ? std::nullopt : std::optional<std::string>(text(row, column));
  }
  std::int64_t affected() const { return std::atoll(libpq::api().cmd_tuples(result_)); }

 private:
  libpq::PGresult* result_;
};

// A run as the JSON object the ledger's functions take (json_populate_record over runs).
inline std::string run_json(const RunRecord& r) {
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
  row["pricing"] = optional(pricing_column(r.pricing));
  row["commitment_micros"] = money(r.commitment);
  row["cwd"] = r.cwd.empty() ? nlohmann::json() : nlohmann::json(r.cwd);
  row["run_budget_micros"] = money(r.run_budget);
  row["budget_source"] =
      r.budget_source.empty() ? nlohmann::json() : nlohmann::json(r.budget_source);
  row["spendcap_exit_code"] = optional(r.spendcap_exit_code);
  if (r.last_progress) {
    row["progress_step"] = optional(r.last_progress->step);
    row["progress_total_steps"] = optional(r.last_progress->total_steps);
    row["progress_line"] = r.last_progress->line;
  }
  row["progress_eta_at"] = optional(r.progress_eta_at);
  // Not a column: spendcap_finish reads it from the JSON and adds the server's clock (v27).
  if (r.progress_seconds_left) row["progress_seconds_left"] = *r.progress_seconds_left;
  if (r.checkpoint) {
    row["checkpoint_signal"] = r.checkpoint->signal;
    row["checkpoint_signalled"] = r.checkpoint->signalled;
    row["checkpoint_signal_seconds"] = r.checkpoint->signal_seconds;
    row["checkpoint_written_seconds"] = optional(r.checkpoint->written_seconds);
  }
  return dump_json(row);
}

inline RunRecord read_run(const Result& q, int i) {
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
  r.pricing = pricing_of_column(q.optional_text(i, 52));
  r.commitment = q.optional_money(i, 53);
  r.cwd = q.text(i, 54);
  r.run_budget = q.optional_money(i, 55);
  r.budget_source = q.text(i, 56);
  if (!q.is_null(i, 59)) {
    RunLastProgress& progress = r.last_progress.emplace();
    if (!q.is_null(i, 57)) progress.step = q.i64(i, 57);
    if (!q.is_null(i, 58)) progress.total_steps = q.i64(i, 58);
    progress.line = q.text(i, 59);
  }
  if (!q.is_null(i, 60)) {
    RunCheckpoint& checkpoint = r.checkpoint.emplace();
    checkpoint.signal = q.text(i, 60);
    checkpoint.signalled = q.is_null(i, 61) ? 0 : static_cast<int>(q.i64(i, 61));
    checkpoint.signal_seconds = q.optional_f64(i, 62).value_or(0);
    checkpoint.written_seconds = q.optional_f64(i, 63);
  }
  if (!q.is_null(i, 64)) r.spendcap_exit_code = static_cast<int>(q.i64(i, 64));
  r.progress_eta_at = q.optional_f64(i, 65);
  return r;
}

// A budget's member groups (NULL: anyone). A list that cannot be read admits nobody but the
// ledger's owner: membership fails closed (as SQLite's).
inline std::vector<std::string> group_list(const Result& q, int i, int column) {
  return member_groups_of_json(
      q.is_null(i, column) ? std::nullopt : std::optional<std::string>(q.text(i, column)));
}

inline Param member_groups_param(const BudgetRule& rule) {
  if (rule.member_groups.empty()) return std::nullopt;
  return nlohmann::json(rule.member_groups).dump();
}

inline OutboxEntry read_outbox_entry(const Result& q, int i) {
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

inline std::vector<RunRecord> read_runs(const Result& q) {
  std::vector<RunRecord> runs;
  for (int i = 0; i < q.rows(); ++i) runs.push_back(read_run(q, i));
  return runs;
}

inline StopOrder read_stop_order(const Result& q, int i) {
  StopOrder order;
  order.id = q.i64(i, 0);
  order.scope = {parse_scope_kind(q.text(i, 1)).value_or(ScopeKind::run), q.text(i, 2)};
  order.reason = q.text(i, 3);
  order.placed_by = q.text(i, 4);
  order.placed_at = q.f64(i, 5);
  return order;
}

// The column that holds the name of a scope of this kind.
inline const char* scope_column(ScopeKind kind) {
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

}  // namespace postgres_detail

}  // namespace spendcap
