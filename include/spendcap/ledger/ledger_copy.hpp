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
};

// Copies every run, every budget and the active stop orders of `from` into `to`, in one write
// transaction of `to`; the usage rows follow from the runs. Refuses (Error, nothing copied) while
// `from` has unfinished runs (they would keep heartbeating `from`), when `to` already holds runs,
// and when the caller does not own `to`.
CopiedLedger copy_ledger(LedgerStore& from, LedgerStore& to);

}  // namespace spendcap
