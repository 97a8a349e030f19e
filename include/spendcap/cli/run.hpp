// `spendcap run`: the verb. Its flags fill a RunRequest (run/request.hpp, in main.cpp); the run's
// steps are run/run.hpp's. Here: what is said and written when a step fails.
#pragma once

#include "spendcap/run/request.hpp"
#include "spendcap/run/run.hpp"

namespace spendcap {

// Runs the command under spendcap (run_steps). Returns the exit status; when a signal to spendcap
// stopped the run, re-raises it instead of returning. An Error is rethrown for main to print, once
// the --status-file has it (125, 126, 127), or spendcap dies by a stop signal that came meanwhile.
int run_command(const RunRequest& request, const Inherited& inherited);

}  // namespace spendcap
