// Which rollups (ledger/rollup.hpp) a report reads instead of its runs: the smallest cut that keeps
// every tag it groups by and filters on, by month where whole months of its period allow, by day
// elsewhere, and its partial days as runs; and the one function that feeds a report from a ledger
// either way (cli/report_commands.cpp, and the test that holds the two ways equal).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "spendcap/ledger/rollup.hpp"
#include "spendcap/report/report.hpp"

namespace spendcap {

// What the report of `options` reads (its period: options.since/until, else every run); `by_team`
// also keeps the team (the html page's spend per team). None: it groups by a tag, which no cut
// keeps, so it reads every run of its period.
std::optional<RollupRead> report_rollup_read(const ReportOptions& options, bool by_team);

// Where a report's runs come from, and what it adds to them.
struct ReportSource {
  std::optional<RollupRead> read;  // none: every run of [since, until)
  double since = 0, until = 0;
  std::unordered_set<std::string> accepted;  // run ids (Ledger::accepted_results)
  std::optional<Money> egress_price;         // rates.egress_per_gb
  // Also told each run read as a row (after `row` is filled) and each cell.
  std::function<void(const ReportRow&)> on_row;
  std::function<void(const RollupCell&)> on_cell;
};
// Adds the period's runs to each builder (made with options that `source.read` was planned for):
// from the rollups when `source.read` is set and the ledger keeps them, else every run of the
// period. Returns whether the rollups were read.
bool add_ledger_runs(Ledger& ledger, const ReportSource& source,
                     const std::vector<ReportBuilder*>& builders);

}  // namespace spendcap
