#include "spendcap/process/exit_status.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/signals.hpp"

namespace spendcap {

void die_by_signal(int signal) {
  ::signal(signal, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(signal);
  // Still here: the signal's default is to ignore it (as PID 1 in a container). Exit as a shell
  // would report it.
  ::_exit(shell_status(signal));
}

void exit_as(int wait_status) {
  if (WIFSIGNALED(wait_status)) die_by_signal(WTERMSIG(wait_status));
  ::_exit(WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : to_int(ExitCode::internal));
}

}  // namespace spendcap
