// The crash-loop guard, across invocations: before a run starts, the ledger's recent runs of the
// same command fingerprint (team + experiment + argv + working directory) decide whether it may.
// Only the command's own failures count (ledger status failed): never a stop by spendcap, a
// preemption or a refusal. A success since resets the count, and so does a run started with
// `spendcap run --clear-crash-loop` (once the command is fixed; the ledger keeps it as that run's
// tag crash_loop_cleared=USER@HOST). A refusal says until when it holds and how to start again.
// Pure: the caller reads the history from the ledger (its clock, unix seconds) and acts on it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"

namespace spendcap {

// Exit 120 with this reason; the refused row in the ledger carries it too.
inline constexpr const char* kCrashLoopReason = "runaway:crash-loop";

struct PastRun {
  enum class Ended { running, succeeded, failed, other };
  Ended ended = Ended::other;
  double started_at = 0;              // unix seconds
  std::optional<double> finished_at;  // unix seconds
  bool crash_loop_refusal = false;    // a refused row of this guard
  bool cleared = false;               // started with --clear-crash-loop: the count restarts here
};

// The tag a run started with --clear-crash-loop carries in the ledger: who cleared the loop.
inline constexpr const char* kCrashLoopClearedTag = "crash_loop_cleared";

struct CrashLoopVerdict {
  int failures = 0;  // failed runs in the window since the last success
  bool refuse = false;
  // The first refusal in this window: the one that sends the `refused` event (a webhook, later);
  // the refusals after it in the same window stay quiet, however often the loop knocks.
  bool send_refused_event = false;
  // With --retry-backoff and not refused: how long to wait before starting (0: none).
  Nanos backoff{};
  // Refused: when the refusal lifts by itself (the oldest failures that make the count have left
  // the window), unix seconds.
  std::optional<double> refused_until;
  std::string message;  // why refused, until when and how to start again; or the wait
};

// Back-off before attempt after `failures` failures: 10 s doubling, capped at 5 min (Kubernetes'
// CrashLoopBackOff); 0 for no failure.
Nanos retry_backoff(int failures);

CrashLoopVerdict decide_crash_loop(const std::vector<PastRun>& history, double now,
                                   int max_failures, Nanos window, bool retry_backoff_on);

}  // namespace spendcap
