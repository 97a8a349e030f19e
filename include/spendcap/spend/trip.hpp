// Pure decisions of a run: when a budget trips, the deadlines of the kill path, which warning
// thresholds were crossed, and what each kind of trip means for the exit code and the ledger.
// No clock, no I/O: the supervisor feeds them times and acts on the answers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/money.hpp"

namespace spendcap {

// After SIGKILL the kernel tears processes down and the guard reaps them; 1 s covers that for
// trees of thousands of processes (tests/bench: a 500-process tree is gone in milliseconds).
inline constexpr Nanos kReapingSlack = std::chrono::seconds(1);

// After the job says its checkpoint is written, how long the main process has to exit by itself
// before SIGTERM (--exit-window): the one default for the flag, the plan and the kill path.
inline constexpr Nanos kDefaultExitWindow = std::chrono::seconds(5);

struct ShutdownTimes {
  Nanos grace{};
  Nanos kill_after{};
  // How long a run may still spend once it trips: grace + kill-after + reaping slack.
  Nanos total() const { return grace + kill_after + kReapingSlack; }
};

// What the run must hold back to pay for its own shutdown: rate x shutdown time, rounded up.
Money shutdown_reserve(Money rate_per_hour, const ShutdownTimes& times);

// What a run asks the ledger for beyond its spend, at admission and at each heartbeat: its burn
// until the claim horizon, but at least two heartbeats' worth (so that a full grant always
// outlasts the next heartbeat), plus its reserve.
Money claim_ahead(Money rate_per_hour, Nanos claim_horizon, Nanos sync, Money reserve);

// How long before its trip a run whose grant is limited asks the ledger once more: a sibling that
// finished meanwhile may have released enough to go on. 1 s leaves the answer time to come back
// before the trip (a late grant never cancels a trip); a local ledger answers in milliseconds.
inline constexpr Nanos kAskBeforeTrip = std::chrono::seconds(1);

// When the next heartbeat goes: after `sync`, or kAskBeforeTrip before the trip when that comes
// sooner and the grant is limited (`until_trip`: how long until the run trips on what it holds;
// nullopt when the grant was full or the run has tripped already).
Nanos heartbeat_delay(Nanos sync, std::optional<Nanos> until_trip);

// The moment spend + reserve reaches `ceiling`: the trip is computed, not found by polling.
// nullopt when it never comes (rate 0). At or before `launched` when the ceiling is already short.
std::optional<TimePoint> budget_trip_time(TimePoint launched, Money rate_per_hour, Money ceiling,
                                          Money reserve);

// The moment spend reaches `ceiling` (rate 0: never).
std::optional<TimePoint> ceiling_reached_time(TimePoint launched, Money rate_per_hour,
                                              Money ceiling);

struct KillDeadlines {
  TimePoint term_at;  // end of the grace: SIGTERM + SIGCONT to the tree
  TimePoint kill_at;  // end of kill-after: SIGKILL until nothing is left
};

// Deadlines for a trip at `tripped_at`. They run from the trip's planned moment, not from when a
// late timer fired, and never past `empty_by - kReapingSlack` (the moment spend would reach the
// ceiling): a signal trip's longer grace, or a slow event loop, cannot push spend over.
KillDeadlines plan_kill(TimePoint tripped_at, const ShutdownTimes& times,
                        std::optional<TimePoint> empty_by);

// Each warning threshold fires once per scope.
class ThresholdTracker {
 public:
  explicit ThresholdTracker(std::vector<double> fractions) : fractions_(std::move(fractions)) {}
  // The thresholds `used / amount` has reached that had not fired yet (ascending).
  std::vector<double> crossed(Money used, Money amount);
  // The next threshold that has not fired, if any.
  std::optional<double> next() const;

 private:
  std::vector<double> fractions_;
  size_t fired_ = 0;
};

// preemption: a notice that the machine is being taken back (--spot-notice).
enum class TripKind { budget, runaway, stop_order, signal, ledger_unreachable, preemption };

struct Trip {
  TripKind kind = TripKind::budget;
  std::string reason;  // "budget:run", "budget:team:vision", "stop-order", "signal:SIGTERM", ...
  int signal = 0;      // for TripKind::signal: the signal to re-raise afterwards
};

// 124 budget, 123 runaway or stop order, 122 preemption notice, 121 ledger unreachable; a signal
// trip exits by the signal (128 + N where re-raising cannot kill, e.g. as PID 1).
ExitCode exit_code_for(const Trip& trip);

// The exit status of a command from its wait status: its code, or 128 + N for signal N.
int command_exit_status(int wait_status);

}  // namespace spendcap
