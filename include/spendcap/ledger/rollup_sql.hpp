// The rollups' SQL (rollup.hpp), written once for both stores: the tables, what each finished run
// adds to a cell, the triggers' statements that keep the cells, the backfill, and the read. The
// two dialects differ only in column types, the month of a day, and the two-argument min/max.
#pragma once

#include <string>

#include "spendcap/ledger/rollup.hpp"

namespace spendcap::rollup_sql {

enum class Dialect { sqlite, postgres };

// CREATE TABLE rollups and rollup_metrics.
std::string create_tables(Dialect dialect);

// The statements that take the row `row` ("NEW", "OLD", or a table alias) out of (sign -1) or into
// (sign +1) its cells, each ending with ";", each changing nothing unless the row is finished.
// Metric ranges only grow: `sign` -1 leaves them.
std::string move_run(Dialect dialect, const std::string& row, int sign);

// SQLite's three triggers on runs (insert, update, delete), built on move_run.
std::string sqlite_triggers();

// Empties the rollups and fills them from the runs (the migration's backfill, and
// rebuild_aggregates).
std::string rebuild(Dialect dialect);

// The cells that differ from what rebuild() would store: the key's eight columns, then runs and
// spend expected and stored (verify_aggregates).
std::string differences(Dialect dialect);

// The cells of a span: parameters cut, first bucket, last bucket, then the team and the
// experiment when `team` / `experiment` (placeholders "?" or "$1".. by dialect).
std::string select_cells(Dialect dialect, bool team, bool experiment);
std::string select_metrics(Dialect dialect, bool team, bool experiment);
// The columns select_cells returns, in order, after the key's eight (cut, bucket, team,
// experiment, project, user_name, host, pricing).
inline constexpr int kKeyColumns = 8;

}  // namespace spendcap::rollup_sql
