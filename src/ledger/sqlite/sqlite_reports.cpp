// The SQLite store's reads for reports: a period's runs streamed, its rollups, and accepted
// results.
// Contract in ledger_store.hpp.
#include "sqlite_impl.hpp"

#include <nlohmann/json.hpp>

#include "spendcap/base/json_text.hpp"
#include "spendcap/ledger/rollup_sql.hpp"
#include "spendcap/ledger/stored_text.hpp"

namespace spendcap {

// ---- reports ----

namespace {
constexpr double kIndexedSeconds = 7 * 86400.0;

template <class Query>
void read_key(Query& q, RollupKey& key) {
  key.cut = q.i32(0);
  key.bucket = q.i64(1);
  q.text_into(2, key.team);
  q.text_into(3, key.experiment);
  q.text_into(4, key.project);
  q.text_into(5, key.user);
  q.text_into(6, key.host);
  std::string pricing = q.text(7);
  key.pricing = pricing.empty() ? std::nullopt : pricing_of_column(pricing);
}
}  // namespace

void SqliteStore::Impl::for_each_rollup_cell(const RollupSpan& span,
                                             const std::optional<std::string>& team,
                                             const std::optional<std::string>& experiment,
                                             const std::function<void(const RollupCell&)>& each) {
  using namespace rollup_sql;
  // Rows still in the journal (fewer than kFoldRows, or a report that could not fold them) are
  // counted beside the cells.
  bool by_team = team.has_value(), by_experiment = experiment.has_value();
  auto q = query(journal_pending() ? sqlite_select_cells_and_pending(by_team, by_experiment)
                                   : select_cells(Dialect::sqlite, by_team, by_experiment));
  q.bind_all(span.cut, span.first_bucket, span.last_bucket);
  if (team) q.bind(*team);
  if (experiment) q.bind(*experiment);
  RollupCell c;
  while (q.step()) {
    read_key(q, c.key);
    int i = kKeyColumns;
    for (std::int64_t* count :
         {&c.runs, &c.succeeded, &c.failed, &c.killed, &c.refused, &c.lost, &c.preempted}) {
      *count = q.i64(i++);
    }
    for (Money* money : {&c.spend, &c.waste, &c.units_spend}) *money = q.money(i++);
    auto sum = [&](RollupSum& s) {
      s.runs = q.i64(i++);
      s.total = q.f64(i++);
    };
    sum(c.gpu_seconds_allocated);
    sum(c.gpu_seconds_busy);
    c.idle_runs = q.i64(i++);
    c.idle_spend = q.money(i++);
    sum(c.energy_kwh);
    sum(c.co2_kg);
    sum(c.units);
    sum(c.egress_gb);
    c.storage_spend_runs = q.i64(i++);
    c.storage_spend = q.money(i++);
    c.storage_peak_runs = q.i64(i++);
    c.storage_peak_gb = q.f64(i++);
    c.started_first = q.f64(i++);
    c.started_last = q.f64(i++);
    each(c);
  }
}

void SqliteStore::Impl::for_each_rollup_metric(
    const RollupSpan& span, const std::optional<std::string>& team,
    const std::optional<std::string>& experiment,
    const std::function<void(const RollupMetric&)>& each) {
  using namespace rollup_sql;
  bool by_team = team.has_value(), by_experiment = experiment.has_value();
  auto q = query(journal_pending() ? sqlite_select_metrics_and_pending(by_team, by_experiment)
                                   : select_metrics(Dialect::sqlite, by_team, by_experiment));
  q.bind_all(span.cut, span.first_bucket, span.last_bucket);
  if (team) q.bind(*team);
  if (experiment) q.bind(*experiment);
  RollupMetric m;
  while (q.step()) {
    read_key(q, m.key);
    q.text_into(kKeyColumns, m.metric_name);
    m.lowest = q.f64(kKeyColumns + 1);
    m.highest = q.f64(kKeyColumns + 2);
    each(m);
  }
}

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
      "storage_spend_micros, pricing, commitment_micros, spendcap_exit_code, checkpoint_signal, "
      "checkpoint_signalled, checkpoint_signal_seconds, checkpoint_written_seconds FROM runs " +
      // A period of a few days (a report's partial days, beside the rollups) is found by the
      // index on started_at (v14); a longer one is a scan: a b-tree look-up per row made a report
      // of 1M runs ten times slower (the unary + keeps the index out).
      std::string(until - since <= kIndexedSeconds ? "WHERE started_at >= ? AND started_at < ?"
                                                   : "WHERE +started_at >= ? AND +started_at < ?"));
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
    r.pricing = pricing_of_column(q.optional_text(33));
    r.commitment = q.optional_money(34);
    r.spendcap_exit_code = q.is_null(35) ? std::nullopt : std::optional<int>(q.i32(35));
    // The kill path's checkpoint (v19), as find_run reads it: its waste counts only the spend
    // after a checkpoint written (waste.hpp).
    if (q.is_null(36)) {
      r.checkpoint.reset();
    } else {
      RunCheckpoint& checkpoint = r.checkpoint.emplace();
      q.text_into(36, checkpoint.signal);
      checkpoint.signalled = q.is_null(37) ? 0 : q.i32(37);
      checkpoint.signal_seconds = q.optional_f64(38).value_or(0);
      checkpoint.written_seconds = q.optional_f64(39);
    }
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

}  // namespace spendcap
