// Rollups: the sums of finished runs that reports and showback read instead of every run. A cell
// holds, for one cut, one time bucket and one key (the cut's tags, and the run's pricing), what a
// report adds up per run: counts by status, spend, waste, the measured figures (with how many runs
// measured each), the first and last start, and, beside it, each metric's lowest and highest value.
//
// Who keeps them: the ledger itself, by triggers on its runs table (both backends), so that every
// path that finishes, reconciles or replays a run (BudgetLedger's, PostgreSQL's spendcap_finish and
// lost-run reconciliation, a replayed spool row) moves its cells the same way. A run counts from
// the moment its row is no longer `running`; a change of a finished row (a replayed final row
// replacing a reconciled run's charge) takes the old row out and puts the new one in, so replaying
// twice changes nothing. A run belongs to the bucket of the day it started (runs.day), however
// long it ran, as it does for budgets and reports. Unfinished runs are never in a cell: a report
// adds them from their rows.
//
// A cut keeps some of the tags a report groups by (the others are "" in its cells), so that it
// stays far smaller than the runs: cells of a month hold every run of that month with the same key.
// Cut ids are stored in the rows: never renumber one; a new cut needs a migration that backfills
// it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/money.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

struct RunRecord;

// total: every run of the ledger in one bucket (0), for a report of no period (the default).
enum class RollupGrain { day, month, total };

struct RollupCut {
  int id = 0;
  RollupGrain grain = RollupGrain::day;
  bool team = false, experiment = false, project = false, user = false, host = false;
};

// The cuts every ledger keeps (schema v14), the smallest of a grain first; the last keeps every
// tag by day.
const std::vector<RollupCut>& rollup_cuts();
const RollupCut& rollup_cut(int id);

// A cell's key. bucket: the UTC day number (days since 1970-01-01) of its day, or of its month's
// first day; 0 in a total cut.
struct RollupKey {
  int cut = 0;
  std::int64_t bucket = 0;
  std::string team, experiment, project, user, host;  // "" outside the cut
  std::optional<Pricing> pricing;                     // none: unknown (runs before schema v11)
};

// A count of the runs that measured a figure, and its sum.
struct RollupSum {
  std::int64_t runs = 0;
  double total = 0;
};

struct RollupCell {
  RollupKey key;
  std::int64_t runs = 0, succeeded = 0, failed = 0, killed = 0, refused = 0, lost = 0,
               preempted = 0;
  Money spend, waste,
      units_spend;  // waste: failed, killed, lost, preempted; units: runs with units
  RollupSum gpu_seconds_allocated, gpu_seconds_busy, energy_kwh, co2_kg, units, egress_gb;
  std::int64_t idle_runs = 0, storage_spend_runs = 0, storage_peak_runs = 0;
  Money idle_spend, storage_spend;
  double storage_peak_gb = 0;  // the largest (peaks do not add)
  double started_first = 0, started_last = 0;
};

// One metric's range over a cell's runs that reported it (a finite value).
struct RollupMetric {
  RollupKey key;
  std::string metric_name;
  double lowest = 0, highest = 0;
};

// A run of cells to read: buckets [first_bucket, last_bucket] of one cut.
struct RollupSpan {
  int cut = 0;
  std::int64_t first_bucket = 0, last_bucket = 0;
  // The UTC days the span covers, [first_day, end_day).
  std::int64_t first_day() const { return first_bucket; }
  std::int64_t end_day() const;
};

// What a report reads for the runs that started in a period: whole months and whole days from
// cells, the partial days at its ends from the runs themselves.
struct RollupRead {
  std::vector<RollupSpan> spans;
  std::vector<std::pair<double, double>> run_ranges;  // [since, until), unix seconds: rows
  std::optional<std::string> team, experiment;        // only cells (and runs) of these
  bool covers_day(std::int64_t day) const;
};

// Plans the read of the runs started in [since, until) (until may be +huge) from `total_cut` (when
// the period is every run), else `month_cut`, and `day_cut`, whose grain must be day; a cut may be
// none (nullptr) but the day cut.
RollupRead plan_rollup_read(double since, double until, const RollupCut* month_cut,
                            const RollupCut& day_cut, const RollupCut* total_cut = nullptr);

// The UTC day number of the first day of the month of `day`, and of the next month.
std::int64_t month_start_day(std::int64_t day);
std::int64_t next_month_day(std::int64_t day);

// What a ledger hands a report reading rollups (Ledger::read_rollups), all from one snapshot.
struct RollupVisitor {
  std::function<void(const RollupCell&)> cell;
  std::function<void(const RollupMetric&)> metric;  // after every cell
  // Runs read as rows: those of the run ranges (any status), and the unfinished runs of the spans.
  std::function<void(const RunRecord&)> run;
  // Finished runs of the spans whose result was accepted (they are inside cells).
  std::function<void(const RunRecord&)> accepted;
};

}  // namespace spendcap
