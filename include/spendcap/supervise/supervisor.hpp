// The supervisor: the event loop of one run (Boost.Asio, one thread). It is a loop over parts
// (run_part.hpp): it reads the guard's reports through a GuardLink (guard_link.hpp), and tells
// every part, in order, that the command started, that the run shuts down, that the tree is
// empty. Its own are the trip (one, whatever the cause), signals to spendcap, the reaper, and the
// run's outcome; the parts are the heartbeat and grants (heartbeat_part.hpp), job control
// (job_control.hpp), the checkpoint watch (checkpoint_watch.hpp), the thresholds, the title, the
// GPU sampler, the runaway guards, metrics, storage, the preemption notice and signal forwarding.
//
//   trip (budget, stop order, ledger unreachable, runaway, signal, preemption)
//     -> checkpoint signal to the processes that catch it (none: the grace is skipped)
//     -> grace, ended early by the main process exiting or $SPENDCAP_CHECKPOINT_DONE appearing
//     -> SIGTERM + SIGCONT to the tree -> kill-after -> SIGKILL, repeated until the guard reports
//        the tree empty.
//
// The budget trip is computed (spend + reserve reaches the ceiling) and armed as a timer on the
// monotonic clock; a late ledger answer never cancels it. When the main process ends by itself,
// whatever it left behind gets SIGTERM, kill-after, SIGKILL. The kill path never throws and never
// waits on the ledger: ledger calls run on AsyncLedger's worker thread.
#pragma once

#include <signal.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/signals.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/notifier.hpp"
#include "spendcap/process/process_tree.hpp"
#include "spendcap/process/tree_guard.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/gpu_sampler.hpp"
#include "spendcap/supervise/guard_link.hpp"
#include "spendcap/supervise/guard_part.hpp"
#include "spendcap/supervise/heartbeat_part.hpp"
#include "spendcap/supervise/job_control.hpp"
#include "spendcap/supervise/kill_path.hpp"
#include "spendcap/supervise/metrics_part.hpp"
#include "spendcap/supervise/outcome.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/run_terms.hpp"
#include "spendcap/supervise/storage_part.hpp"

namespace spendcap {

// The stop signals (base/signals.hpp's kStopSignals) stay blocked from the start of `spendcap run`
// until the event loop handles them, and again while the final row is written, so none is lost and
// none kills spendcap half-way (an admitted run never launched, a final row never written).
void block_stop_signals(bool block);
// The first stop signal pending (blocked and not yet handled), or 0; it is consumed.
int take_pending_stop_signal();

// What the supervisor does about the other signals: SIGTSTP and SIGCONT are passed on to the tree
// (`kill -TSTP spendcap` pauses the job, and spendcap goes on accruing and enforcing); SIGPIPE (a
// closed stderr), SIGTTOU and SIGTTIN (a terminal owned by the job), SIGUSR1, SIGUSR2 and SIGALRM
// are ignored, so none of them can stop or kill spendcap; once the job runs, SIGUSR1, SIGUSR2 and
// the --forward signals are passed on to the tree's catchers (signal_forward.hpp). Job control on
// a terminal: job_control.hpp.
inline constexpr int kIgnoredBySupervisor[] = {SIGPIPE, SIGTTOU, SIGTTIN,
                                               SIGUSR1, SIGUSR2, SIGALRM};

// What `spendcap run` decides for the supervisor: the run's terms and each part's own plan (the
// parts take only theirs), and what the supervisor itself uses.
struct SupervisorPlan : RunTerms, HeartbeatPlan, JobControlPlan, KillPlan {
  std::string label;  // "team demo, experiment quickstart" for the start line
  // For the start line: "pid namespace", or "none: the job can signal spendcap".
  std::string isolation;
  // Builds the tree rooted at `root`: the guard, or spendcap itself if the guard dies.
  std::function<std::unique_ptr<ProcessTree>(pid_t root)> make_tree;
  // A preemption notice (--spot-notice): its part; KillPlan::on_preemption holds the shutdown
  // times that fit the notice window. A SIGTERM to spendcap (the scheduler's preemption) also ends
  // the run as preempted.
  PreemptionPartFactory preemption_part;
  // Signals to spendcap passed on to the tree's catchers: SIGUSR1, SIGUSR2 and --forward.
  std::vector<int> forward_signals;
  // For the start line: the ledger in use (its URL or path).
  std::string ledger;
  // Webhook events (notify/): none when null. Outlives the supervisor.
  Notifier* notifier = nullptr;
  // How long before the kill deadline the guard's watchdog reads the ticks (its stale_after +
  // orphan_kill_after): ticks are sent only from then on. None: a tick every interval.
  std::optional<Nanos> guard_ticks_lead;
  GpuPlan gpu;          // GPU measurement and the idle guard
  GuardPlan guards;     // the runaway guards and the progress channel
  MetricsPlan metrics;  // --metrics-dir: the Prometheus textfiles
  // --checkpoint-dir: its storage, charged on top; rate_per_hour includes its maximum's share.
  StoragePlan storage;
};

class Supervisor {
 public:
  Supervisor(SupervisorPlan plan, GuardHandle guard, Reporter& reporter,
             std::shared_ptr<Ledger> ledger);
  // The same over seams, for unit tests: the guard behind `guard`, the terminal behind `terminal`.
  Supervisor(SupervisorPlan plan, std::unique_ptr<GuardLink> guard,
             std::unique_ptr<Terminal> terminal, Reporter& reporter,
             std::shared_ptr<Ledger> ledger);
  ~Supervisor();

  // Runs the event loop until every process of the tree is reaped.
  RunOutcome run();

  // Writes the final row through the ledger's worker, waiting at most `timeout`. Returns "" when
  // written, else why not (the caller spools the row). `outbox_delivered`: outbox entries this run
  // delivered that are still in the outbox, removed just before (their claims hold till then).
  std::string record_final(const RunFinal& final, Nanos timeout,
                           const std::vector<std::int64_t>& outbox_delivered = {});

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spendcap
