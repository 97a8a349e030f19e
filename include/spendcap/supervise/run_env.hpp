// Who and what a run is: its id, the user and host, tags from the scheduler it runs under (Slurm,
// Kubernetes), the GPU count the environment gives it, and the environment the command gets:
// the caller's, plus SPENDCAP_RUN_ID, _TEAM, _EXPERIMENT, _PROJECT, _BUDGET_USD,
// _CHECKPOINT_SIGNAL, _CHECKPOINT_DONE, _PROGRESS, minus the webhook secrets the policy names.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/environment.hpp"

namespace spendcap {

// A random UUID v4 (getrandom).
std::string new_run_id();

std::string host_name();
// The login name of the real user (getpwuid), or the uid as text.
std::string user_name();

// A stable hex fingerprint of team + experiment + command, for the crash-loop guard.
std::string command_fingerprint(const std::string& team, const std::string& experiment,
                                const std::vector<std::string>& command);

// Slurm and Kubernetes identifiers present in `env`, as tags: slurm_job_id, slurm_array_job_id,
// slurm_array_task_id, slurm_job_name, slurm_partition, slurm_account, slurm_cluster, k8s_pod,
// k8s_namespace, k8s_node.
std::map<std::string, std::string> scheduler_tags(const Environment& env);

// The experiment tracker's run id the job will log to, from `env` at launch: MLFLOW_RUN_ID
// ("mlflow:<id>"), WANDB_RUN_ID ("wandb:<id>"), NEPTUNE_CUSTOM_RUN_ID ("neptune:<id>"),
// CLEARML_TASK_ID ("clearml:<id>"), COMET_EXPERIMENT_KEY ("comet:<id>"); several joined by ",".
// nullopt when none is set (or none is a valid id: guards/progress.hpp's tracker_label).
std::optional<std::string> tracker_from_environment(const Environment& env);

// The number of GPUs the environment gives the job: CUDA_VISIBLE_DEVICES, else SLURM_GPUS_ON_NODE,
// else SLURM_JOB_GPUS (a list). nullopt when none of them is set.
std::optional<int> gpus_from_environment(const Environment& env);

struct JobIdentity {
  std::string run_id, team, experiment, project;
  std::string budget_usd;         // "" when the run has no budget of its own
  std::string checkpoint_signal;  // "SIGUSR1" or "none"
  std::string checkpoint_done;    // the file the job may create when its checkpoint is written
  std::string progress;           // the file the job may append progress lines to (guard_part.hpp)
};

// KEY=VALUE entries for the command: `env` with the SPENDCAP_* variables set and `secret_names`
// removed.
std::vector<std::string> job_environment(const Environment& env, const JobIdentity& identity,
                                         const std::vector<std::string>& secret_names);

}  // namespace spendcap
