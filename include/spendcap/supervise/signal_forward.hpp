// Signals to spendcap that are passed on to the job, as tini and dumb-init pass them: SIGUSR1 and
// SIGUSR2 always (Slurm's `--signal=B:USR1@120`, Lightning's requeue handler), and what
// `--forward SIG` adds. They go to the processes of the tree that catch them, the rule the
// checkpoint signal follows: a process that does not catch SIGUSR1 would be killed by it (a shell
// wrapper, a data-loader worker), which is not what a scheduler's "checkpoint now" means. Nothing
// else happens: no trip, no change to the run. A RunPart; called from the event loop only.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spendcap/process/process_tree.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_part.hpp"

namespace spendcap {

// Passed on without a flag.
inline constexpr int kForwardedByDefault[] = {SIGUSR1, SIGUSR2};

// The signal `--forward TEXT` names ("SIGWINCH", "WINCH", "28"). Throws Error (exit 125) for a
// name that is not a signal, or one spendcap handles itself (the stop signals, job control,
// SIGCHLD) or that cannot be caught or forwarded (SIGKILL, SIGSTOP, the faults).
int forwardable_signal_or_throw(const std::string& text);

class SignalForwarder final : public RunPart {
 public:
  // `tree` gives the tree of the moment (it changes when the guard dies).
  SignalForwarder(boost::asio::io_context& io, const Reporter& reporter,
                  std::function<ProcessTree&()> tree, const std::vector<int>& signals);
  // Leaves the signals ignored: Asio restores their default (termination) when it lets go.
  ~SignalForwarder() override;

  void on_launched(TimePoint) override { launched_ = true; }
  void on_finish() override;

 private:
  void wait();

  const Reporter& reporter_;
  std::function<ProcessTree&()> tree_;
  std::vector<int> signals_;
  std::unique_ptr<boost::asio::signal_set> set_;
  bool launched_ = false;
  bool finished_ = false;
};

}  // namespace spendcap
