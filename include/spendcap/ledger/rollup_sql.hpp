// The rollups' SQL (rollup.hpp), written once for both stores: the tables, what each finished run
// adds to a cell, the triggers' statements that keep the cells, the backfill, and the read. The
// two dialects differ only in column types, the month of a day, and the two-argument min/max.
#pragma once

#include <string>
#include <vector>

#include "spendcap/ledger/rollup.hpp"

namespace spendcap::rollup_sql {

enum class Dialect { sqlite, postgres };

// CREATE TABLE rollups and rollup_metrics.
std::string create_tables(Dialect dialect);

// The statements that take the row `row` ("NEW", "OLD", or a table alias) out of (sign -1) or into
// (sign +1) its cells, each ending with ";", each changing nothing unless the row is finished.
// Metric ranges only grow: `sign` -1 leaves them.
std::string move_run(Dialect dialect, const std::string& row, int sign);

// SQLite's three triggers on runs of schema v14 (insert, update, delete), built on move_run: the
// migration's text, never changed. v15 replaced them (sqlite_journal): SQLite compiles every
// trigger of a table into each statement that writes it, and these, 128 KB of SQL, were compiled
// into every admission, heartbeat and final row, and parsed at every open.
std::string sqlite_v14_triggers();

// SQLite's v15: drops v14's triggers, creates the journal (a finished run's row as it entered or
// left the runs table, with sign +1 or -1) and sqlite_journal_triggers(), which fill it.
std::string sqlite_journal();
std::string sqlite_journal_triggers();

// The statements that add the journal's rows to the rollups (the cells, the metrics' ranges) and
// empty it (three, in this order): the store runs them
// before each write transaction commits (so the journal is empty between transactions, unless
// a writer other than spendcap left rows: the reads below add those).
std::vector<std::string> sqlite_fold();

// As select_cells and select_metrics, with the journal's rows not yet folded added in.
std::string sqlite_select_cells_and_pending(bool team, bool experiment);
std::string sqlite_select_metrics_and_pending(bool team, bool experiment);

// Empties the rollups and fills them from the runs (the migration's backfill, and
// rebuild_aggregates).
std::string rebuild(Dialect dialect);

// The cells that differ from what rebuild() would store: the key's eight columns, then runs and
// spend expected and stored (verify_aggregates); on SQLite, stored includes the journal.
std::string differences(Dialect dialect);

// The cells of a span: parameters cut, first bucket, last bucket, then the team and the
// experiment when `team` / `experiment` (placeholders "?1".. or "$1".. by dialect).
std::string select_cells(Dialect dialect, bool team, bool experiment);
std::string select_metrics(Dialect dialect, bool team, bool experiment);
// The columns select_cells returns, in order, after the key's eight (cut, bucket, team,
// experiment, project, user_name, host, pricing).
inline constexpr int kKeyColumns = 8;

}  // namespace spendcap::rollup_sql
