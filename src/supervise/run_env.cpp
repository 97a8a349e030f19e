#include "spendcap/supervise/run_env.hpp"

#include "spendcap/base/acting_user.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/guards/progress.hpp"

#include <pwd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace spendcap {

std::string new_run_id() {
  return random_uuid();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string user_name() {
  uid_t uid = acting_uid();  // the caller, also under the privileged runner
  if (passwd* entry = ::getpwuid(uid)) return entry->pw_name;
  return std::to_string(uid);
}

std::string command_fingerprint(const std::string& team, const std::string& experiment,
                                const std::vector<std::string>& command) {
  // FNV-1a 64: stable across hosts and builds, and needs no crypto library at startup.
  std::uint64_t hash = 1469598103934665603ULL;
  auto mix = [&hash](const std::string& part) {
    for (unsigned char c : part) hash = (hash ^ c) * 1099511628211ULL;
    hash = (hash ^ 0xff) * 1099511628211ULL;  // separator: ("ab","c") != ("a","bc")
  };
  mix(team);
  mix(experiment);
  for (const std::string& arg : command) mix(arg);
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::map<std::string, std::string> scheduler_tags(const Environment& env) {
  static const std::pair<const char*, const char*> kTagVariables[] = {
      {"slurm_job_id", "SLURM_JOB_ID"},
      {"slurm_array_job_id", "SLURM_ARRAY_JOB_ID"},
      {"slurm_array_task_id", "SLURM_ARRAY_TASK_ID"},
      {"slurm_job_name", "SLURM_JOB_NAME"},
      {"slurm_partition", "SLURM_JOB_PARTITION"},
      {"slurm_account", "SLURM_JOB_ACCOUNT"},
      {"slurm_cluster", "SLURM_CLUSTER_NAME"},
      {"k8s_pod", "POD_NAME"},
      {"k8s_namespace", "POD_NAMESPACE"},
      {"k8s_node", "NODE_NAME"},
  };
  std::map<std::string, std::string> tags;
  for (const auto& [tag, variable] : kTagVariables) {
    auto it = env.find(variable);
    if (it != env.end() && !it->second.empty()) tags[tag] = it->second;
  }
  // Inside a Kubernetes pod without the downward API, HOSTNAME is the pod's name.
  if (!tags.count("k8s_pod") && env.count("KUBERNETES_SERVICE_HOST") && env.count("HOSTNAME")) {
    tags["k8s_pod"] = env.at("HOSTNAME");
  }
  return tags;
}

std::optional<std::string> tracker_from_environment(const Environment& env) {
  static const std::pair<const char*, const char*> kTrackerVariables[] = {
      {"mlflow", "MLFLOW_RUN_ID"},          {"wandb", "WANDB_RUN_ID"},
      {"neptune", "NEPTUNE_CUSTOM_RUN_ID"}, {"clearml", "CLEARML_TASK_ID"},
      {"comet", "COMET_EXPERIMENT_KEY"},
  };
  std::string labels;
  for (const auto& [tracker, variable] : kTrackerVariables) {
    auto it = env.find(variable);
    if (it == env.end()) continue;
    if (auto label = tracker_label(tracker, it->second)) {
      labels += (labels.empty() ? "" : ",") + *label;
    }
  }
  if (labels.empty()) return std::nullopt;
  return labels;
}

namespace {
// Entries of a comma-separated list, ignoring empty ones.
int count_list(const std::string& list) {
  int count = 0;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) ++count;
    start = end + 1;
  }
  return count;
}
}  // namespace

std::optional<int> gpus_from_environment(const Environment& env) {
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) {
    // "-1" and "NoDevFiles" (Slurm without GPUs) hide every device.
    if (it->second == "-1" || it->second == "NoDevFiles") return 0;
    return count_list(it->second);
  }
  if (auto it = env.find("SLURM_GPUS_ON_NODE"); it != env.end()) {
    char* end = nullptr;
    long count = std::strtol(it->second.c_str(), &end, 10);
    if (end != it->second.c_str() && count >= 0) return static_cast<int>(count);
  }
  if (auto it = env.find("SLURM_JOB_GPUS"); it != env.end()) return count_list(it->second);
  return std::nullopt;
}

std::vector<std::string> job_environment(const Environment& env, const JobIdentity& identity,
                                         const std::vector<std::string>& secret_names) {
  Environment job = env;
  for (const std::string& name : secret_names) job.erase(name);
  auto set = [&job](const char* name, const std::string& value) {
    if (value.empty()) {
      job.erase(name);
    } else {
      job[name] = value;
    }
  };
  set("SPENDCAP_RUN_ID", identity.run_id);
  set("SPENDCAP_TEAM", identity.team);
  set("SPENDCAP_EXPERIMENT", identity.experiment);
  set("SPENDCAP_PROJECT", identity.project);
  set("SPENDCAP_BUDGET_USD", identity.budget_usd);
  set("SPENDCAP_CHECKPOINT_SIGNAL", identity.checkpoint_signal);
  set("SPENDCAP_CHECKPOINT_DONE", identity.checkpoint_done);
  set("SPENDCAP_PROGRESS", identity.progress);
  std::vector<std::string> entries;
  entries.reserve(job.size());
  for (const auto& [name, value] : job) entries.push_back(name + "=" + value);
  return entries;
}

}  // namespace spendcap
