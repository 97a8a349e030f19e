#include "spendcap/supervise/signal_forward.hpp"

#include <signal.h>

#include <algorithm>

#include "spendcap/base/error.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

int forwardable_signal_or_throw(const std::string& text) {
  auto signal = parse_signal(text);
  if (!signal || *signal == 0) {
    throw Error("--forward " + text, "not a signal", "give a name like SIGUSR1, USR2 or SIGWINCH");
  }
  // Handled by spendcap itself (the kill path, job control, the reaper) or not catchable or not a
  // request at all (faults raised by the kernel on the faulting process).
  static constexpr int kRefused[] = {SIGKILL, SIGSTOP, SIGTSTP, SIGCONT, SIGCHLD,
                                     SIGTTIN, SIGTTOU, SIGPIPE, SIGSEGV, SIGBUS,
                                     SIGFPE,  SIGILL,  SIGTRAP, SIGABRT, SIGSYS};
  bool stop = std::find(std::begin(kStopSignals), std::end(kStopSignals), *signal) !=
              std::end(kStopSignals);
  if (stop || std::find(std::begin(kRefused), std::end(kRefused), *signal) != std::end(kRefused)) {
    throw Error("--forward " + text,
                "spendcap handles " + signal_name(*signal) + " itself; it cannot be forwarded",
                stop ? "a stop signal to spendcap already stops the job with its grace"
                     : "forward a signal like SIGUSR1, SIGUSR2, SIGWINCH or SIGPWR");
  }
  return *signal;
}

SignalForwarder::SignalForwarder(boost::asio::io_context& io, const Reporter& reporter,
                                 std::function<ProcessTree&()> tree,
                                 const std::vector<int>& signals)
    : reporter_(reporter),
      tree_(std::move(tree)),
      set_(std::make_unique<boost::asio::signal_set>(io)) {
  for (int signal : signals) {
    if (std::find(signals_.begin(), signals_.end(), signal) != signals_.end()) continue;
    signals_.push_back(signal);
    set_->add(signal);
  }
  wait();
}

SignalForwarder::~SignalForwarder() {
  set_.reset();
  for (int signal : signals_) ::signal(signal, SIG_IGN);
}

void SignalForwarder::on_finish() {
  finished_ = true;
  set_->cancel();
}

void SignalForwarder::wait() {
  set_->async_wait([this](auto error, int signal) {
    if (error || finished_) return;
    if (!launched_) {
      reporter_.line("got " + signal_name(signal) + " before the job started: not passed on");
    } else {
      int signalled = 0;
      try {
        signalled = tree_().signal_catchers(signal);
      } catch (...) {
      }
      reporter_.line("got " + signal_name(signal) + ": " +
                     (signalled == 0 ? "no process of the job catches it; not passed on"
                                     : "passed on to " + std::to_string(signalled) +
                                           (signalled == 1 ? " process that catches it"
                                                           : " processes that catch it")));
    }
    wait();
  });
}

}  // namespace spendcap
