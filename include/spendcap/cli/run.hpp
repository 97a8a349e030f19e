// `spendcap run`: resolves the settings (policy layers, then flags, which under a locked policy may
// only tighten), finds the command, asks the ledger for admission, starts the guard, supervises the
// run, records its final row (or spools it) and exits with the outcome's status. The steps read in
// order in run_command(); each is a function here.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/integrations/spot_notice.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/process/launcher.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

// The flags of `spendcap run`, as typed (validated in resolve_run_settings, so every error names
// the flag and its value).
struct RunRequest {
  std::string team, experiment, project, job_key;
  std::vector<std::string> tags;  // KEY=VALUE
  std::optional<std::string> rate, budget;
  std::optional<std::string> gpu, gpus, instance, instances, pricing, mode;
  std::optional<std::string> checkpoint_signal, grace, kill_after, interval, sync, claim_horizon;
  std::optional<std::string> status_file, policy, ledger;
  std::optional<std::string> isolation;  // pid or none
  bool quiet = false;
  bool title = false;
  std::vector<std::string> command;
  std::optional<std::string> spot_notice, spot_notice_url;  // aws|gcp|URL; the metadata base URL
  std::optional<std::string> log;          // --log FILE: spendcap's own lines go there
  std::optional<std::string> exit_window;  // --exit-window DURATION
  std::vector<std::string> forward;        // --forward SIG (repeatable)
  std::vector<std::string> webhook_envs;   // --webhook-env NAME: a webhook added to the policy's
  std::vector<std::string> webhook_urls;   // --webhook URL (visible to any user's ps)
  // --estimate-steps N --step-time T: refused when the estimate does not fit (report_commands.hpp).
  std::optional<std::string> estimate_steps, step_time;
  // The runaway guards (README, "Runaway guards and the progress channel").
  std::optional<std::string> stall_after;  // sets guards.stall.after
  bool require_fit = false;                // stop a run whose projection exceeds its budget
  bool retry_backoff = false;              // wait out recent failures instead of starting at once
  std::optional<std::string> metrics_dir;  // --metrics-dir: sets metrics_dir
  // --run-id ID|slurm: join a multi-node run, one wrapper per node (cli/multi_node.hpp).
  std::optional<std::string> run_id;
  std::optional<std::string> billing;  // --billing allocated|measured
  // Checkpoint storage (README, "Reports, estimates and FOCUS export"): both or neither.
  std::optional<std::string> checkpoint_dir, checkpoint_max_gb;
};

// Switches that exist for the test suite's negative controls only ($SPENDCAP_TEST_SWITCHES, comma
// separated). Refused under a locked policy: they would let a job escape its tree or its budget.
struct TestSwitches {
  bool no_cgroup = false;             // follow the tree by parentage only (the fallback)
  bool no_subreaper = false;          // neither the guard nor spendcap is a subreaper
  bool no_ceilings = false;           // grants ignore other runs: shared budgets overshoot
  bool no_proc_connector = false;     // the respawn-loop guard's fallback detector
  bool storage_every_second = false;  // --checkpoint-dir sampled every second, not every minute
  bool any() const {
    return no_cgroup || no_subreaper || no_ceilings || no_proc_connector || storage_every_second;
  }
  static TestSwitches from(const Environment& env);
};

// Everything a run needs, resolved and validated.
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
  std::map<std::string, std::string> tags;
  std::string team, experiment, project, job_key, user, host;
  std::string node;  // a multi-node run (--run-id): this node's name; its id is job_key
  std::optional<SpotNotice> spot_notice;   // --spot-notice
  ShutdownTimes on_preemption;             // its times, fitting the notice window
  Nanos exit_window = kDefaultExitWindow;  // --exit-window
  std::vector<int> forward_signals;        // --forward, beyond SIGUSR1 and SIGUSR2
  std::vector<std::string> webhook_urls;   // --webhook
  // The part of the burn rate that buys GPUs (measured billing charges it by busy GPU time):
  // instances x gpus x the GPU price with --gpu; the whole rate with --rate or --instance alone.
  Money gpu_rate_per_hour;
};

RunSettings resolve_run_settings(const RunRequest& request, const Environment& env,
                                 const PolicySearch& search);

// Runs the command under spendcap. Returns the exit status; when a signal to spendcap stopped the
// run, re-raises it instead of returning.
int run_command(const RunRequest& request, const Inherited& inherited);

// --status-file for a run that failed before its job ran (125, 126, 127; `error` says why); what is
// not known is null. A file it cannot write is said on stderr.
void write_error_status(const std::string& path, const Error& error);

}  // namespace spendcap
