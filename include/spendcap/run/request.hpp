// What `spendcap run` was asked: its flags as typed (cli fills them; run/settings.hpp validates
// them, so every error names the flag and its value), and the test suite's switches.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/environment.hpp"
#include "spendcap/run/test_switches.hpp"

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
  bool verbose = false;  // the start line in full, and which detectors the guards use
  bool title = false;
  bool dry_run = false;  // print the terms and the admission verdict; start nothing (dry_run.hpp)
  std::vector<std::string> command;
  std::optional<std::string> spot_notice, spot_notice_url;  // aws|gcp|URL; the metadata base URL
  std::optional<std::string> log;          // --log FILE: spendcap's own lines go there
  std::optional<std::string> exit_window;  // --exit-window DURATION
  std::vector<std::string> forward;        // --forward SIG (repeatable)
  std::vector<std::string> webhook_envs;   // --webhook-env NAME: a webhook added to the policy's
  std::vector<std::string> webhook_urls;   // --webhook URL (visible to any user's ps)
  // --estimate-steps N --step-time T: refused when the estimate does not fit (estimate_fit.hpp).
  std::optional<std::string> estimate_steps, step_time;
  // The runaway guards (README, "Runaway guards and the progress channel").
  std::optional<std::string> stall_after;  // sets guards.stall.after
  bool require_fit = false;                // stop a run whose projection exceeds its budget
  bool retry_backoff = false;              // wait out recent failures instead of starting at once
  bool clear_crash_loop = false;           // start although the crash-loop guard would refuse
  std::optional<std::string> metrics_dir;  // --metrics-dir: sets metrics_dir
  // --run-id ID|slurm: join a multi-node run, one wrapper per node (run/multi_node.hpp).
  std::optional<std::string> run_id;
  std::optional<std::string> billing;  // --billing allocated|measured
  // Checkpoint storage (README, "Reports, estimates and FOCUS export"): both or neither.
  std::optional<std::string> checkpoint_dir, checkpoint_max_gb;
};

}  // namespace spendcap
