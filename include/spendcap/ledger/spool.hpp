// The spool: final ledger rows that could not be written (ledger unreachable, locked too long) are
// kept on this host, one file per run, and replayed by the next spendcap command that opens the
// same ledger. Nothing is dropped: a spooled row stays until the ledger has accepted it, or is
// refused (below) and reported.
//
// A spool file is only a claim: whoever can write it could claim any spend for any run. So a row
// is replayed only when the ledger can check it: the run is in the ledger, was admitted by the
// replaying user (uid) on this host, is not running (lost, or reconciled), and the spend lies
// between its last heartbeat's spend and its ceiling; and the file is a regular file (not a
// symlink) of that user, mode 0600, in a directory of that user, mode 0700.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <sys/types.h>
#include "spendcap/base/duration.hpp"

#include "spendcap/ledger/ledger.hpp"

namespace spendcap {

// $SPENDCAP_SPOOL_DIR, else $XDG_STATE_HOME/spendcap/spool (~/.local/state/spendcap/spool); in a
// process of a shared runner, the runner's spool (below).
std::string spool_dir();

// A shared runner's process (issue 29, item 2): its rows go to the runner's spool `directory`
// (root:`group` 2770, made by the install; no user can reach a file in it), written by a child
// with the service user's own filesystem uid (this process's real uid), 0640, and replayed only
// as such a file; any of the runner's processes replays any run's row (the host and spend checks
// below still hold); the user's own spool is neither written nor read. Call before any thread
// starts.
void use_runner_spool(const std::string& directory, gid_t group);

// Writes the row atomically (temporary file + rename) and returns its path. Throws Error when even
// the spool cannot be written (the caller prints it: that row is then only in the status file).
// Outside a shared runner, when the spool cannot be written (a full filesystem, which it often
// shares with the ledger) and $XDG_RUNTIME_DIR is set, the row goes to
// $XDG_RUNTIME_DIR/spendcap/spool (fallback_spool_dir: another filesystem, kept until reboot),
// and `fallback_why` (when given) gets why the first spool failed. replay_spool reads both.
std::string spool_final(const std::string& ledger_url, const RunFinal& final,
                        std::string* fallback_why = nullptr);

// The second spool ("" when there is none: a shared runner, no $XDG_RUNTIME_DIR).
std::string fallback_spool_dir();

// Who replays: only rows of this user's runs on this host are replayed.
struct SpoolReplayer {
  std::int64_t uid = 0;
  std::string host;
  static SpoolReplayer current();  // getuid(), gethostname()
};

// How long a replay goes on trying rows once one failed: each failure against an unreachable
// ledger waits out the ledger's own retries (10 s), and a run's start replays the spool first
// (issue 33: a host with 5 spooled rows took 50 s and more to start each run while the server was
// away). Past it, the rows not tried yet wait for the next spendcap.
inline constexpr Nanos kSpoolReplayAfterFailure = std::chrono::seconds(1);

// Replays every spooled row meant for `ledger` (matched by url) and deletes it once accepted.
// Rows that fail again stay; so does a row whose run still looks running (its wrapper may be
// finishing it). A row that fails a check is reported on stderr (the file and why) and moved to
// <file>.bad for a person to look at. Once a row's ledger call has failed, the rows after it are
// tried only while `after_failure` has not passed since the replay began; the rest are left (and
// said). Returns how many were replayed.
int replay_spool(Ledger& ledger, const SpoolReplayer& replayer = SpoolReplayer::current(),
                 Nanos after_failure = kSpoolReplayAfterFailure);

}  // namespace spendcap
