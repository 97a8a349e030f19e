// The supervisor: the event loop of one run (Boost.Asio, one thread), tying together the guard's
// reports, the meter, the ledger's grants, the trip timer, signals to spendcap and the kill path:
//
//   trip (budget, stop order, ledger unreachable, signal)
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
#include "spendcap/supervise/guard_part.hpp"
#include "spendcap/supervise/metrics_part.hpp"
#include "spendcap/supervise/outcome.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/storage_part.hpp"

namespace boost::asio {
class io_context;
}

namespace spendcap {

// Starts the run's preemption-notice part (--spot-notice) on the supervisor's loop; the part calls
// `preempt(reason)` on that loop when the machine is being taken back.
using PreemptionPartFactory = std::function<std::unique_ptr<RunPart>(
    boost::asio::io_context& io, Reporter& reporter, std::function<void(std::string)> preempt)>;

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
// the --forward signals are passed on to the tree's catchers (signal_forward.hpp).
//
// Job control on a terminal: when the job has the terminal and Ctrl-Z stops it, spendcap stops
// itself too (SIGTSTP), so the shell prints "Stopped" and gets its prompt back; `fg` and `bg`
// resume both. Spend goes on while paused (the GPUs are still held), so the trip stays armed: a
// waker process SIGCONTs spendcap a heartbeat before the trip, and spendcap then enforces it in
// the background (the trip SIGCONTs the tree, as the kill path does, so the job can checkpoint).
inline constexpr int kIgnoredBySupervisor[] = {SIGPIPE, SIGTTOU, SIGTTIN,
                                               SIGUSR1, SIGUSR2, SIGALRM};

struct SupervisorPlan {
  std::string run_id;
  std::string label;  // "team demo, experiment quickstart" for the start line
  std::string currency = "USD";
  Money rate_per_hour;
  std::optional<Money> run_budget;  // the run's own budget (for its warnings), if it has one
  Grant grant;                      // the first grant, from admission
  ShutdownTimes on_trip;            // --grace, --kill-after
  ShutdownTimes on_signal;          // when SIGTERM/SIGINT/SIGHUP to spendcap starts the kill path
  int checkpoint_signal = SIGUSR1;  // 0 = none
  Mode mode = Mode::enforce;
  std::vector<double> warn_at = {0.5, 0.8, 0.95};
  Nanos sync = std::chrono::seconds(5);
  Nanos claim_horizon = std::chrono::minutes(5);
  Nanos interval = std::chrono::seconds(1);
  std::string checkpoint_done_path;  // $SPENDCAP_CHECKPOINT_DONE
  bool gave_terminal = false;        // the command's group was made the terminal's foreground
  // For the start line: "pid namespace", or "none: the job can signal spendcap".
  std::string isolation;
  // Builds the tree rooted at `root`: the guard, or spendcap itself if the guard dies.
  std::function<std::unique_ptr<ProcessTree>(pid_t root)> make_tree;
  // A preemption notice (--spot-notice): its part, and the shutdown times that fit the notice
  // window. A SIGTERM to spendcap (the scheduler's preemption) also ends the run as preempted.
  PreemptionPartFactory preemption_part;
  ShutdownTimes on_preemption;
  // After the checkpoint is written, how long the main process has to exit before SIGTERM.
  Nanos exit_window = kDefaultExitWindow;
  // Signals to spendcap passed on to the tree's catchers: SIGUSR1, SIGUSR2 and --forward.
  std::vector<int> forward_signals;
  // For the start line: the ledger in use (its URL or path).
  std::string ledger;
  // Webhook events (notify/): none when null. Outlives the supervisor.
  Notifier* notifier = nullptr;
  GpuPlan gpu;          // GPU measurement and the idle guard
  GuardPlan guards;     // the runaway guards and the progress channel
  MetricsPlan metrics;  // --metrics-dir: the Prometheus textfiles
  // --checkpoint-dir: its storage, charged on top; rate_per_hour includes its maximum's share.
  StoragePlan storage;
  // A multi-node run (--run-id): the id its nodes share (their job key) and this node's name.
  // Any trip of this node (budget, guard, spot notice, signal) places a stop order on job:ID, and
  // the other nodes take it at their next heartbeat: the run stops as one.
  std::string multi_node_run_id, node;
};

class Supervisor {
 public:
  Supervisor(SupervisorPlan plan, GuardHandle guard, Reporter& reporter,
             std::shared_ptr<Ledger> ledger);
  ~Supervisor();

  // Runs the event loop until every process of the tree is reaped.
  RunOutcome run();

  // Writes the final row through the ledger's worker, waiting at most `timeout`. Returns "" when
  // written, else why not (the caller spools the row).
  std::string record_final(const RunFinal& final, Nanos timeout);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spendcap
