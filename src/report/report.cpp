#include "spendcap/report/report.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>

#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/ledger_store.hpp"
#include "spendcap/ledger/waste.hpp"

namespace spendcap {

ReportRow report_row_of(const RunRecord& run) {
  ReportRow row;
  fill_report_row(run, row);
  return row;
}

void fill_report_row(const RunRecord& run, ReportRow& row) {
  // Every field is set: `row` may hold the previous run.
  const ReportRow none;
  row.preempted = none.preempted;
  row.accepted = none.accepted;
  row.gpu_type = none.gpu_type;
  row.gpu_seconds_allocated = none.gpu_seconds_allocated;
  row.gpu_seconds_busy = none.gpu_seconds_busy;
  row.idle_spend = none.idle_spend;
  row.energy_kwh = none.energy_kwh;
  row.co2_kg = none.co2_kg;
  row.metric_name = none.metric_name;
  row.metric_value = none.metric_value;
  row.units = none.units;
  row.egress_gb = none.egress_gb;
  row.egress_spend = none.egress_spend;
  row.storage_peak_gb = none.storage_peak_gb;
  row.storage_spend = none.storage_spend;
  row.pricing = run.pricing;        // none: unknown (a run recorded before schema v11)
  row.commitment = run.commitment;  // none: no commitment, or a run recorded before v16
  row.elapsed_seconds = run.elapsed_seconds;
  row.checkpoint_written_seconds =
      run.checkpoint ? run.checkpoint->written_seconds : std::optional<double>();
  row.exit_code = spendcap_exit_of(run.spendcap_exit_code, run.status, run.exit_code);
  row.command_exit_code = run.exit_code;
  row.id = run.id;
  row.team = run.team;
  row.experiment = run.experiment;
  row.project = run.project;
  row.user = run.user;
  row.host = run.host;
  row.tags = run.tags;
  row.status = run.status;
  row.reason = run.reason;
  row.started_at = run.started_at;
  row.finished_at = run.finished_at;
  // A running run counts with the spend of its last heartbeat; a reconciled lost one with its
  // charge (its ceiling).
  row.spend = run.spend;
  row.rate_per_hour = run.rate_per_hour;
  row.preempted = run.status == RunStatus::preempted;
  if (run.gpu && run.gpu->not_measured.empty()) {
    row.gpu_seconds_allocated = run.gpu->allocated_seconds;
    row.gpu_seconds_busy = run.gpu->busy_seconds;
    row.idle_spend = run.gpu->idle_spend;
    row.energy_kwh = run.gpu->energy_kwh;
    row.co2_kg = run.gpu->co2_kg;
  }
  // The progress channel's last report; egress is priced by the caller (rates.egress_per_gb).
  if (run.metric_name) row.metric_name = *run.metric_name;
  if (run.metric_name) row.metric_value = run.metric_value;
  row.units = run.units;
  row.egress_gb = run.egress_gb;
  row.storage_peak_gb = run.storage_peak_gb;
  row.storage_spend = run.storage_spend;
}

std::optional<GroupBy> parse_group_by(std::string_view text) {
  using K = GroupBy::Kind;
  static const std::pair<const char*, K> kinds[] = {
      {"team", K::team},       {"experiment", K::experiment},
      {"project", K::project}, {"user", K::user},
      {"host", K::host},       {"day", K::day}};
  for (const auto& [name, kind] : kinds) {
    if (text == name) return GroupBy{kind, {}};
  }
  // The experiment tracker's run id is the run's tag `tracker` (run/settings.cpp).
  if (text == "tracker") return GroupBy{K::tag, "tracker"};
  if (text.starts_with("tag:") && text.size() > 4)
    return GroupBy{K::tag, std::string(text.substr(4))};
  return std::nullopt;
}

std::string to_string(const GroupBy& by) {
  switch (by.kind) {
    case GroupBy::Kind::team:
      return "team";
    case GroupBy::Kind::experiment:
      return "experiment";
    case GroupBy::Kind::project:
      return "project";
    case GroupBy::Kind::user:
      return "user";
    case GroupBy::Kind::host:
      return "host";
    case GroupBy::Kind::day:
      return "day";
    case GroupBy::Kind::tag:
      return "tag:" + by.tag;
  }
  return "?";
}

std::string group_value(const ReportRow& row, const GroupBy& by) {
  switch (by.kind) {
    case GroupBy::Kind::team:
      return row.team;
    case GroupBy::Kind::experiment:
      return row.experiment;
    case GroupBy::Kind::project:
      return row.project;
    case GroupBy::Kind::user:
      return row.user;
    case GroupBy::Kind::host:
      return row.host;
    case GroupBy::Kind::day:
      return format_utc(row.started_at, UtcForm::date);
    case GroupBy::Kind::tag: {
      auto it = row.tags.find(by.tag);
      return it == row.tags.end() ? std::string() : it->second;
    }
  }
  return {};
}

std::optional<MetricGoal> parse_metric_goal(std::string_view text) {
  if (text == "max") return MetricGoal::max;
  if (text == "min") return MetricGoal::min;
  return std::nullopt;
}

std::optional<double> GroupTotals::utilisation() const {
  auto allocated = gpu_hours_allocated.value();
  auto busy = gpu_hours_busy.value();
  if (!allocated || !busy || *allocated <= 0) return std::nullopt;
  return *busy / *allocated;
}

double GroupTotals::waste_share() const {
  return spend.micros > 0 ? static_cast<double>(waste.micros) / static_cast<double>(spend.micros)
                          : 0.0;
}

std::optional<Money> GroupTotals::cost_per_accepted() const {
  if (accepted == 0) return std::nullopt;
  return Money{spend.micros / accepted};
}

std::optional<double> GroupTotals::cost_per_thousand_units() const {
  // Only the spend of runs that reported units is divided by them.
  if (!units.value() || units.total <= 0) return std::nullopt;
  return units_spend.units() / units.total * 1e3;
}

bool report_includes(const ReportOptions& options, const ReportRow& row) {
  if (options.since && row.started_at < *options.since) return false;
  if (options.until && row.started_at >= *options.until) return false;
  if (options.team && row.team != *options.team) return false;
  if (options.experiment && row.experiment != *options.experiment) return false;
  return true;
}

ReportBuilder::ReportBuilder(ReportOptions options)
    : options_(std::move(options)),
      keeps_extras_(options_.baseline.has_value() || !options_.experiment_baselines.empty()) {
  groups_.parts_ = options_.by.size();
}

GroupMeasures& ReportBuilder::measures_of(GroupSums& g) {
  if (g.measures == GroupSums::kNone) {
    g.measures = static_cast<std::uint32_t>(groups_.measures_.size());
    groups_.measures_.emplace_back();
  }
  return groups_.measures_[g.measures];
}

void ReportBuilder::account(GroupSums& g, Extra* extra, const ReportRow& row) {
  if (g.runs == 0 || row.started_at < g.started_first) g.started_first = row.started_at;
  g.started_last = std::max(g.started_last, row.started_at);
  ++g.runs;
  g.spend += row.spend;
  switch (row.status) {
    case RunStatus::running:
      ++g.running;
      g.running_spend += row.spend;
      break;
    case RunStatus::succeeded:
      ++g.succeeded;
      break;
    case RunStatus::failed:
      ++g.failed;
      break;
    case RunStatus::killed:
      ++g.killed;
      break;
    case RunStatus::refused:
      ++g.refused;
      break;
    case RunStatus::lost:
      ++g.lost;
      break;
    case RunStatus::preempted:  // counted below
      break;
  }
  if (row.preempted) ++g.preempted;
  // The one rule (failed, killed, lost, preempted; a killed run's checkpoint keeps its work).
  g.waste += wasted_spend(row.preempted ? RunStatus::preempted : row.status, row.spend,
                          row.elapsed_seconds, row.checkpoint_written_seconds);
  if (row.accepted) ++g.accepted;
  if (row.units) g.units_spend += row.spend;
  if (row.gpu_seconds_allocated || row.gpu_seconds_busy || row.idle_spend || row.energy_kwh ||
      row.co2_kg || row.units || row.egress_gb || row.egress_spend || row.storage_peak_gb ||
      row.storage_spend) {
    auto hours = [](const std::optional<double>& seconds) {
      return seconds ? std::optional<double>(*seconds / 3600.0) : std::nullopt;
    };
    auto units_of = [](const std::optional<Money>& money) {
      return money ? std::optional<double>(money->units()) : std::nullopt;
    };
    GroupMeasures& m = measures_of(g);
    m.gpu_hours_allocated.add(hours(row.gpu_seconds_allocated));
    m.gpu_hours_busy.add(hours(row.gpu_seconds_busy));
    m.idle_spend.add(units_of(row.idle_spend));
    m.energy_kwh.add(row.energy_kwh);
    m.co2_kg.add(row.co2_kg);
    m.units.add(row.units);
    m.egress_gb.add(row.egress_gb);
    m.egress_spend.add(units_of(row.egress_spend));
    if (row.storage_peak_gb) {
      // Peaks do not add across runs held at different times: the group's peak is the largest.
      m.storage_peak_gb.runs++;
      m.storage_peak_gb.total = std::max(m.storage_peak_gb.total, *row.storage_peak_gb);
    }
    m.storage_spend.add(units_of(row.storage_spend));
  }
  if (!extra) return;
  if (extra->experiment.empty() && !extra->several) {
    extra->experiment = row.experiment;
  } else if (extra->experiment != row.experiment) {
    extra->several = true;
  }
  if (row.metric_name && row.metric_value && std::isfinite(*row.metric_value)) {
    auto [it, inserted] = extra->metric_range.try_emplace(
        *row.metric_name, std::pair{*row.metric_value, *row.metric_value});
    if (!inserted) {
      it->second.first = std::min(it->second.first, *row.metric_value);
      it->second.second = std::max(it->second.second, *row.metric_value);
    }
  }
}

std::optional<GroupMetric> ReportBuilder::finish_group(Money spend, const Extra& extra) const {
  std::optional<Baseline> baseline = options_.baseline;
  if (!baseline && !extra.several) {
    auto it = options_.experiment_baselines.find(extra.experiment);
    if (it != options_.experiment_baselines.end()) baseline = it->second;
  }
  if (!baseline) return std::nullopt;
  GroupMetric g;
  const std::pair<double, double>* range = nullptr;
  if (!baseline->metric.empty()) {
    auto it = extra.metric_range.find(baseline->metric);
    if (it != extra.metric_range.end()) range = &it->second;
    g.metric_name = baseline->metric;
  } else if (extra.metric_range.size() == 1) {
    range = &extra.metric_range.begin()->second;
    g.metric_name = extra.metric_range.begin()->first;
  }
  if (range) g.best_metric = baseline->goal == MetricGoal::max ? range->second : range->first;
  g.per_point = cost_per_metric_point(spend, *baseline, g.best_metric);
  return g;
}

size_t ReportBuilder::group_of(const ReportRow& row) {
  key_.clear();
  for (const GroupBy& by : options_.by) {
    // The named fields without a copy: this runs once per run of the ledger.
    switch (by.kind) {
      case GroupBy::Kind::team:
        key_ += row.team;
        break;
      case GroupBy::Kind::experiment:
        key_ += row.experiment;
        break;
      case GroupBy::Kind::project:
        key_ += row.project;
        break;
      case GroupBy::Kind::user:
        key_ += row.user;
        break;
      case GroupBy::Kind::host:
        key_ += row.host;
        break;
      default:
        key_ += group_value(row, by);
    }
    key_ += '\x1f';
  }
  ReportGroups& g = groups_;
  const std::uint64_t hash = std::hash<std::string_view>{}(key_);
  auto key_at = [&g](size_t group) {
    size_t begin = g.key_begin_[group];
    size_t end = group + 1 < g.key_begin_.size() ? g.key_begin_[group + 1] : g.keys_.size();
    return std::string_view(g.keys_).substr(begin, end - begin);
  };
  size_t mask = slots_.size() - 1;
  if (!slots_.empty()) {
    for (size_t at = hash & mask;; at = (at + 1) & mask) {
      std::uint32_t slot = slots_[at];
      if (slot == 0) break;
      if (hashes_[slot - 1] == hash && key_at(slot - 1) == key_) return slot - 1;
    }
  }
  // A new group: its key, its sums; the index grown to keep it at most half full.
  const size_t group = g.sums_.size();
  if (group > 0xfffffff0u) throw std::length_error("report: too many groups");
  g.key_begin_.push_back(static_cast<std::uint32_t>(g.keys_.size()));
  size_t part_start = g.keys_.size();
  g.keys_ += key_;
  for (size_t i = part_start; i < g.keys_.size(); ++i) {
    if (g.keys_[i] == '\x1f') g.part_end_.push_back(static_cast<std::uint32_t>(i));
  }
  // A part that holds the separator itself splits in two: the parts are the key's values, each
  // ended by one separator, so count them from the values instead.
  if (g.part_end_.size() != (group + 1) * g.parts_) {
    g.part_end_.resize(group * g.parts_);
    size_t at = part_start;
    for (const GroupBy& by : options_.by) {
      at += group_value(row, by).size();
      g.part_end_.push_back(static_cast<std::uint32_t>(at));
      ++at;
    }
  }
  g.sums_.emplace_back();
  hashes_.push_back(hash);
  if (keeps_extras_) extras_.emplace_back();
  if ((group + 1) * 2 > slots_.size()) {
    slots_.assign(std::max<size_t>(64, slots_.size() * 2), 0);
    mask = slots_.size() - 1;
    for (size_t i = 0; i <= group; ++i) {
      size_t at = hashes_[i] & mask;
      while (slots_[at] != 0) at = (at + 1) & mask;
      slots_[at] = static_cast<std::uint32_t>(i + 1);
    }
  } else {
    size_t at = hash & mask;
    while (slots_[at] != 0) at = (at + 1) & mask;
    slots_[at] = static_cast<std::uint32_t>(group + 1);
  }
  return group;
}

void ReportBuilder::add(const ReportRow& row) {
  if (!report_includes(options_, row)) return;
  size_t group = group_of(row);
  account(groups_.sums_[group], extra_of(group), row);
  account(total_, keeps_extras_ ? &total_extra_ : nullptr, row);
}

Report ReportBuilder::finish() && {
  ReportGroups& g = groups_;
  if (keeps_extras_) {
    for (size_t i = 0; i < g.sums_.size(); ++i) {
      if (auto metric = finish_group(g.sums_[i].spend, extras_[i])) {
        g.sums_[i].metric = static_cast<std::uint32_t>(g.metrics_.size());
        g.metrics_.push_back(std::move(*metric));
      }
    }
  }
  Report report;
  report.by = options_.by;
  g.fill_group(total_, ReportGroups::kTotal, report.total);
  if (keeps_extras_) {
    if (auto metric = finish_group(total_.spend, total_extra_)) {
      report.total.metric_name = std::move(metric->metric_name);
      report.total.best_metric = metric->best_metric;
      report.total.per_point = std::move(metric->per_point);
    }
  }
  // Sorted as indices: the groups stay where they were added. Keys are unique: the order is total.
  g.order_.resize(g.sums_.size());
  for (size_t i = 0; i < g.order_.size(); ++i) g.order_[i] = static_cast<std::uint32_t>(i);
  std::sort(g.order_.begin(), g.order_.end(), [&g](std::uint32_t a, std::uint32_t b) {
    Money x = g.sums_[a].spend, y = g.sums_[b].spend;
    if (x != y) return x > y;
    for (size_t j = 0; j < g.parts_; ++j) {
      int c = g.part(a, j).compare(g.part(b, j));
      if (c != 0) return c < 0;
    }
    return false;
  });
  slots_ = {};
  hashes_ = {};
  extras_ = {};
  report.groups = std::move(groups_);
  return report;
}

// ---- ReportGroups ----

std::string_view ReportGroups::part(size_t g, size_t j) const {
  size_t begin = j == 0 ? key_begin_[g] : part_end_[g * parts_ + j - 1] + 1;
  return std::string_view(keys_).substr(begin, part_end_[g * parts_ + j] - begin);
}

void ReportGroups::fill_group(const GroupSums& s, size_t g, GroupTotals& out) const {
  out.key.resize(g == kTotal ? 0 : parts_);
  for (size_t j = 0; j < out.key.size(); ++j) out.key[j].assign(part(g, j));
  out.runs = s.runs;
  out.running = s.running;
  out.succeeded = s.succeeded;
  out.failed = s.failed;
  out.killed = s.killed;
  out.refused = s.refused;
  out.lost = s.lost;
  out.preempted = s.preempted;
  out.accepted = s.accepted;
  out.spend = s.spend;
  out.running_spend = s.running_spend;
  out.waste = s.waste;
  out.units_spend = s.units_spend;
  out.started_first = s.started_first;
  out.started_last = s.started_last;
  static const GroupMeasures kNone;
  const GroupMeasures& m = s.measures == GroupSums::kNone ? kNone : measures_[s.measures];
  out.gpu_hours_allocated = m.gpu_hours_allocated;
  out.gpu_hours_busy = m.gpu_hours_busy;
  out.idle_spend = m.idle_spend;
  out.energy_kwh = m.energy_kwh;
  out.co2_kg = m.co2_kg;
  out.units = m.units;
  out.egress_gb = m.egress_gb;
  out.egress_spend = m.egress_spend;
  out.storage_peak_gb = m.storage_peak_gb;
  out.storage_spend = m.storage_spend;
  if (s.metric == GroupSums::kNone) {
    out.metric_name.reset();
    out.best_metric.reset();
    out.per_point.reset();
  } else {
    const GroupMetric& metric = metrics_[s.metric];
    out.metric_name = metric.metric_name;
    out.best_metric = metric.best_metric;
    out.per_point = metric.per_point;
  }
}

void ReportGroups::fill(size_t i, GroupTotals& out) const {
  fill_group(sums_[order_[i]], order_[i], out);
}

GroupTotals ReportGroups::operator[](size_t i) const {
  GroupTotals out;
  fill(i, out);
  return out;
}

const GroupTotals& ReportGroups::const_iterator::operator*() const {
  groups_->fill(at_, *scratch_);
  return *scratch_;
}

ReportGroups::const_iterator ReportGroups::begin() const {
  const_iterator it;
  it.groups_ = this;
  it.scratch_ = std::make_shared<GroupTotals>();
  return it;
}

ReportGroups::const_iterator ReportGroups::end() const {
  const_iterator it;
  it.groups_ = this;
  it.at_ = size();
  return it;
}

Report build_report(const std::vector<ReportRow>& rows, const ReportOptions& options) {
  ReportBuilder builder(options);
  for (const ReportRow& row : rows) builder.add(row);
  return std::move(builder).finish();
}

}  // namespace spendcap
