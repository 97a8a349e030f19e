#include "spendcap/run/multi_node.hpp"

#include "spendcap/base/error.hpp"
#include "spendcap/base/text.hpp"

namespace spendcap {

namespace {

std::string variable(const Environment& env, const char* name) {
  auto found = env.find(name);
  return found == env.end() ? std::string() : found->second;
}

}  // namespace

std::optional<MultiNodeRun> resolve_multi_node_run(const std::optional<std::string>& run_id,
                                                   const std::string& job_key,
                                                   const Environment& env,
                                                   const std::string& host) {
  if (!run_id) return std::nullopt;
  MultiNodeRun run;
  run.id = *run_id;
  if (run.id == "slurm") {
    std::string job = variable(env, "SLURM_JOB_ID");
    if (job.empty()) {
      throw Error("--run-id slurm", "SLURM_JOB_ID is not set: this is not inside a Slurm job",
                  "give the run id itself, the same on every node: --run-id NAME");
    }
    std::string step = variable(env, "SLURM_STEP_ID");
    run.id = "slurm-" + job + (step.empty() ? "" : "." + step);
  }
  if (run.id.empty()) {
    throw Error("--run-id", "is empty", "give the id every node's wrapper shares, or slurm");
  }
  require_printable_name(run.id, "--run-id");
  if (!job_key.empty() && job_key != run.id) {
    throw Error("--run-id " + run.id, "--job-key " + job_key + " names another job",
                "give one of them: a multi-node run's id is its job key");
  }
  run.node = variable(env, "SLURMD_NODENAME");
  if (run.node.empty()) run.node = host;
  return run;
}

}  // namespace spendcap
