// Which rollups a report reads. Contract in report_rollup.hpp.
#include "spendcap/report/report_rollup.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap {

std::optional<RollupRead> report_rollup_read(const ReportOptions& options, bool by_team) {
  bool team = by_team || options.team.has_value();
  // A group's one experiment finds its baseline (ReportBuilder::finish_group).
  bool experiment = options.experiment.has_value() ||
                    (!options.baseline && !options.experiment_baselines.empty());
  bool by_day = false, other = false;
  for (const GroupBy& by : options.by) {
    switch (by.kind) {
      case GroupBy::Kind::tag:
        return std::nullopt;
      case GroupBy::Kind::team:
        team = true;
        break;
      case GroupBy::Kind::experiment:
        experiment = true;
        break;
      case GroupBy::Kind::day:
        by_day = true;
        break;
      case GroupBy::Kind::project:
      case GroupBy::Kind::user:
      case GroupBy::Kind::host:
        other = true;
        break;
    }
  }
  const RollupCut* day_cut = nullptr;
  const RollupCut* month_cut = nullptr;
  const RollupCut* total_cut = nullptr;
  for (const RollupCut& cut : rollup_cuts()) {
    bool keeps = (!team || cut.team) && (!experiment || cut.experiment) &&
                 (!other || (cut.project && cut.user && cut.host));
    if (!keeps) continue;
    if (cut.grain == RollupGrain::day && !day_cut) day_cut = &cut;
    if (cut.grain == RollupGrain::month && !month_cut && !by_day) month_cut = &cut;
    if (cut.grain == RollupGrain::total && !total_cut && !by_day) total_cut = &cut;
  }
  if (!day_cut) return std::nullopt;
  // Over every run, the cut of every run in one bucket where it keeps just what the month cut does
  // (a cut with fewer tags by month is smaller still).
  auto same_tags = [](const RollupCut* a, const RollupCut* b) {
    return a && b && a->team == b->team && a->experiment == b->experiment &&
           a->project == b->project && a->user == b->user && a->host == b->host;
  };
  if (!same_tags(total_cut, month_cut)) total_cut = nullptr;
  RollupRead read = plan_rollup_read(options.since.value_or(0),
                                     options.until.value_or(std::numeric_limits<double>::max()),
                                     month_cut, *day_cut, total_cut);
  read.team = options.team;
  read.experiment = options.experiment;
  return read;
}

// ---- ReportBuilder's side of the rollups (report.hpp) ----

namespace {
// A cell's tags in a row, for its group's key (a day cell's day as its start).
void key_row(const RollupKey& key, ReportRow& row) {
  row.team = key.team;
  row.experiment = key.experiment;
  row.project = key.project;
  row.user = key.user;
  row.host = key.host;
  row.started_at = static_cast<double>(key.bucket) * 86400.0;
}
}  // namespace

void ReportBuilder::add_cell(const RollupCell& cell, std::optional<Money> egress_price) {
  if (cell.runs == 0) return;
  key_row(cell.key, scratch_);
  if (options_.team && scratch_.team != *options_.team) return;
  if (options_.experiment && scratch_.experiment != *options_.experiment) return;
  size_t group = group_of(scratch_);
  merge(groups_.sums_[group], extra_of(group), cell, egress_price);
  merge(total_, keeps_extras_ ? &total_extra_ : nullptr, cell, egress_price);
}

void ReportBuilder::merge(GroupSums& g, Extra* extra, const RollupCell& c,
                          std::optional<Money> egress_price) {
  if (g.runs == 0 || c.started_first < g.started_first) g.started_first = c.started_first;
  g.started_last = std::max(g.started_last, c.started_last);
  g.runs += c.runs;
  g.spend += c.spend;
  g.succeeded += c.succeeded;
  g.failed += c.failed;
  g.killed += c.killed;
  g.refused += c.refused;
  g.lost += c.lost;
  g.preempted += c.preempted;
  g.waste += c.waste;
  g.units_spend += c.units_spend;
  if (c.gpu_seconds_allocated.runs > 0 || c.gpu_seconds_busy.runs > 0 || c.idle_runs > 0 ||
      c.energy_kwh.runs > 0 || c.co2_kg.runs > 0 || c.units.runs > 0 || c.egress_gb.runs > 0 ||
      c.storage_peak_runs > 0 || c.storage_spend_runs > 0) {
    GroupMeasures& m = measures_of(g);
    auto add = [](Measured& measured, std::int64_t runs, double total) {
      measured.runs += runs;
      measured.total += total;
    };
    add(m.gpu_hours_allocated, c.gpu_seconds_allocated.runs,
        c.gpu_seconds_allocated.total / 3600.0);
    add(m.gpu_hours_busy, c.gpu_seconds_busy.runs, c.gpu_seconds_busy.total / 3600.0);
    add(m.idle_spend, c.idle_runs, c.idle_spend.units());
    add(m.energy_kwh, c.energy_kwh.runs, c.energy_kwh.total);
    add(m.co2_kg, c.co2_kg.runs, c.co2_kg.total);
    add(m.units, c.units.runs, c.units.total);
    add(m.egress_gb, c.egress_gb.runs, c.egress_gb.total);
    if (egress_price && c.egress_gb.runs > 0) {
      // Priced on the cell's sum: within half a micro-unit a run of what pricing each run gives.
      add(m.egress_spend, c.egress_gb.runs,
          Money{static_cast<std::int64_t>(
                    std::llround(c.egress_gb.total * static_cast<double>(egress_price->micros)))}
              .units());
    }
    if (c.storage_peak_runs > 0) {
      m.storage_peak_gb.runs += c.storage_peak_runs;
      m.storage_peak_gb.total = std::max(m.storage_peak_gb.total, c.storage_peak_gb);
    }
    add(m.storage_spend, c.storage_spend_runs, c.storage_spend.units());
  }
  if (!extra) return;
  if (extra->experiment.empty() && !extra->several) {
    extra->experiment = c.key.experiment;
  } else if (extra->experiment != c.key.experiment) {
    extra->several = true;
  }
}

void ReportBuilder::add_metric(const RollupMetric& metric) {
  if (!keeps_extras_) return;  // only a baseline reads the metrics' ranges
  key_row(metric.key, scratch_);
  if (options_.team && scratch_.team != *options_.team) return;
  if (options_.experiment && scratch_.experiment != *options_.experiment) return;
  size_t group = group_of(scratch_);
  for (Extra* extra : {&extras_[group], &total_extra_}) {
    auto [it, inserted] = extra->metric_range.try_emplace(metric.metric_name,
                                                          std::pair{metric.lowest, metric.highest});
    if (!inserted) {
      it->second.first = std::min(it->second.first, metric.lowest);
      it->second.second = std::max(it->second.second, metric.highest);
    }
  }
}

void ReportBuilder::add_accepted(const ReportRow& row) {
  if (!report_includes(options_, row)) return;
  size_t group = group_of(row);
  ++groups_.sums_[group].accepted;
  ++total_.accepted;
}

bool add_ledger_runs(Ledger& ledger, const ReportSource& source,
                     const std::vector<ReportBuilder*>& builders) {
  ReportRow row;
  auto add_run = [&](const RunRecord& run) {
    fill_report_row(run, row);
    row.accepted = !source.accepted.empty() && source.accepted.count(row.id) > 0;
    if (row.egress_gb && source.egress_price) {
      row.egress_spend = Money{static_cast<std::int64_t>(
          std::llround(*row.egress_gb * static_cast<double>(source.egress_price->micros)))};
    }
    if (source.on_row) source.on_row(row);
    for (ReportBuilder* builder : builders) builder->add(row);
  };
  if (source.read) {
    RollupVisitor visit;
    visit.cell = [&](const RollupCell& cell) {
      if (source.on_cell) source.on_cell(cell);
      for (ReportBuilder* builder : builders) builder->add_cell(cell, source.egress_price);
    };
    visit.metric = [&](const RollupMetric& metric) {
      for (ReportBuilder* builder : builders) builder->add_metric(metric);
    };
    visit.run = add_run;
    visit.accepted = [&](const RunRecord& run) {
      fill_report_row(run, row);
      for (ReportBuilder* builder : builders) builder->add_accepted(row);
    };
    if (ledger.read_rollups(*source.read, visit)) return true;
  }
  ledger.for_each_run_started(source.since, source.until, add_run);
  return false;
}

}  // namespace spendcap
