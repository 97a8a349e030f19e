// A run's settings (`spendcap run`'s first step): the policy layers, then the flags, which under a
// locked policy may only tighten; the burn rate from --rate or the policy's prices; and the checks
// made before anything is written to the ledger (status file, metrics directory, checkpoint
// storage). Every error names the flag the user typed.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/integrations/spot_notice.hpp"
#include "spendcap/ledger/run_identity.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/run/test_switches.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/storage_part.hpp"

namespace spendcap {

struct RunRequest;  // run/request.hpp: the flags as typed, read here only

// --estimate-steps N --step-time T, parsed (run/estimate_fit.hpp checks them against the budgets).
struct StepEstimateFlags {
  double steps = 0;
  double step_seconds = 0;
  std::string steps_text;  // as typed, for the refusal: "--estimate-steps 50k"
};

// Everything a run needs, resolved and validated: the steps after this one (admission,
// estimate_fit, execution, summary) read these, never the flags as typed.
struct RunSettings {
  LoadedPolicy loaded;
  Money rate_per_hour;
  std::string rate_source;      // "--rate" or "2 x a100-80gb on_demand"
  std::optional<Money> budget;  // --budget
  ShutdownTimes on_trip, on_signal;
  int checkpoint_signal = 0;
  std::optional<Isolation> isolation;  // unset: pid where the kernel allows it
  Mode mode = Mode::enforce;
  Nanos interval{}, sync{}, claim_horizon{};
  std::vector<double> warn_at;
  std::string ledger_url;
  // Which run, whose, where, its tags and command: what every record of the run takes whole.
  RunIdentity identity;
  std::string node;  // a multi-node run (--run-id): this node's name; its id is identity.job_key
  std::optional<SpotNotice> spot_notice;   // --spot-notice
  ShutdownTimes on_preemption;             // its times, fitting the notice window
  Nanos exit_window = kDefaultExitWindow;  // --exit-window
  std::vector<int> forward_signals;        // --forward, beyond SIGUSR1 and SIGUSR2
  std::vector<std::string> webhook_urls;   // --webhook
  // The part of the burn rate that buys GPUs (measured billing charges it by busy GPU time):
  // instances x gpus x the GPU price with --gpu; the whole rate with --rate or --instance alone.
  Money gpu_rate_per_hour;
  std::optional<std::string> status_file;     // --status-file
  std::optional<StepEstimateFlags> estimate;  // --estimate-steps with --step-time
  bool verbose = false;                       // --verbose: the start line in full
  bool require_fit = false;                   // --require-fit
  bool retry_backoff = false;                 // --retry-backoff
  bool clear_crash_loop = false;              // --clear-crash-loop
  // Where each term came from: "team" -> "--team", "SPENDCAP_TEAM" or "./spendcap.json"
  // (run_defaults.hpp); what is absent is a built-in default. --dry-run prints them.
  std::map<std::string, std::string> term_sources;
};

// The settings, with the run's identity complete (a new run id). Throws Error (125) naming the
// flag or the policy path at fault.
RunSettings resolve_run_settings(const RunRequest& request, const Environment& env,
                                 const PolicySearch& search);

// --status-file is checked before anything runs, so that a path it cannot write fails the run at
// once (125) instead of after the job.
void check_status_file_path(const std::string& path);

// --checkpoint-dir and --checkpoint-max-gb, checked before anything runs: the maximum's storage
// price joins the burn rate (`settings` is updated), so reserves, claims, ceilings and the trip
// count on it. An empty plan without the flags.
StoragePlan checkpoint_storage(const RunRequest& request, RunSettings& settings);

// --metrics-dir (or metrics_dir) is checked before anything runs: an existing directory spendcap
// can write in.
void check_metrics_dir(const std::string& dir);

// On a shared runner (the setgid install, the privileged runner) the metrics directory in force
// must be the locked policy's own metrics_dir: its writer holds the ledger's group, and a
// directory a user names (the ledger's own, say) would get files of the runner's. Throws Error.
void require_runner_metrics_dir(const LoadedPolicy& loaded);

}  // namespace spendcap
