// Waste, in C++ and as SQL. Contract in waste.hpp.
#include "spendcap/ledger/waste.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace spendcap {

Money wasted_spend(RunStatus status, Money spend, std::optional<double> elapsed_seconds,
                   std::optional<double> checkpoint_written_seconds) {
  switch (status) {
    case RunStatus::failed:
    case RunStatus::lost:
    case RunStatus::preempted:
      return spend;
    case RunStatus::killed:
      break;
    case RunStatus::succeeded:
    case RunStatus::refused:
    case RunStatus::running:
      return Money{};
  }
  // As wasted_spend_sql's CASE, branch for branch (a NaN fails every comparison: whole spend).
  if (!checkpoint_written_seconds || !elapsed_seconds || !(*elapsed_seconds > 0) ||
      !(*checkpoint_written_seconds > 0)) {
    return spend;
  }
  double elapsed = *elapsed_seconds, written = *checkpoint_written_seconds;
  if (written >= elapsed) return Money{};
  double after = std::floor(static_cast<double>(spend.micros) * (elapsed - written) / elapsed);
  return Money{std::max<std::int64_t>(0, std::min(spend.micros, static_cast<std::int64_t>(after)))};
}

namespace rollup_sql {

std::string wasted_spend_sql(Dialect dialect) {
  bool sqlite = dialect == Dialect::sqlite;
  // The spend after the checkpoint: a double in both dialects (spend_micros converted, then the
  // same two operations), rounded down (SQLite's CAST truncates, which for a value >= 0 is
  // floor; PostgreSQL's CAST rounds, hence floor first), then kept within [0, spend].
  std::string after =
      std::string(sqlite ? "CAST(" : "CAST(floor(") +
      "R.spend_micros * (R.elapsed_seconds - R.checkpoint_written_seconds) / R.elapsed_seconds" +
      (sqlite ? " AS INTEGER)" : ") AS BIGINT)");
  std::string kept = sqlite ? "max(0, min(R.spend_micros, " + after + "))"
                            : "GREATEST(0, LEAST(R.spend_micros, " + after + "))";
  return "CASE WHEN R.status IN ('failed', 'lost', 'preempted') THEN R.spend_micros "
         "WHEN R.status <> 'killed' THEN 0 "
         "WHEN R.checkpoint_written_seconds IS NULL OR R.elapsed_seconds IS NULL "
         "OR NOT (R.elapsed_seconds > 0) OR NOT (R.checkpoint_written_seconds > 0) "
         "THEN R.spend_micros "
         "WHEN R.checkpoint_written_seconds >= R.elapsed_seconds THEN 0 ELSE " +
         kept + " END";
}

}  // namespace rollup_sql

}  // namespace spendcap
