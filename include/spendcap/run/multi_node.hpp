// Multi-node runs (`spendcap run --run-id ID`): one wrapper per node, as `srun spendcap run ...`
// starts them, joins one run. Each wrapper is its own ledger row (its own ceiling and heartbeat)
// and the run id is their job key, so --budget is one budget over all of them (the ledger's job
// scope: a wrapper's headroom is the budget less the others' spend and ceilings), and a stop order
// on the job (`spendcap stop --job ID`) reaches every wrapper at its next heartbeat.
#pragma once

#include <optional>
#include <string>

#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

struct MultiNodeRun {
  std::string id;    // the run id the wrappers share: their job key
  std::string node;  // this wrapper's node: Slurm's node name, else the host name
};

// nullopt without --run-id. `--run-id slurm` derives the id from the Slurm job and step
// (slurm-JOBID.STEPID, or slurm-JOBID outside a step), which every task of one `srun` shares.
// Throws (125) for an id that is not a printable name, `slurm` outside a Slurm job, or a
// --job-key that names another job.
std::optional<MultiNodeRun> resolve_multi_node_run(const std::optional<std::string>& run_id,
                                                   const std::string& job_key,
                                                   const Environment& env, const std::string& host);

}  // namespace spendcap
