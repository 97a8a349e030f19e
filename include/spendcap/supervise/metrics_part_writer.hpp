// Metrics on a shared runner (issue 19, item 4). On the setgid install the metrics directory is
// root:spendcap 2770: only the runner's group writes it, so users can neither pre-create nor
// replace the team files, and whichever user's run ends updates them (files 0660, group spendcap).
// spendcap drops that group for good once the ledger is open (run/ledger_group.hpp), so the files
// are written by a small writer process forked before that, while nothing of the user's run exists
// yet and spendcap has one thread: it keeps the group, takes no input but the supervisor's
// messages over a socket pair (name and text of a run file, a team update, a team gauge refresh),
// writes only its own run's file and its own team's summary and lock file (MetricsBinding) in that
// one directory, and exits when the socket
// closes. It is double-forked, so it is not a child of the supervisor (a subreaper that waits for
// its children to be gone when the guard is lost), and it ignores the terminal's signals (a Ctrl-C
// must not lose the final team update). Not dumpable (a setgid process), so the user cannot reach
// into it; a user may SIGKILL it (their uid), which stops the metrics, never the enforcement.
#pragma once

#include <memory>
#include <string>

#include "spendcap/supervise/metrics_part.hpp"

namespace spendcap {

// What one writer may write: it is bound to the run it was started for. The run's own file
// (run_metrics_file(run_id)) and its team's summary in the policy's currency, counted as finished
// once; a message for another run's file, another team or currency is refused (said once on
// stderr), so a supervisor can write only its own run's and team's figures.
struct MetricsBinding {
  std::string run_id, team, currency;
};

// Starts the writer for `dir` with the runner's (saved) group, bound to `binding`. Throws Error
// (125) naming the directory when it is not a directory of the runner's group that only that
// group writes.
std::shared_ptr<MetricsSink> start_runner_metrics_writer(const std::string& dir,
                                                         const MetricsBinding& binding);

}  // namespace spendcap
