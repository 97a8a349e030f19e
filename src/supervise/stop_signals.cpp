// The stop signals held back while a run is set up, and the one that came meanwhile
// (supervisor.hpp: block_stop_signals, take_pending_stop_signal).
#include <signal.h>
#include <time.h>

#include "spendcap/supervise/supervisor.hpp"

namespace spendcap {

void block_stop_signals(bool block) {
  sigset_t set;
  sigemptyset(&set);
  for (int signal : kStopSignals) sigaddset(&set, signal);
  ::sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

int take_pending_stop_signal() {
  sigset_t pending;
  sigpending(&pending);
  for (int signal : kStopSignals) {
    if (sigismember(&pending, signal)) {
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, signal);
      timespec zero{};
      ::sigtimedwait(&one, nullptr, &zero);
      return signal;
    }
  }
  return 0;
}

}  // namespace spendcap
