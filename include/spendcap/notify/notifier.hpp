// Notifier: what the supervisor (and later samplers and guards) tell about a run as it happens:
// warning, killed, refused, lost, finished, stop-order, overrun (issue 9). The supervisor holds one
// and calls it from the event loop; it returns at once (a webhook is delivered on the notifier's
// own thread, never on the kill path). NullNotifier when no webhook is configured: nothing is
// loaded, nothing is done.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "spendcap/base/money.hpp"

namespace spendcap {

// One event, with what the caller knows now; the notifier adds the run's identity and the time.
struct RunEvent {
  std::string event;    // "warning", "killed", "refused", "lost", "finished", "stop-order",
                        // "overrun", "preempted"
  std::string reason;   // "budget:run", "stop-order", "exited", "50% of the run budget", ...
  std::string scope;    // the scope that tripped or warned ("run", "team:vision"); "" when none
  std::string message;  // a line for people
  std::optional<Money> spend;             // the run's spend at the event
  std::optional<int> exit_code;           // spendcap's exit code, once the run ended
  std::optional<int> command_exit_code;   // the command's own, when it exited (128+N: signal N)
  bool ended = false;                     // the run is over: its end time is now
  std::optional<double> gpu_utilisation;  // 0..1, only where measured
  // Where spendcap stopped the run: what became of its checkpoint ("written", "not-written",
  // "not-caught": no process catches the signal, "no-signal": the run has none); none otherwise.
  std::optional<std::string> checkpoint;
  std::optional<std::int64_t> last_step, total_steps;  // the progress channel's last, if any
  // Last, so that positional initialisers above keep their meaning. A shared scope's warning
  // (`scope` team:vision...): that scope's spend and budget, of every run that charges it (the
  // run's own are `spend` and the facts' budget).
  std::optional<Money> scope_spend, scope_budget;
  // The run's end: the experiment tracker's run id its progress channel reported, sent as the
  // tag `tracker` where the run's tags have none (as the ledger records it); none otherwise.
  std::optional<std::string> tracker;
};

class Notifier {
 public:
  virtual ~Notifier() = default;
  // Queues the event; never blocks.
  virtual void notify(const RunEvent& event) = 0;
};

class NullNotifier final : public Notifier {
 public:
  void notify(const RunEvent&) override {}
};

}  // namespace spendcap
