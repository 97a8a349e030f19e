// The outcome of one `spendcap run`: what --status-file receives (JSON) and what the last line and
// the ledger's final row say. `stopped_by_spendcap` and `reason` make a budget stop distinguishable
// from a command that itself exited 124.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "spendcap/base/money.hpp"
#include "spendcap/guards/progress.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/notifier.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/gpu_sampler.hpp"

namespace spendcap {

struct RunOutcome {
  std::string run_id;
  RunStatus status = RunStatus::succeeded;  // succeeded, failed, killed, refused
  std::string reason = "exited";  // "exited", "budget:run", "stop-order", "signal:SIGTERM", ...
  bool stopped_by_spendcap = false;
  int exit_code = 0;        // spendcap's own exit status
  int spendcap_signal = 0;  // the signal to spendcap that stopped the run
  // Not in the JSON: the signal spendcap dies by at the end (spendcap_signal, or the SIGINT or
  // SIGQUIT of a Ctrl-C that ended the job on the terminal: the calling shell must see it).
  int reraise_signal = 0;
  std::optional<int> command_exit_code;  // the main process's exit code, when it exited
  std::optional<int> command_signal;     // the signal that ended the main process
  std::string currency = "USD";
  Money spend;
  Money ceiling;
  std::optional<Money> budget;  // the run's own budget, when it has one
  Money rate_per_hour;
  double elapsed_seconds = 0;  // launch until the tree was empty
  // The kill path, when it ran.
  std::optional<double> tripped_after_seconds;  // since launch
  int checkpoint_signalled = 0;                 // processes that got the checkpoint signal
  bool grace_skipped = false;                   // nobody catches the checkpoint signal
  std::string checkpoint_signal;                // its name ("SIGUSR1", "none"), once tripped
  std::optional<double> checkpoint_written_after_seconds;  // since launch; none: not written
  std::optional<double> trip_to_empty_seconds;  // the trip until the last process was reaped
  std::string message;                          // refusals and failures: why
  std::string tree_tracking;  // "cgroup" (the run's own cgroup) or "parentage" (the fallback)
  std::string isolation;      // "pid" (the guard is the init of a PID namespace) or "none"
  // What the run's GPUs did; none: the run never launched.
  std::optional<GpuReport> gpu;
  std::optional<ProgressState> progress;  // what the progress file said, when it said anything
  // The tracker id the progress file named, for the run's tag `tracker` in the final row and the
  // end webhooks (guard_part.hpp's progress_tracker); none: none named, or tagged at admission.
  std::optional<std::string> tracker;
  std::string billing = "allocated";  // or "measured": the GPU part by busy GPU time
  // --checkpoint-dir: its storage spend (part of `spend`) and peak size; none: not measured.
  std::optional<Money> storage_spend;
  std::optional<double> storage_peak_gb;
  // A multi-node run: the node whose trip stopped the run, and why ("node-a (runaway:stall)");
  // "" for a single-node run, or one that no node's trip stopped.
  std::string first_trip;
};

// How the run ended, as the supervisor saw it when the tree was empty.
struct RunEnd {
  bool guard_lost = false;     // the guard died before the tree was empty
  std::optional<Trip> trip;    // the trip that stopped the run
  bool launch_failed = false;  // the guard could not fork the command (no exit status)
  bool main_exited = false;    // the guard reported the main process's exit
  int main_status = 0;         // its wait status
  bool gave_terminal = false;  // the command's group had the terminal
};

// The outcome's status, reason, exit code and signals, from how the run ended.
void settle_end(RunOutcome& outcome, const RunEnd& end);

// The run's end, for the webhooks: killed (lost, the guard gone; preempted), else finished; and an
// overrun besides, when the spend passed a ceiling. `elapsed`: launch until the tree was empty.
std::vector<RunEvent> end_events(const RunOutcome& outcome, const RunEnd& end, Nanos elapsed);

nlohmann::json to_json(const RunOutcome& outcome);

// Writes `outcome` to `path` atomically (a temporary file in the same directory, then rename).
// Throws Error naming the path.
void write_status_file(const std::string& path, const RunOutcome& outcome);

}  // namespace spendcap
