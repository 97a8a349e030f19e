// Copying a ledger into another (`spendcap ledger copy FROM TO`): moving a team from SQLite on one
// host to PostgreSQL for many, or back, with its history. Written over the store seam
// (ledger_store.hpp), so any pair of backends works.
#pragma once

#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap {

struct CopiedLedger {
  int runs = 0, budgets = 0;
  int stop_orders = 0;          // active: on a team, experiment, project, user or job
  int finished_run_orders = 0;  // on one run, which has finished (as `stop --list` leaves out)
  // refused_counts rows written (one per user and minute) and the refused runs they count.
  int refused_counts = 0;
  std::int64_t refused_runs = 0;
};

// Copies every run, every budget, the active stop orders and the refused-run counts of `from` into
// `to`, in one write transaction of `to`; the usage rows follow from the runs. The counts are
// summed per user and minute (PostgreSQL's rows of several login roles for one user fold into one:
// they counted different refusals) and merged into a count `to` has for that key by the larger of
// each figure (StoreTxn::merge_refused_count), so a count is never doubled. Refuses (Error, nothing
// copied) while `from` has unfinished runs (they would keep heartbeating `from`), when `to` already
// holds runs, and when the caller does not own `to`.
CopiedLedger copy_ledger(LedgerStore& from, LedgerStore& to);

}  // namespace spendcap
