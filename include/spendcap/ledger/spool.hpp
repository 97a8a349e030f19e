// The spool: final ledger rows that could not be written (ledger unreachable, locked too long) are
// kept on this host, one file per run, and replayed by the next spendcap command that opens the
// same ledger. Nothing is dropped: a spooled row stays until the ledger has accepted it.
#pragma once

#include <string>

#include "spendcap/ledger/ledger.hpp"

namespace spendcap {

// $SPENDCAP_SPOOL_DIR, else $XDG_STATE_HOME/spendcap/spool (~/.local/state/spendcap/spool).
std::string spool_dir();

// Writes the row atomically (temporary file + rename) and returns its path. Throws Error when even
// the spool cannot be written (the caller prints it: that row is then only in the status file).
std::string spool_final(const std::string& ledger_url, const RunFinal& final);

// Replays every spooled row meant for `ledger` (matched by url) and deletes it once accepted.
// Rows that fail again stay. Returns how many were replayed.
int replay_spool(Ledger& ledger);

}  // namespace spendcap
