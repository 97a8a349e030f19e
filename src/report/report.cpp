#include "spendcap/report/report.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>

#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/ledger_store.hpp"

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

std::string utc_day_text(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(std::floor(unix_seconds));
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
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
      return utc_day_text(row.started_at);
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

namespace {

// As printf's "%.*f" (exact, ties to even; the same text for 75 million values tried, money, exact
// ties, inf and nan among them), without its format parsing: a table of 100,000 groups has a
// million numbers. 400: a double's longest fixed text at 6 decimals is under 330 characters.
std::string fixed(double value, int decimals) {
  char text[400];
  char* end =
      std::to_chars(text, text + sizeof text, value, std::chars_format::fixed, decimals).ptr;
  return std::string(text, end);
}

// "4166.67" -> "4,166.67"
std::string with_thousands(const std::string& plain) {
  size_t start = plain[0] == '-' ? 1 : 0;
  size_t dot = plain.find('.');
  if (dot == std::string::npos) dot = plain.size();
  std::string out;
  out.reserve(plain.size() + (dot - start) / 3);
  out.append(plain, 0, start);
  for (size_t i = start; i < dot; ++i) {
    out += plain[i];
    size_t left = dot - i - 1;
    if (left > 0 && left % 3 == 0) out += ',';
  }
  out.append(plain, dot);
  return out;
}

}  // namespace

CostPerPoint cost_per_metric_point(Money spend, const Baseline& baseline,
                                   std::optional<double> best) {
  CostPerPoint result;
  result.best = best;
  if (!best) {
    result.text = "not measured";
    return result;
  }
  double improvement =
      baseline.goal == MetricGoal::max ? *best - baseline.value : baseline.value - *best;
  if (!(improvement > 0) || !std::isfinite(improvement)) {
    result.text = "undefined: no improvement";
    return result;
  }
  result.per_point = spend.units() / improvement;
  result.text = with_thousands(fixed(*result.per_point, 2));
  return result;
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
  bool wasted = row.preempted;
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
      wasted = true;
      break;
    case RunStatus::killed:
      ++g.killed;
      wasted = true;
      break;
    case RunStatus::refused:
      ++g.refused;
      break;
    case RunStatus::lost:
      ++g.lost;
      wasted = true;
      break;
    case RunStatus::preempted:  // counted below; its spend is waste unless it is resumed
      break;
  }
  if (row.preempted) ++g.preempted;
  if (wasted) g.waste += row.spend;
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

namespace {

// A plain decimal number ("-0.5", "+3", "1e-6"): a spreadsheet reads it as a number, never as a
// formula, so it is left as it is however it starts.
bool is_plain_number(std::string_view text) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  size_t digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    size_t exponent = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i, ++exponent;
    if (exponent == 0) return false;
  }
  return i == text.size();
}

}  // namespace

bool starts_a_formula(std::string_view text) {
  if (text.empty() || is_plain_number(text)) return false;
  return std::string_view("=+-@\t\r").find(text.front()) != std::string_view::npos;
}

std::string csv_line(const std::vector<std::string>& cells) {
  std::string out;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) out += ',';
    out += cells[i];
  }
  return out + "\n";
}

std::string csv_field(std::string_view text, CsvCells cells) {
  // OWASP's CSV injection advice: a single quote before the cell, and the cell quoted, so that a
  // spreadsheet shows the text instead of evaluating it (quoting alone does not stop it).
  const bool neutralise = cells == CsvCells::safe && starts_a_formula(text);
  if (!neutralise && text.find_first_of(",\"\r\n") == std::string_view::npos) {
    return std::string(text);
  }
  std::string out = neutralise ? "\"'" : "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// ---- the outputs ----

namespace {

std::string money_cell(double units, const std::string& currency) {
  // Below one unit, 4 decimals (as format_money): a short run's spend is not shown as 0.00.
  std::string number = with_thousands(fixed(units, units != 0 && std::fabs(units) < 1 ? 4 : 2));
  if (currency == "USD") {
    number.insert(number[0] == '-' ? 1 : 0, 1, '$');  // "$1.50", "-$0.50"
  } else {
    number += ' ';
    number += currency;
  }
  return number;
}

std::string money_cell(Money amount, const std::string& currency) {
  return money_cell(amount.units(), currency);
}

std::string opt_number(const std::optional<double>& value, int decimals) {
  return value ? fixed(*value, decimals) : std::string();
}

std::string_view key_text(const std::string& value) {
  return value.empty() ? std::string_view("-") : std::string_view(value);
}

// One column of the table and the csv: its header and how a group fills it.
struct Column {
  std::string header;
  bool money = false;  // right-aligned with the currency
  bool numeric = true;
  std::function<std::string(const GroupTotals&, bool table)> cell;
  // Shown only where some group measured it (the table); csv and json always carry it.
  std::function<bool(const GroupTotals&)> measured;
};

std::vector<Column> columns(const std::string& currency) {
  auto money = [currency](auto get) {
    return [currency, get](const GroupTotals& g, bool table) -> std::string {
      std::optional<double> v = get(g);
      if (!v) return {};
      return table ? money_cell(*v, currency) : fixed(*v, 6);
    };
  };
  auto number = [](auto get, int decimals) {
    return [get, decimals](const GroupTotals& g, bool) { return opt_number(get(g), decimals); };
  };
  auto count = [](std::int64_t GroupTotals::*field) {
    return [field](const GroupTotals& g, bool) { return std::to_string(g.*field); };
  };
  auto always = [](const GroupTotals&) { return true; };
  auto has = [](Measured GroupTotals::*field) {
    return [field](const GroupTotals& g) { return (g.*field).runs > 0; };
  };
  auto measured_sum = [](Measured GroupTotals::*field) {
    return [field](const GroupTotals& g) { return (g.*field).value(); };
  };
  std::vector<Column> c;
  c.push_back({"runs", false, true, count(&GroupTotals::runs), always});
  c.push_back({"running", false, true, count(&GroupTotals::running), always});
  c.push_back({"succeeded", false, true, count(&GroupTotals::succeeded), always});
  c.push_back({"failed", false, true, count(&GroupTotals::failed), always});
  c.push_back({"killed", false, true, count(&GroupTotals::killed), always});
  c.push_back({"refused", false, true, count(&GroupTotals::refused), always});
  c.push_back({"lost", false, true, count(&GroupTotals::lost), always});
  c.push_back({"preempted", false, true, count(&GroupTotals::preempted),
               [](const GroupTotals& g) { return g.preempted > 0; }});
  c.push_back({"spend", true, true,
               [currency](const GroupTotals& g, bool table) {
                 if (!table) return fixed(g.spend.units(), 6);
                 return money_cell(g.spend, currency) + (g.running ? "*" : " ");
               },
               always});
  c.push_back({"running_spend", true, true,
               money([](const GroupTotals& g) { return std::optional(g.running_spend.units()); }),
               [](const GroupTotals&) { return false; }});
  c.push_back({"waste", true, true,
               money([](const GroupTotals& g) { return std::optional(g.waste.units()); }), always});
  c.push_back({"waste_share", false, true,
               [](const GroupTotals& g, bool table) {
                 return table ? fixed(100 * g.waste_share(), 0) + "%" : fixed(g.waste_share(), 4);
               },
               always});
  c.push_back({"accepted", false, true, count(&GroupTotals::accepted),
               [](const GroupTotals& g) { return g.accepted > 0; }});
  c.push_back({"per_accepted", true, true, money([](const GroupTotals& g) -> std::optional<double> {
                 auto m = g.cost_per_accepted();
                 return m ? std::optional(m->units()) : std::nullopt;
               }),
               [](const GroupTotals& g) { return g.accepted > 0; }});
  c.push_back({"gpu_hours_allocated", false, true,
               number(measured_sum(&GroupTotals::gpu_hours_allocated), 2),
               has(&GroupTotals::gpu_hours_allocated)});
  c.push_back({"gpu_hours_busy", false, true, number(measured_sum(&GroupTotals::gpu_hours_busy), 2),
               has(&GroupTotals::gpu_hours_busy)});
  c.push_back({"utilisation", false, true,
               [](const GroupTotals& g, bool table) {
                 auto u = g.utilisation();
                 if (!u) return std::string();
                 return table ? fixed(100 * *u, 0) + "%" : fixed(*u, 4);
               },
               [](const GroupTotals& g) { return g.utilisation().has_value(); }});
  c.push_back({"idle_spend", true, true, money(measured_sum(&GroupTotals::idle_spend)),
               has(&GroupTotals::idle_spend)});
  c.push_back({"energy_kwh", false, true, number(measured_sum(&GroupTotals::energy_kwh), 3),
               has(&GroupTotals::energy_kwh)});
  c.push_back({"co2_kg", false, true, number(measured_sum(&GroupTotals::co2_kg), 3),
               has(&GroupTotals::co2_kg)});
  c.push_back({"metric", false, false,
               [](const GroupTotals& g, bool) { return g.metric_name.value_or(""); },
               [](const GroupTotals& g) { return g.per_point.has_value(); }});
  c.push_back({"best_metric", false, true,
               [](const GroupTotals& g, bool) {
                 return g.best_metric ? fixed(*g.best_metric, 6) : std::string();
               },
               [](const GroupTotals& g) { return g.per_point.has_value(); }});
  c.push_back({"cost_per_metric_point", false, false,
               [](const GroupTotals& g, bool table) {
                 if (!g.per_point) return std::string();
                 if (!table) {
                   return g.per_point->per_point ? fixed(*g.per_point->per_point, 6)
                                                 : g.per_point->text;
                 }
                 return g.per_point->text;
               },
               [](const GroupTotals& g) { return g.per_point.has_value(); }});
  c.push_back({"units", false, true, number(measured_sum(&GroupTotals::units), 0),
               has(&GroupTotals::units)});
  c.push_back({"per_thousand_units", true, true,
               money([](const GroupTotals& g) { return g.cost_per_thousand_units(); }),
               has(&GroupTotals::units)});
  c.push_back({"egress_gb", false, true, number(measured_sum(&GroupTotals::egress_gb), 3),
               has(&GroupTotals::egress_gb)});
  c.push_back({"egress_spend", true, true, money(measured_sum(&GroupTotals::egress_spend)),
               has(&GroupTotals::egress_spend)});
  c.push_back({"storage_peak_gb", false, true,
               number(measured_sum(&GroupTotals::storage_peak_gb), 3),
               has(&GroupTotals::storage_peak_gb)});
  c.push_back({"storage_spend", true, true, money(measured_sum(&GroupTotals::storage_spend)),
               has(&GroupTotals::storage_spend)});
  return c;
}

// Appends `text` padded with spaces to `width` bytes: numbers on the left, text on the right.
void append_padded(std::string& out, std::string_view text, size_t width, bool numeric) {
  size_t pad = text.size() < width ? width - text.size() : 0;
  if (numeric) out.append(pad, ' ');
  out += text;
  if (!numeric) out.append(pad, ' ');
}

// Display width of UTF-8 text: code points (names are printable; wide glyphs are rare in them).
size_t display_width(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

// Appends a key in `width` code points, a longer one cut to width - 1 and "~", then the two spaces
// between columns.
void append_key(std::string& out, std::string_view text, size_t width) {
  size_t shown = display_width(text);
  if (shown <= width) {
    out += text;
  } else {
    shown = 0;
    size_t end = 0;
    for (; end < text.size(); ++end) {
      unsigned char c = static_cast<unsigned char>(text[end]);
      if ((c & 0xC0) != 0x80) {
        if (shown + 1 >= width) break;
        ++shown;
      }
    }
    out += text.substr(0, end);
    out += '~';
    ++shown;
  }
  out.append(width - shown + 2, ' ');
}

// The table's headers are short, so that it fits a terminal; csv and json keep the long names.
std::string table_header(const std::string& name) {
  static const std::map<std::string, std::string> short_names = {
      {"succeeded", "ok"},
      {"failed", "failed"},
      {"refused", "refused"},
      {"preempted", "preempt"},
      {"waste_share", "waste%"},
      {"per_accepted", "per accepted"},
      {"gpu_hours_allocated", "GPU-h"},
      {"gpu_hours_busy", "busy GPU-h"},
      {"utilisation", "util"},
      {"idle_spend", "idle"},
      {"energy_kwh", "kWh"},
      {"co2_kg", "CO2 kg"},
      {"best_metric", "best"},
      {"cost_per_metric_point", "per point"},
      {"per_thousand_units", "per 1k units"},
      {"egress_gb", "egress GB"},
      {"egress_spend", "egress"},
      {"storage_peak_gb", "peak GB"},
      {"storage_spend", "storage"},
  };
  auto it = short_names.find(name);
  return it == short_names.end() ? name : it->second;
}

}  // namespace

std::string report_table(const Report& report, const std::string& currency, int width) {
  std::string text;
  write_report_table(report, currency, width, [&text](std::string_view part) { text += part; });
  return text;
}

void write_report_table(const Report& report, const std::string& currency, int width,
                        const std::function<void(std::string_view)>& write) {
  std::vector<Column> all = columns(currency);
  std::vector<const Column*> shown;
  std::vector<std::string> unmeasured;
  // Which columns some group measured: each group made once (ReportGroups), every column asked.
  std::vector<char> measured(all.size(), 0);
  size_t left = all.size();
  auto ask = [&](const GroupTotals& g) {
    for (size_t i = 0; i < all.size(); ++i) {
      if (!measured[i] && all[i].measured(g)) {
        measured[i] = 1;
        --left;
      }
    }
  };
  ask(report.total);
  for (auto it = report.groups.begin(); left > 0 && it != report.groups.end(); ++it) ask(*it);
  for (size_t c = 0; c < all.size(); ++c) {
    const Column& column = all[c];
    if (measured[c]) {
      shown.push_back(&column);
    } else if (column.header.find("gpu") != std::string::npos || column.header == "energy_kwh" ||
               column.header == "co2_kg" || column.header == "idle_spend" ||
               column.header == "egress_gb" || column.header == "storage_spend" ||
               column.header == "units") {
      unmeasured.push_back(column.header);
    }
  }
  std::vector<std::string> key_headers;
  for (const GroupBy& by : report.by) key_headers.push_back(to_string(by));
  if (key_headers.empty()) key_headers.push_back("all");
  const size_t key_count = key_headers.size(), cell_count = shown.size();

  // Rows: the groups, then the total. One row's keys and cells at a time, in these (reused).
  const size_t rows = report.groups.size() + 1;
  std::vector<std::string> keys(key_count), cells(cell_count);
  GroupTotals group;  // the row's group, made again for each row (ReportGroups::fill)
  auto fill = [&](size_t r) {
    const bool is_total = r + 1 == rows;
    if (!is_total) report.groups.fill(r, group);
    const GroupTotals& g = is_total ? report.total : group;
    for (size_t i = 0; i < key_count; ++i) {
      std::string_view value = i < g.key.size() ? key_text(g.key[i]) : "all";
      if (is_total) value = i == 0 ? "total" : "";
      keys[i] = escape_for_terminal(value);
    }
    for (size_t i = 0; i < cell_count; ++i) cells[i] = shown[i]->cell(g, true);
  };
  // The columns' widths. Each row is made again when it is written: 100,000 rows kept were tens
  // of MB of fresh pages, which took longer than making the rows twice.
  std::vector<size_t> key_widths(key_count);
  for (size_t i = 0; i < key_count; ++i) key_widths[i] = display_width(key_headers[i]);
  std::vector<size_t> widths(cell_count);
  for (size_t i = 0; i < cell_count; ++i) widths[i] = table_header(shown[i]->header).size();
  for (size_t r = 0; r < rows; ++r) {
    fill(r);
    for (size_t i = 0; i < key_count; ++i) {
      key_widths[i] = std::max(key_widths[i], display_width(keys[i]));
    }
    for (size_t i = 0; i < cell_count; ++i) widths[i] = std::max(widths[i], cells[i].size());
  }

  size_t numbers = 0;
  for (size_t w : widths) numbers += w + 2;
  // Names are shortened before the numbers: the table fits the terminal.
  size_t keys_total = 0;
  for (size_t w : key_widths) keys_total += w + 2;
  constexpr size_t kMinBar = 10;
  size_t budget = width > 0 ? static_cast<size_t>(width) : 120;
  while (keys_total + numbers + kMinBar > budget) {
    auto widest = std::max_element(key_widths.begin(), key_widths.end());
    if (*widest <= 8) break;
    --*widest;
    --keys_total;
  }
  size_t used = keys_total + numbers;
  size_t bar_width = used < budget ? std::min<size_t>(budget - used, 40) : 0;
  if (bar_width < 4) bar_width = 0;

  double biggest = 0;
  for (size_t r = 0; r < report.groups.size(); ++r) {
    biggest = std::max(biggest, report.groups.spend(r).units());
  }

  // The lines go out through one 64 KiB buffer, handed to `write` whenever it fills: a table of
  // 100,000 groups built in one string was 12 MB of fresh pages (a bar's block is 3 bytes of
  // UTF-8).
  const std::string_view block = "\u2588";
  constexpr size_t kChunk = 64 * 1024;
  std::string out;
  out.reserve(kChunk + keys_total + numbers + block.size() * bar_width + 256);
  auto flush = [&](bool always) {
    if (!out.empty() && (always || out.size() >= kChunk)) {
      write(out);
      out.clear();
    }
  };
  auto line = [&](const std::vector<std::string>& key, const std::vector<std::string>& row,
                  size_t blocks) {
    const size_t start = out.size();
    for (size_t i = 0; i < key_count; ++i) append_key(out, key[i], key_widths[i]);
    for (size_t i = 0; i < cell_count; ++i) {
      append_padded(out, row[i], widths[i], shown[i]->numeric);
      out += "  ";
    }
    for (size_t i = 0; i < blocks; ++i) out += block;
    while (out.size() > start && out.back() == ' ') out.pop_back();
    out += '\n';
    flush(false);
  };
  std::vector<std::string> header;
  for (const Column* column : shown) header.push_back(table_header(column->header));
  line(key_headers, header, 0);
  for (size_t r = 0; r < rows; ++r) {
    size_t blocks = 0;
    bool is_total = r + 1 == rows;
    if (!is_total && bar_width > 0 && biggest > 0) {
      // A negative spend (a ledger edited by hand) draws no bar: a negative share would wrap.
      Money spend = report.groups.spend(r);
      double share = std::clamp(spend.units() / biggest, 0.0, 1.0);
      blocks = static_cast<size_t>(std::lround(share * static_cast<double>(bar_width)));
      if (blocks == 0 && spend.micros > 0) blocks = 1;
    }
    if (is_total) out += "\n";
    fill(r);
    line(keys, cells, blocks);
  }
  if (report.total.running > 0) out += "* includes the spend so far of runs still running\n";
  if (!unmeasured.empty()) out += "not measured: " + join(unmeasured, ", ") + "\n";
  flush(true);
}

std::string report_csv(const Report& report, const std::string& currency, CsvCells cells) {
  std::vector<Column> all = columns(currency);
  std::vector<std::string> header;
  for (const GroupBy& by : report.by) header.push_back(csv_field(to_string(by), cells));
  for (const Column& column : all) header.push_back(column.header);
  header.push_back("currency");
  std::string out = csv_line(header);
  for (const GroupTotals& g : report.groups) {
    std::vector<std::string> row;
    for (const std::string& value : g.key) row.push_back(csv_field(value, cells));
    for (const Column& column : all) row.push_back(csv_field(column.cell(g, false), cells));
    row.push_back(csv_field(currency, cells));
    out += csv_line(row);
  }
  return out;
}

namespace {

nlohmann::json group_json(const Report& report, const GroupTotals& g, const std::string& currency,
                          bool with_key) {
  nlohmann::json j = nlohmann::json::object();
  if (with_key) {
    nlohmann::json key = nlohmann::json::object();
    for (size_t i = 0; i < report.by.size() && i < g.key.size(); ++i) {
      key[to_string(report.by[i])] = g.key[i];
    }
    j["group"] = key;
  }
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  j["runs"] = g.runs;
  j["running"] = g.running;
  j["succeeded"] = g.succeeded;
  j["failed"] = g.failed;
  j["killed"] = g.killed;
  j["refused"] = g.refused;
  j["lost"] = g.lost;
  j["preempted"] = g.preempted;
  j["accepted"] = g.accepted;
  j["spend"] = money_to_json(g.spend);
  j["running_spend"] = money_to_json(g.running_spend);
  j["waste"] = money_to_json(g.waste);
  j["waste_share"] = g.waste_share();
  auto per_accepted = g.cost_per_accepted();
  j["cost_per_accepted"] = per_accepted ? nlohmann::json(money_to_json(*per_accepted)) : nullptr;
  j["gpu_hours_allocated"] = opt(g.gpu_hours_allocated.value());
  j["gpu_hours_busy"] = opt(g.gpu_hours_busy.value());
  j["utilisation"] = opt(g.utilisation());
  j["idle_spend"] = opt(g.idle_spend.value());
  j["energy_kwh"] = opt(g.energy_kwh.value());
  j["co2_kg"] = opt(g.co2_kg.value());
  j["units"] = opt(g.units.value());
  j["cost_per_thousand_units"] = opt(g.cost_per_thousand_units());
  j["egress_gb"] = opt(g.egress_gb.value());
  j["egress_spend"] = opt(g.egress_spend.value());
  j["storage_peak_gb"] = opt(g.storage_peak_gb.value());
  j["storage_spend"] = opt(g.storage_spend.value());
  if (g.per_point) {
    j["metric"] = g.metric_name ? nlohmann::json(*g.metric_name) : nullptr;
    j["best_metric"] = opt(g.best_metric);
    j["cost_per_metric_point"] = opt(g.per_point->per_point);
    j["cost_per_metric_point_text"] = g.per_point->text;
  }
  j["currency"] = currency;
  return j;
}

}  // namespace

std::string report_json(const Report& report, const std::string& currency) {
  nlohmann::json j = nlohmann::json::object();
  nlohmann::json by = nlohmann::json::array();
  for (const GroupBy& b : report.by) by.push_back(to_string(b));
  j["by"] = by;
  j["currency"] = currency;
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupTotals& g : report.groups)
    groups.push_back(group_json(report, g, currency, true));
  j["groups"] = groups;
  j["total"] = group_json(report, report.total, currency, false);
  return dump_json(j, 2) + "\n";
}

}  // namespace spendcap
