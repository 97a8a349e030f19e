// Rollup cuts and the plan of a report's read. Contract in rollup.hpp.
#include "spendcap/ledger/rollup.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "spendcap/base/error.hpp"

namespace spendcap {

const std::vector<RollupCut>& rollup_cuts() {
  // By month: a team, an experiment, or both (what `report` groups by most, and what budgets are
  // set on); team x experiment over every run, for a report of no period (a month cut of it holds
  // a cell per pair and month a pair ran in); by day: a team, team x experiment, and every tag
  // (for --by project, user and host), also for the days of a partial month. A report reads the
  // first cut of this list that keeps what it needs. Ids are stored: never renumber.
  static const std::vector<RollupCut> cuts = {
      {1, RollupGrain::month, true, false, false, false, false},
      {2, RollupGrain::month, false, true, false, false, false},
      {3, RollupGrain::month, true, true, false, false, false},
      {5, RollupGrain::total, true, true, false, false, false},
      {6, RollupGrain::day, true, false, false, false, false},
      {7, RollupGrain::day, true, true, false, false, false},
      {4, RollupGrain::day, true, true, true, true, true},
  };
  return cuts;
}

const RollupCut& rollup_cut(int id) {
  for (const RollupCut& cut : rollup_cuts()) {
    if (cut.id == id) return cut;
  }
  throw Error("rollup cut " + std::to_string(id), "not a cut this spendcap keeps");
}

namespace {
std::chrono::sys_days as_days(std::int64_t day) {
  return std::chrono::sys_days{std::chrono::days{day}};
}
}  // namespace

std::int64_t month_start_day(std::int64_t day) {
  std::chrono::year_month_day date{as_days(day)};
  return std::chrono::sys_days{date.year() / date.month() / 1}.time_since_epoch().count();
}

std::int64_t next_month_day(std::int64_t day) {
  std::chrono::year_month_day date{as_days(day)};
  auto next = date.year() / date.month() / 1 + std::chrono::months{1};
  return std::chrono::sys_days{next}.time_since_epoch().count();
}

namespace {
// Days past this (year 29349) hold no runs: an open-ended period stops there.
constexpr std::int64_t kLastDay = 10'000'000;
}  // namespace

std::int64_t RollupSpan::end_day() const {
  switch (rollup_cut(cut).grain) {
    case RollupGrain::month:
      return next_month_day(last_bucket);
    case RollupGrain::total:
      return kLastDay;
    case RollupGrain::day:
      break;
  }
  return last_bucket + 1;
}

bool RollupRead::covers_day(std::int64_t day) const {
  return std::any_of(spans.begin(), spans.end(), [day](const RollupSpan& span) {
    return day >= span.first_day() && day < span.end_day();
  });
}

RollupRead plan_rollup_read(double since, double until, const RollupCut* month_cut,
                            const RollupCut& day_cut, const RollupCut* total_cut) {
  constexpr double kDay = 86400.0;
  RollupRead read;
  if (total_cut && since <= 0 && until / kDay >= static_cast<double>(kLastDay)) {
    read.spans.push_back({total_cut->id, 0, 0});
    return read;
  }
  std::int64_t first_day = since <= 0 ? 0 : static_cast<std::int64_t>(std::ceil(since / kDay));
  std::int64_t end_day = until / kDay >= static_cast<double>(kLastDay)
                             ? kLastDay
                             : static_cast<std::int64_t>(std::floor(until / kDay));
  if (first_day >= end_day) {
    read.run_ranges.emplace_back(since, until);  // within one day: the runs themselves
    return read;
  }
  if (since < static_cast<double>(first_day) * kDay) {
    read.run_ranges.emplace_back(since, static_cast<double>(first_day) * kDay);
  }
  if (end_day < kLastDay && static_cast<double>(end_day) * kDay < until) {
    read.run_ranges.emplace_back(static_cast<double>(end_day) * kDay, until);
  }
  auto days = [&](std::int64_t from, std::int64_t to) {  // [from, to)
    if (from < to) read.spans.push_back({day_cut.id, from, to - 1});
  };
  if (!month_cut) {
    days(first_day, end_day);
    return read;
  }
  std::int64_t first_month =
      month_start_day(first_day) == first_day ? first_day : next_month_day(first_day);
  std::int64_t end_month = month_start_day(end_day);
  if (first_month >= end_month) {
    days(first_day, end_day);
    return read;
  }
  days(first_day, first_month);
  read.spans.push_back({month_cut->id, first_month, month_start_day(end_month - 1)});
  days(end_month, end_day);
  return read;
}

}  // namespace spendcap
