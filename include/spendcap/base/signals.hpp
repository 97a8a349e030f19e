// Signals as spendcap names them: the stop signals (the ones that stop the job and are re-raised),
// and the status a shell reports for a process a signal ended. Signals are always written by name
// (SIGUSR1 is 10 on x86 and ARM but 16 on MIPS, 30 on SPARC and Alpha).
#pragma once

#include <signal.h>

namespace spendcap {

// Signals to spendcap that stop the job: the kill path with the signal's grace, then spendcap
// re-raises the signal (supervise/supervisor.hpp). The ledgers look for the same ones pending
// while they wait on a lock.
inline constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

// A stop signal waiting while this thread has it blocked, else 0. `spendcap run` blocks them
// during setup so that it is never killed half-way; a ledger's wait on a lock (both stores) gives
// up at once when one is pending, and run re-raises it after cleaning up. Not consumed here.
inline int pending_stop_signal() {
  sigset_t pending;
  if (::sigpending(&pending) != 0) return 0;
  for (int signal : kStopSignals) {
    if (sigismember(&pending, signal)) return signal;
  }
  return 0;
}

// The exit status a POSIX shell reports for a process that signal `signal` ended: 128 + N.
constexpr int shell_status(int signal) {
  return 128 + signal;
}

}  // namespace spendcap
