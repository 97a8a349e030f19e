// Showback: runs grouped by team, experiment, project, user, host, day or tag, with their spend,
// outcomes, waste, and the figures each run measured. Pure: ReportRow is filled by the caller (from
// the ledger's runs, cli/report_commands.cpp) and every function here is arithmetic and text.
//
// A figure a run did not measure is absent (std::nullopt) and shown blank or "not measured", never
// as 0: a group's sum of a measured figure covers only the runs that measured it, and says how
// many.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "spendcap/base/money.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/rollup.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

struct RunRecord;

// One run, as the report sees it.
struct ReportRow {
  std::string id, team, experiment, project, user, host;
  std::map<std::string, std::string> tags;
  RunStatus status = RunStatus::running;  // running: counted with its spend so far, marked
  bool preempted = false;
  std::string reason;
  double started_at = 0;  // unix seconds; a run belongs to the period it started in
  std::optional<double> finished_at;
  Money spend;
  Money rate_per_hour;
  bool accepted = false;  // `spendcap accept`: its result is the one kept
  // Measured by the run (GPU sampling, the progress channel); none where not measured.
  std::optional<std::string> gpu_type;
  std::optional<double> gpu_seconds_allocated, gpu_seconds_busy;
  std::optional<Money> idle_spend;
  std::optional<double> energy_kwh, co2_kg;
  std::optional<std::string> metric_name;
  std::optional<double> metric_value;
  std::optional<double> units;  // predictions, samples or tokens
  std::optional<double> egress_gb;
  std::optional<Money> egress_spend;
  std::optional<double> storage_peak_gb;
  std::optional<Money> storage_spend;
  std::optional<Pricing> pricing;  // the ledger's (RunRecord::pricing); none: unknown
  // The commitment the run used (RunRecord::commitment): a reserved run's reserved unit price.
  std::optional<Money> commitment;
  // Launch until the tree was empty (the ledger's elapsed_seconds); none: not finished.
  std::optional<double> elapsed_seconds;
  // When the job wrote its checkpoint in the grace of a stop, seconds after launch (the ledger's
  // checkpoint_written_seconds); none: not written, or spendcap did not stop it. With
  // elapsed_seconds, what of a killed run's spend is waste (ledger/waste.hpp).
  std::optional<double> checkpoint_written_seconds;
  // spendcap's exit status (spendcap_exit_of) and the command's own; none: none recorded.
  std::optional<int> exit_code, command_exit_code;
};

// What the ledger holds today; the rest stays unmeasured.
ReportRow report_row_of(const RunRecord& run);
// The same into `row`, reusing its buffers (a million runs are streamed through one row).
void fill_report_row(const RunRecord& run, ReportRow& row);

// What a report is grouped by: one of these per --by, in order.
struct GroupBy {
  enum class Kind { team, experiment, project, user, host, day, tag } kind = Kind::team;
  std::string tag;  // Kind::tag: the tag's key
};
// "team", "day", "tag:KEY"; nullopt otherwise.
std::optional<GroupBy> parse_group_by(std::string_view text);
std::string to_string(const GroupBy& by);
std::string group_value(const ReportRow& row, const GroupBy& by);  // "" shown as "-"

// Cost per metric point: spend / improvement over the baseline, in the metric's good direction.
enum class MetricGoal { max, min };
std::optional<MetricGoal> parse_metric_goal(std::string_view text);
struct Baseline {
  std::string metric;  // "" : any metric the runs reported
  double value = 0;
  MetricGoal goal = MetricGoal::max;
};
struct CostPerPoint {
  std::optional<double> best;       // the best value the runs reported
  std::optional<double> per_point;  // none: undefined
  std::string text;                 // "4166.67", or "undefined: no improvement"
};
CostPerPoint cost_per_metric_point(Money spend, const Baseline& baseline,
                                   std::optional<double> best);

// A sum of an optional figure: the runs that measured it, and their total.
struct Measured {
  std::int64_t runs = 0;
  double total = 0;
  void add(const std::optional<double>& value) {
    if (value) {
      ++runs;
      total += *value;
    }
  }
  std::optional<double> value() const { return runs ? std::optional<double>(total) : std::nullopt; }
};

struct GroupTotals {
  std::vector<std::string> key;  // one value per GroupBy
  std::int64_t runs = 0, running = 0, succeeded = 0, failed = 0, killed = 0, refused = 0, lost = 0,
               preempted = 0, accepted = 0;
  Money spend, running_spend;  // running_spend: part of spend, of runs still running
  // Spend of runs that did not succeed (failed, killed, lost, preempted); of a killed run that
  // wrote its checkpoint, only the spend after it (ledger/waste.hpp).
  Money waste;
  Money units_spend;  // spend of the runs that reported units
  Measured gpu_hours_allocated, gpu_hours_busy, idle_spend, energy_kwh, co2_kg, units, egress_gb,
      egress_spend, storage_peak_gb, storage_spend;
  std::optional<std::string> metric_name;
  std::optional<double> best_metric;  // in the group's baseline direction
  std::optional<CostPerPoint> per_point;
  double started_first = 0, started_last = 0;

  std::optional<double> utilisation() const;  // busy / allocated GPU-hours
  double waste_share() const;                 // waste / spend, 0 for no spend
  std::optional<Money> cost_per_accepted() const;
  std::optional<double> cost_per_thousand_units() const;
};

// A group's sums as ReportBuilder keeps them, and Report's groups hold them: the counts and money
// every run has, 128 bytes; the figures that few runs measure (GPU, energy, units, egress,
// storage) in a GroupMeasures of their own, made for a group when one of its runs measured one,
// and a baseline's figures in a GroupMetric. (A GroupTotals is 432 bytes: 100,000 of them were
// 43 MB of fresh pages, which cost more than the report's arithmetic.)
struct GroupSums {
  static constexpr std::uint32_t kNone = 0xffffffffu;
  std::int64_t runs = 0, running = 0, succeeded = 0, failed = 0, killed = 0, refused = 0, lost = 0,
               preempted = 0, accepted = 0;
  Money spend, running_spend, waste, units_spend;
  double started_first = 0, started_last = 0;
  std::uint32_t measures = kNone;  // its GroupMeasures, if any
  std::uint32_t metric = kNone;    // its GroupMetric, if any
};
struct GroupMeasures {
  Measured gpu_hours_allocated, gpu_hours_busy, idle_spend, energy_kwh, co2_kg, units, egress_gb,
      egress_spend, storage_peak_gb, storage_spend;
};
struct GroupMetric {
  std::optional<std::string> metric_name;
  std::optional<double> best_metric;
  std::optional<CostPerPoint> per_point;
};

// A report's groups, biggest spend first, then by key: each is made a GroupTotals when it is read
// (operator[], or iterating, which reuses one GroupTotals for every group), from its sums, its
// key's parts (kept back to back in one string) and its measures.
class ReportGroups {
 public:
  size_t size() const { return order_.size(); }
  bool empty() const { return order_.empty(); }
  // The i-th group into `out`, reusing its buffers.
  void fill(size_t i, GroupTotals& out) const;
  GroupTotals operator[](size_t i) const;
  GroupTotals front() const { return (*this)[0]; }
  Money spend(size_t i) const { return sums_[order_[i]].spend; }

  // An input iterator: `*it` is valid until the iterator moves (range-for's use).
  class const_iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = GroupTotals;
    using difference_type = std::ptrdiff_t;
    using pointer = const GroupTotals*;
    using reference = const GroupTotals&;
    const_iterator() = default;
    const GroupTotals& operator*() const;
    const GroupTotals* operator->() const { return &**this; }
    const_iterator& operator++() {
      ++at_;
      return *this;
    }
    bool operator==(const const_iterator& other) const { return at_ == other.at_; }

   private:
    friend class ReportGroups;
    const ReportGroups* groups_ = nullptr;
    size_t at_ = 0;
    std::shared_ptr<GroupTotals> scratch_;
  };
  const_iterator begin() const;
  const_iterator end() const;

 private:
  friend class ReportBuilder;
  static constexpr size_t kTotal = static_cast<size_t>(-1);  // fill_group: the total, no key
  // Group g's key: keys_[key_begin_[g], ...), its parts separated by \x1f (the builder's lookup
  // key); part j ends at part_end_[g * parts_ + j].
  std::string_view part(size_t g, size_t j) const;
  void fill_group(const GroupSums& sums, size_t g, GroupTotals& out) const;
  size_t parts_ = 0;
  std::deque<GroupSums> sums_;
  std::deque<GroupMeasures> measures_;
  std::vector<GroupMetric> metrics_;
  std::string keys_;
  std::vector<std::uint32_t> key_begin_, part_end_;
  std::vector<std::uint32_t> order_;  // biggest spend first, then by key
};

struct ReportOptions {
  std::vector<GroupBy> by;             // empty: one group of everything
  std::optional<double> since, until;  // started_at in [since, until)
  std::optional<std::string> team, experiment;
  // The baseline for cost per metric point, per experiment (from the policy) or for all
  // (--baseline).
  std::map<std::string, Baseline> experiment_baselines;
  std::optional<Baseline> baseline;
};

struct Report {
  std::vector<GroupBy> by;
  ReportGroups groups;  // biggest spend first, then by key
  GroupTotals total;
};

// Whether a row passes the period and the --team/--experiment filters.
bool report_includes(const ReportOptions& options, const ReportRow& row);

// Adds rows one at a time (a ledger of a million runs is streamed, not held), then finishes.
class ReportBuilder {
 public:
  explicit ReportBuilder(ReportOptions options);
  void add(const ReportRow& row);
  // The same from the ledger's rollups (ledger/rollup.hpp): a cell of finished runs whose cut keeps
  // every tag the report groups by (and filters on), priced for egress as add()'s caller does; a
  // metric range of a cell added before; an accepted finished run that is inside a cell.
  void add_cell(const RollupCell& cell, std::optional<Money> egress_price);
  void add_metric(const RollupMetric& metric);
  void add_accepted(const ReportRow& row);
  Report finish() &&;

 private:
  // What a baseline needs (kept only when the options have one): the group's one experiment, and
  // its metrics' ranges.
  struct Extra {
    std::string experiment;  // the group's one experiment; "" when none or several
    bool several = false;
    std::map<std::string, std::pair<double, double>> metric_range;  // name -> (min, max)
  };
  size_t group_of(const ReportRow& row);  // its group's index, added when new
  GroupMeasures& measures_of(GroupSums& sums);
  void account(GroupSums& group, Extra* extra, const ReportRow& row);
  void merge(GroupSums& group, Extra* extra, const RollupCell& cell,
             std::optional<Money> egress_price);
  std::optional<GroupMetric> finish_group(Money spend, const Extra& extra) const;
  Extra* extra_of(size_t group) { return keeps_extras_ ? &extras_[group] : nullptr; }

  ReportOptions options_;
  bool keeps_extras_ = false;  // a baseline is asked for
  ReportGroups groups_;        // becomes Report::groups
  // An open-addressing index of the groups' keys (ReportGroups::keys_): group + 1, 0 empty.
  std::vector<std::uint32_t> slots_;
  std::vector<std::uint64_t> hashes_;  // each group's key's hash
  std::deque<Extra> extras_;
  GroupSums total_;
  Extra total_extra_;
  std::string key_;    // scratch
  ReportRow scratch_;  // a cell's tags
};
Report build_report(const std::vector<ReportRow>& rows, const ReportOptions& options);

// Every csv cell spendcap writes (report csv, FOCUS, `spendcap runs`) goes through csv_field.
// safe (the default): a cell that a spreadsheet would evaluate as a formula (it begins with = + -
// @, a tab or a carriage return, and is not a plain number) gets a single quote in front and is
// quoted, as OWASP's CSV injection advice says. raw (`report --csv-raw`): cells as they are, for
// machine pipelines that must read back exactly what the ledger holds.
enum class CsvCells { safe, raw };
bool starts_a_formula(std::string_view text);
// RFC 4180 quoting (quoted when it holds a comma, quote or line break), after the above.
std::string csv_field(std::string_view text, CsvCells cells = CsvCells::safe);
// One csv line of cells that are already fields, with its newline. Every cell keeps its place,
// an empty first one too (text.hpp's join drops leading empty items).
std::string csv_line(const std::vector<std::string>& cells);

// The outputs (report_table.cpp; report.cpp builds the Report). `width` is the terminal's: names
// too long for it are cut to "name~"; 0 (not a terminal) keeps every name whole. Table numbers are
// right-aligned with the currency.
std::string report_table(const Report& report, const std::string& currency, int width);
// The same table handed to `write` a part at a time (parts of about 64 KiB), so that a table of
// 100,000 groups is never held whole.
void write_report_table(const Report& report, const std::string& currency, int width,
                        const std::function<void(std::string_view)>& write);
std::string report_csv(const Report& report, const std::string& currency,
                       CsvCells cells = CsvCells::safe);
std::string report_json(const Report& report, const std::string& currency);

// FOCUS 1.2 (FinOps Open Cost and Usage Specification): one CSV row per charge of a run (its
// compute, and its checkpoint storage where it had some) and UTC day it spent in (its charge
// periods), the charge split across them in proportion to the run's exact time, exactly (the last
// period takes the remainder), so a run's rows sum to its spend. Refused runs (no charge) have no
// rows. Rows are an allocation of what the provider's bill already holds: ProviderName is
// "spendcap" (README says how to join). PricingCategory comes from the run's own pricing in the
// ledger (Other where the ledger does not know it), never from the policy of the day of the report;
// the policy's price sheets give the SKU's list (on-demand) unit price and the reserved commitment.
struct FocusContext {
  std::string currency = "USD";
  const Policy* policy = nullptr;  // its rates; none: no unit prices and no commitments
  double now = 0;                  // the end of a running run's charge so far
  CsvCells cells = CsvCells::safe;
};
std::string focus_header();
// Appends the run's rows to `out`.
void append_focus_rows(std::string& out, const ReportRow& row, const FocusContext& context);

// What the html page shows beside the report: its period, and budget against actual per team.
struct HtmlContext {
  std::string currency = "USD";
  std::optional<double> since, until;       // the report's --since/--until; none: its runs' days
  std::vector<BudgetView> team_budgets;     // the ledger's team budgets, in their current period
  std::map<std::string, Money> team_spend;  // what each team's runs spent in this report
};
// "2026-11-01 to 2026-11-30": the UTC days of the report (from --since/--until, else its runs).
std::string report_period_text(const Report& report, const HtmlContext& context);

// One self-contained HTML page for a monthly review (inline SVG and CSS, no scripts): the period
// in the title and header, spend per UTC day stacked by group (one <g class="series"> per group of
// `report`) with a legend, the table (amounts in cents that add up to the printed totals, running
// runs marked) and budget against actual per team. `by_day` is the same runs grouped by day first,
// then by report's groupings.
std::string report_html(const Report& report, const Report& by_day, const HtmlContext& context);

}  // namespace spendcap
