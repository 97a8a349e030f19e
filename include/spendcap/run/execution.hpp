// A run's execution (`spendcap run`'s last step, once the ledger admitted it): the run's cgroup
// (its own, the privileged runner's, or none: the tree is followed by parentage), spendcap made a
// subreaper, the guard forked (before any thread: the notifier's starts after), the supervisor's
// plan assembled and run to the end, then the final row (or its spool), the status file, the
// webhooks' last deliveries and the summary. Returns the exit status, or re-raises the signal that
// stopped the run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/webhook_notifier.hpp"
#include "spendcap/process/launcher.hpp"
#include "spendcap/run/admission.hpp"
#include "spendcap/run/run_dir.hpp"
#include "spendcap/run/run_host.hpp"
#include "spendcap/run/settings.hpp"
#include "spendcap/supervise/metrics_part.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/storage_part.hpp"

namespace spendcap {

// What the execution takes from the steps before it (run_steps, run/run.hpp): references to what
// they own, and what they hand over.
struct AdmittedJob {
  const RunSettings& settings;
  const Environment& env;   // the job's (under the privileged runner: the front's)
  const RunnerRun* runner;  // what the privileged runner set up, else null
  RunHost& host;            // the machine: cgroup, guard, tree, notifier, clock (run_host.hpp)
  const TestSwitches& switches;
  const std::string& executable;  // the command, found on PATH
  const RunDir& run_dir;
  const Admission& admission;
  RunFacts facts;  // for the webhooks; its run_id is the run's
  std::vector<WebhookTarget> webhooks;
  StoragePlan storage;
  std::shared_ptr<MetricsSink> metrics_sink;  // the setgid install's metrics writer, or null
};

int execute_run(AdmittedJob job, const Inherited& inherited, std::shared_ptr<Ledger> ledger,
                AdmittedRun& admitted, Reporter& reporter);

}  // namespace spendcap
