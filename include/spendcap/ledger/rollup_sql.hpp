// The rollups' SQL (rollup.hpp), written once for both stores: the tables, what each finished run
// adds to a cell, the triggers' statements that keep the cells, the backfill, and the read. The
// two dialects differ only in column types, the month of a day, the two-argument min/max, and the
// rounding of waste (waste.hpp).
//
// What a run adds to its cell has changed once: v26 (issue 40 item 7) counts as waste only the
// spend after the checkpoint of a killed run that wrote one (waste.hpp). A migration's text is
// built with its own version's rules and never changes (v14's and v15's functions below, the
// overloads without a Rules); what the stores run now (PostgreSQL's trigger function, SQLite's
// journal fold, the reads, verify, rebuild_aggregates) uses kLatestRules. A later change of the
// rules is a new Rules value and a migration that rebuilds the cells with it.
#pragma once

#include <string>
#include <vector>

#include "spendcap/ledger/rollup.hpp"

namespace spendcap::rollup_sql {

enum class Dialect { sqlite, postgres };
enum class Rules { v14, v26 };
inline constexpr Rules kLatestRules = Rules::v26;

// CREATE TABLE rollups and rollup_metrics.
std::string create_tables(Dialect dialect);

// The statements that take the row `row` ("NEW", "OLD", or a table alias) out of (sign -1) or into
// (sign +1) its cells, each ending with ";", each changing nothing unless the row is finished.
// Metric ranges only grow: `sign` -1 leaves them. kLatestRules': PostgreSQL's trigger function
// (postgres_schema.cpp's routines(), reinstalled after every migration).
std::string move_run(Dialect dialect, const std::string& row, int sign);

// SQLite's three triggers on runs of schema v14 (insert, update, delete), built on move_run with
// v14's rules: the migration's text, never changed. v15 replaced them (sqlite_journal): SQLite
// compiles every trigger of a table into each statement that writes it, and these, 128 KB of SQL,
// were compiled into every admission, heartbeat and final row, and parsed at every open.
std::string sqlite_v14_triggers();

// SQLite's v15: drops v14's triggers, creates the journal (a finished run's row as it entered or
// left the runs table, with sign +1 or -1) and sqlite_journal_triggers(), which fill it (v15's,
// never changed; with `rules`, the triggers whose journal rows carry what those rules read).
std::string sqlite_journal();
std::string sqlite_journal_triggers();
std::string sqlite_journal_triggers(Rules rules);

// SQLite's v26: the journal keeps a run's elapsed_seconds and checkpoint_written_seconds too (its
// triggers replaced), and the cells are rebuilt with v26's waste (rebuild(sqlite, v26)).
// PostgreSQL's v26 is rebuild(postgres, v26); routines() installs its trigger function.
std::string sqlite_journal_v26();

// The statements that add the journal's rows to the rollups (the cells, the metrics' ranges) and
// empty it (three, in this order; kLatestRules, over v26's journal): the store runs them
// before each write transaction commits (so the journal is empty between transactions, unless
// a writer other than spendcap left rows: the reads below add those).
std::vector<std::string> sqlite_fold();

// As select_cells and select_metrics, with the journal's rows not yet folded added in.
std::string sqlite_select_cells_and_pending(bool team, bool experiment);
std::string sqlite_select_metrics_and_pending(bool team, bool experiment);

// Empties the rollups and fills them from the runs: with v14's rules (v14's backfill, never
// changed), or with `rules` (v26's recompute; rebuild_aggregates with kLatestRules).
std::string rebuild(Dialect dialect);
std::string rebuild(Dialect dialect, Rules rules);

// The cells that differ from what rebuild(dialect, kLatestRules) would store: the key's eight
// columns, then runs and spend expected and stored (verify_aggregates, which compares every
// column, waste included); on SQLite, stored includes the journal.
std::string differences(Dialect dialect);

// The cells of a span: parameters cut, first bucket, last bucket, then the team and the
// experiment when `team` / `experiment` (placeholders "?1".. or "$1".. by dialect).
std::string select_cells(Dialect dialect, bool team, bool experiment);
std::string select_metrics(Dialect dialect, bool team, bool experiment);
// The columns select_cells returns, in order, after the key's eight (cut, bucket, team,
// experiment, project, user_name, host, pricing).
inline constexpr int kKeyColumns = 8;

}  // namespace spendcap::rollup_sql
