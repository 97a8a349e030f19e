// Waste: the part of a finished run's spend that bought nothing kept. The one rule behind
// `report`'s waste and waste share (every format) and the rollups' waste_micros on both stores
// (rollup_sql.cpp builds the cells' column from wasted_spend_sql), so that a report read from
// the rollups and one read from the runs agree to the micro-unit:
//
//   - failed, lost, preempted: the whole spend (a preempted run is resumed, if ever, from the
//     checkpoint it had before);
//   - killed: the whole spend, unless spendcap stopped it (a budget or guard trip, a stop order,
//     a signal) and the job wrote its checkpoint in the grace (issue 40 item 7): the work up to
//     the checkpoint is kept, so only the spend after it is waste, spend x (elapsed - written) /
//     elapsed, rounded down to the micro-unit and within [0, spend]. `written` is the ledger's
//     runs.checkpoint_written_seconds (seconds after launch; RunCheckpoint::written_seconds), and
//     `elapsed` its elapsed_seconds (launch until the tree was empty). A run without an elapsed
//     time above 0 counts whole; a checkpoint written at or after the end, nothing.
//   - succeeded, refused, running: nothing.
#pragma once

#include <optional>
#include <string>

#include "spendcap/base/money.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/rollup_sql.hpp"

namespace spendcap {

Money wasted_spend(RunStatus status, Money spend, std::optional<double> elapsed_seconds,
                   std::optional<double> checkpoint_written_seconds);

namespace rollup_sql {
// The same rule as an SQL expression over the run row R. (its status, spend_micros,
// elapsed_seconds and checkpoint_written_seconds): micro-units, an integer, the same value as
// wasted_spend in both dialects (the same double arithmetic, rounded down).
std::string wasted_spend_sql(Dialect dialect);
}  // namespace rollup_sql

}  // namespace spendcap
