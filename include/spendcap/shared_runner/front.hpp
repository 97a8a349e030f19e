// The front of `spendcap run` on a shared runner: the user's own spendcap, which starts the setuid
// runner as its child (`--front-fds ENV,CTL run ...`) and stays the shell's child (terminal,
// session, job control, inherited fds). It passes its environment in a sealed memfd (a setuid exec
// puts glibc in secure mode, which strips LD_LIBRARY_PATH, TMPDIR and more; the job must get the
// environment the user had), relays SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to it by kill(2)
// over the control pipe (the terminal's reach the run's processes directly: they share the
// front's process group), mirrors a stop of the run (Ctrl-Z), and exits as the run did. It holds
// no privilege and no part of the ledger.
#pragma once

#include "spendcap/process/runner_channel.hpp"

namespace spendcap {

// The whole front: its exit status, or the run's (exit_as). Prints its own errors.
int run_front(const RunnerConfig& config, int argc, char** argv);

}  // namespace spendcap
