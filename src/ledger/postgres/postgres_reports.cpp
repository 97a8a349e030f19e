// The PostgreSQL store's reads for reports: a period's runs through a cursor, the rollups, and
// accepted results. Contract in ledger_store.hpp.
#include "postgres_impl.hpp"

namespace spendcap {

// ---- reports ----
// Through a cursor, a batch at a time: a report of a million runs is never held whole. Once a
// row has gone to `each`, a failure is not retried (the rows would be seen twice).
void PostgresStore::Impl::for_each_run_started(double since, double until,
                                               const std::function<void(const RunRecord&)>& each) {
  bool delivered = false;
  try {
    exec(
        "DECLARE spendcap_report NO SCROLL CURSOR FOR SELECT id, team, experiment, project, "
        "user_name, host, tags, status, reason, exit_code, rate_micros_per_hour, started_at, "
        "day, heartbeat_at, finished_at, spend_micros, ceiling_micros, reconciled, overrun, "
        "elapsed_seconds, storage_peak_gb, storage_spend_micros, pricing, gpu_measured, "
        "gpu_not_measured, gpu_allocated_seconds, gpu_busy_seconds, gpu_idle_spend_micros, "
        "gpu_energy_kwh, gpu_co2_kg, metric_name, metric_value, units, egress_gb, "
        "commitment_micros, spendcap_exit_code, checkpoint_signal, checkpoint_signalled, "
        "checkpoint_signal_seconds, checkpoint_written_seconds FROM runs "
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
        r.pricing = pricing_of_column(q.optional_text(i, 22));
        // What the run measured, as SQLite's report reads it (the timeline is not read).
        if (q.is_null(i, 23)) {
          r.gpu.reset();
        } else {
          RunGpu& g = r.gpu.emplace();
          g.not_measured = q.text(i, 24);
          g.allocated_seconds = q.optional_f64(i, 25).value_or(0);
          g.busy_seconds = q.optional_f64(i, 26);
          g.idle_spend = q.optional_money(i, 27);
          g.energy_kwh = q.optional_f64(i, 28);
          g.co2_kg = q.optional_f64(i, 29);
        }
        r.metric_name = q.optional_text(i, 30);
        r.metric_value = q.optional_f64(i, 31);
        r.units = q.optional_f64(i, 32);
        r.egress_gb = q.optional_f64(i, 33);
        r.commitment = q.optional_money(i, 34);
        r.spendcap_exit_code =
            q.is_null(i, 35) ? std::nullopt : std::optional<int>(static_cast<int>(q.i64(i, 35)));
        // The kill path's checkpoint (v19), as SQLite's report reads it (waste.hpp).
        if (q.is_null(i, 36)) {
          r.checkpoint.reset();
        } else {
          RunCheckpoint& checkpoint = r.checkpoint.emplace();
          checkpoint.signal = q.text(i, 36);
          checkpoint.signalled = q.is_null(i, 37) ? 0 : static_cast<int>(q.i64(i, 37));
          checkpoint.signal_seconds = q.optional_f64(i, 38).value_or(0);
          checkpoint.written_seconds = q.optional_f64(i, 39);
        }
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

// Through a cursor, as the runs are (a cut by day can hold many cells).
void PostgresStore::Impl::for_each_row(const std::string& sql, const std::vector<Param>& params,
                                       const std::function<void(const Result&, int)>& each) {
  bool delivered = false;
  try {
    exec("DECLARE spendcap_rollup NO SCROLL CURSOR FOR " + sql, params);
    for (;;) {
      Result q = exec("FETCH 5000 FROM spendcap_rollup");
      if (q.rows() == 0) break;
      for (int i = 0; i < q.rows(); ++i) {
        delivered = true;
        each(q, i);
      }
    }
    exec("CLOSE spendcap_rollup");
  } catch (PgFailure& failure) {
    if (delivered) failure.retryable = false;
    throw;
  }
}

std::vector<Param> PostgresStore::Impl::span_params(const RollupSpan& span,
                                                    const std::optional<std::string>& team,
                                                    const std::optional<std::string>& experiment) {
  std::vector<Param> params = {param(span.cut), param(span.first_bucket), param(span.last_bucket)};
  if (team) params.push_back(*team);
  if (experiment) params.push_back(*experiment);
  return params;
}

void PostgresStore::Impl::read_key(const Result& q, int i, RollupKey& key) {
  key.cut = static_cast<int>(q.i64(i, 0));
  key.bucket = q.i64(i, 1);
  key.team = q.text(i, 2);
  key.experiment = q.text(i, 3);
  key.project = q.text(i, 4);
  key.user = q.text(i, 5);
  key.host = q.text(i, 6);
  std::string pricing = q.text(i, 7);
  key.pricing = pricing.empty() ? std::nullopt : pricing_of_column(pricing);
}

void PostgresStore::Impl::for_each_rollup_cell(const RollupSpan& span,
                                               const std::optional<std::string>& team,
                                               const std::optional<std::string>& experiment,
                                               const std::function<void(const RollupCell&)>& each) {
  using namespace rollup_sql;
  RollupCell c;
  for_each_row(select_cells(Dialect::postgres, team.has_value(), experiment.has_value()),
               span_params(span, team, experiment), [&](const Result& q, int row) {
                 read_key(q, row, c.key);
                 int i = kKeyColumns;
                 for (std::int64_t* count : {&c.runs, &c.succeeded, &c.failed, &c.killed,
                                             &c.refused, &c.lost, &c.preempted}) {
                   *count = q.i64(row, i++);
                 }
                 for (Money* money : {&c.spend, &c.waste, &c.units_spend}) {
                   *money = q.money(row, i++);
                 }
                 auto sum = [&](RollupSum& s) {
                   s.runs = q.i64(row, i++);
                   s.total = q.f64(row, i++);
                 };
                 sum(c.gpu_seconds_allocated);
                 sum(c.gpu_seconds_busy);
                 c.idle_runs = q.i64(row, i++);
                 c.idle_spend = q.money(row, i++);
                 sum(c.energy_kwh);
                 sum(c.co2_kg);
                 sum(c.units);
                 sum(c.egress_gb);
                 c.storage_spend_runs = q.i64(row, i++);
                 c.storage_spend = q.money(row, i++);
                 c.storage_peak_runs = q.i64(row, i++);
                 c.storage_peak_gb = q.f64(row, i++);
                 c.started_first = q.f64(row, i++);
                 c.started_last = q.f64(row, i++);
                 each(c);
               });
}

void PostgresStore::Impl::for_each_rollup_metric(
    const RollupSpan& span, const std::optional<std::string>& team,
    const std::optional<std::string>& experiment,
    const std::function<void(const RollupMetric&)>& each) {
  using namespace rollup_sql;
  RollupMetric m;
  for_each_row(select_metrics(Dialect::postgres, team.has_value(), experiment.has_value()),
               span_params(span, team, experiment), [&](const Result& q, int row) {
                 read_key(q, row, m.key);
                 m.metric_name = q.text(row, kKeyColumns);
                 m.lowest = q.f64(row, kKeyColumns + 1);
                 m.highest = q.f64(row, kKeyColumns + 2);
                 each(m);
               });
}

// ---- accepted results ----
// Through the ledger's function: a runner accepts only the runs it admitted.
void PostgresStore::Impl::put_accepted_result(const AcceptedResult& a) {
  exec("SELECT spendcap_accept_result($1, $2, $3, $4)",
       {a.run_id, a.note, a.accepted_by, param(a.accepted_at)});
}

std::vector<AcceptedResult> PostgresStore::Impl::accepted_results() {
  Result q = exec(
      "SELECT run_id, note, accepted_by, accepted_at FROM accepted_results ORDER BY run_id "
      "COLLATE \"C\"");
  std::vector<AcceptedResult> results;
  for (int i = 0; i < q.rows(); ++i) {
    results.push_back({q.text(i, 0), q.text(i, 1), q.text(i, 2), q.f64(i, 3)});
  }
  return results;
}

}  // namespace spendcap
