// Runaway guards that watch a running run: pure decisions behind one interface. The supervisor's
// guard part (supervise/guard_part.hpp) asks each at every interval with what it knows then, and
// acts on the verdict: a warning is printed, a stop goes through the supervisor's trip (123, reason
// runaway:KIND). No clock, no I/O: tests feed views with fake times.
//
//   projection: the projected total (progress channel) exceeds what the run's budget has left ->
//               warn once with the figure; with --require-fit, stop (runaway:will-not-fit).
//   stall:      no progress line for T (since launch, or since the last line) -> stop
//               (runaway:stall).
//   burn rate:  a burn above factor x the experiment's expected_per_hour -> warn once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/guards/progress.hpp"

namespace spendcap {

// What a guard sees at one check.
struct GuardView {
  TimePoint now;
  TimePoint launched_at;
  Money spend;                      // the run's spend now
  Money rate_per_hour;              // its burn rate
  std::optional<Money> run_budget;  // the run's own budget, if it has one
  const ProgressState* progress = nullptr;
  std::string currency = "USD";
};

struct GuardVerdict {
  enum class Act { none, warn, stop };
  Act act = Act::none;
  std::string reason;   // for stop: "runaway:stall"
  std::string message;  // the line to print
  static GuardVerdict none() { return {}; }
};

class RunGuard {
 public:
  virtual ~RunGuard() = default;
  // Called every interval while the run is running; a guard keeps what it already said.
  virtual GuardVerdict check(const GuardView& view) = 0;
};

std::unique_ptr<RunGuard> make_projection_guard(bool require_fit);
std::unique_ptr<RunGuard> make_stall_guard(Nanos after);
std::unique_ptr<RunGuard> make_burn_rate_guard(double factor, Money expected_per_hour,
                                               std::string experiment);

}  // namespace spendcap
