// The steps of `spendcap run`, in order (DESIGN.md "Processes of one run", "The kill path"):
//
//   1. settings (run/settings.hpp): the policy layers and the flags, the burn rate, and every check
//      that can fail before the ledger is touched (status file, metrics directory, checkpoint
//      storage, the command on PATH: 126, 127; the run directory; the webhooks);
//   2. admission (run/admission.hpp): the ledger opened, the --estimate-steps check, membership,
//      the crash-loop guard, the ledger's grant; a refusal exits 120;
//   3. execution (run/execution.hpp): cgroup, guard, supervisor, final row, summary.
//
// The stop signals stay blocked from the first step until the supervisor's event loop handles
// them, so no signal kills spendcap half-way (a run admitted but never launched).
#pragma once

#include "spendcap/process/launcher.hpp"
#include "spendcap/run/request.hpp"
#include "spendcap/run/run_host.hpp"

namespace spendcap {

// Runs the command under spendcap. Returns the exit status; when a signal to spendcap stopped the
// run, re-raises it instead of returning. An Error thrown by a step unwinds what the steps made
// (the run directory, an admitted run's row) before it reaches the caller.
int run_steps(const RunRequest& request, const Inherited& inherited);
// The same on `host` (run/run_host.hpp): the unit tests' FakeRunHost.
int run_steps(const RunRequest& request, const Inherited& inherited, RunHost& host);

}  // namespace spendcap
