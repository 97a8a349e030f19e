// Which rollups a report reads. Contract in report_rollup.hpp.
#include "spendcap/report/report_rollup.hpp"

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
