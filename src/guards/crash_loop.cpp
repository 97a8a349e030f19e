#include "spendcap/guards/crash_loop.hpp"
#include "spendcap/base/text.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>

namespace spendcap {

Nanos retry_backoff(int failures) {
  if (failures <= 0) return Nanos{};
  constexpr Nanos first = std::chrono::seconds(10), cap = std::chrono::minutes(5);
  Nanos wait = first;
  for (int i = 1; i < failures && wait < cap; ++i) wait *= 2;
  return std::min(wait, cap);
}

CrashLoopVerdict decide_crash_loop(const std::vector<PastRun>& history, double now,
                                   int max_failures, Nanos window, bool retry_backoff_on) {
  CrashLoopVerdict verdict;
  double window_start = now - to_seconds(window);
  // The count restarts at the latest success, whenever it was.
  double since = window_start;
  for (const PastRun& run : history) {
    if (run.ended == PastRun::Ended::succeeded) {
      since = std::max(since, run.finished_at.value_or(run.started_at));
    }
    if (run.cleared) since = std::max(since, run.started_at);
  }
  std::optional<double> last_failure;
  std::vector<double> failed_at;
  for (const PastRun& run : history) {
    if (run.ended != PastRun::Ended::failed) continue;
    double at = run.finished_at.value_or(run.started_at);
    if (at < since) continue;
    ++verdict.failures;
    failed_at.push_back(at);
    last_failure = std::max(last_failure.value_or(at), at);
  }
  std::string count = std::to_string(verdict.failures) + " failures of this command in the last " +
                      format_duration(window);
  if (verdict.failures >= max_failures) {
    verdict.refuse = true;
    bool refused_already = std::any_of(history.begin(), history.end(), [&](const PastRun& run) {
      return run.crash_loop_refusal && run.started_at >= since;
    });
    verdict.send_refused_event = !refused_already;
    // It lifts when fewer than max_failures are left in the window: once the failure that makes
    // the count max_failures, counted from the newest, is older than the window.
    std::sort(failed_at.begin(), failed_at.end());
    verdict.refused_until =
        failed_at[failed_at.size() - static_cast<size_t>(max_failures)] + to_seconds(window);
    std::string clock = format_utc(std::ceil(*verdict.refused_until), UtcForm::clock_utc);
    verdict.message = std::string(kCrashLoopReason) + ": " + count +
                      " with no success since (limit " + std::to_string(max_failures) +
                      "); refused until " + clock +
                      " (or a success); once the command is fixed, start it now with `spendcap "
                      "run --clear-crash-loop ...` (the same flags and command)";
    return verdict;
  }
  if (retry_backoff_on && verdict.failures > 0) {
    // The wait runs from the last failure: a retry that comes late waits only the rest.
    Nanos full = retry_backoff(verdict.failures);
    double waited = now - *last_failure;
    Nanos left = full - std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(waited));
    if (left > Nanos{}) {
      verdict.backoff = left;
      verdict.message =
          "retry back-off: " + count + "; waiting " + format_duration(left) + " before starting";
    }
  }
  return verdict;
}

}  // namespace spendcap
