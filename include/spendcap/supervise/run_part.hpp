// A part of a run that plugs into the supervisor's event loop: the terminal title, the warnings at
// thresholds, and later samplers (GPU, progress file) and runaway guards. Each part arms its own
// timers on the loop it was built with; the supervisor tells every part, in order, when the command
// started, when the run began to shut down, and when it ended. Called from the event loop only.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "spendcap/base/duration.hpp"

namespace boost::asio {
class io_context;
}

namespace spendcap {

class Reporter;

class RunPart {
 public:
  virtual ~RunPart() = default;
  // The command started at `at`.
  virtual void on_launched(TimePoint at) = 0;
  // The run only shuts down from now on: it tripped, or the main process ended by itself.
  virtual void on_stopping() {}
  // An orphan of the tree, which the guard reaped, ended with `wait_status`; `pid` is numbered in
  // the guard's PID namespace (the innermost NSpid of /proc/PID/status).
  virtual void on_orphan_exited(int /*pid*/, int /*wait_status*/) {}
  // The tree is empty: cancel everything; no callback may act after this.
  virtual void on_finish() = 0;
};

// Starts the run's preemption-notice part (--spot-notice) on the supervisor's loop; the part calls
// `preempt(reason)` on that loop when the machine is being taken back.
using PreemptionPartFactory = std::function<std::unique_ptr<RunPart>(
    boost::asio::io_context& io, Reporter& reporter, std::function<void(std::string)> preempt)>;

}  // namespace spendcap
