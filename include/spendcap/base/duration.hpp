// Durations as users write them ("90s", "5m", "1h30m", "250ms", "1.5h"; a bare number is seconds,
// as with timeout(1)) and as spendcap prints them. Time inside spendcap is the monotonic clock in
// nanoseconds.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace spendcap {

using Nanos = std::chrono::nanoseconds;
using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC on Linux: shared by all processes
using TimePoint = Clock::time_point;

// nullopt for anything that is not a finite, non-negative duration.
std::optional<Nanos> parse_duration(std::string_view text);

// As parse_duration, but throws spendcap::Error naming `what` (e.g. "--grace 5x").
Nanos parse_duration_or_throw(std::string_view text, std::string_view what);

// "1h30m", "7s", "1.25s", "250ms", "0s".
std::string format_duration(Nanos duration);

// CLOCK_MONOTONIC now, as a TimePoint; the same clock in every process of the run.
inline TimePoint now() {
  return Clock::now();
}
inline std::int64_t to_ns(TimePoint t) {
  return std::chrono::duration_cast<Nanos>(t.time_since_epoch()).count();
}
inline TimePoint from_ns(std::int64_t ns) {
  return TimePoint(Nanos(ns));
}
inline double to_seconds(Nanos d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace spendcap
