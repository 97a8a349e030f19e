// The progress channel: the job appends JSON lines to $SPENDCAP_PROGRESS, e.g.
//   {"step":1200,"total_steps":50000,"metric":{"val_acc":0.83},"units":40960,"egress_gb":0.5}
// and, once the job knows it, its experiment tracker's run id: {"tracker":{"wandb":"1a2b3c4d"}}.
// ProgressLines splits the bytes read so far into lines with a bounded buffer (a huge line is cut
// and skipped, never loaded); parse_progress_line reads one; ProgressState keeps what the lines
// said last. A bad line is counted and ignored, never fatal. Pure: no file, no clock (the reader in
// supervise/ feeds bytes and times). Not thread-safe; one run's event loop owns each.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"

namespace spendcap {

// Longer lines are cut: a progress line is a few hundred bytes; 64 KiB leaves room for a big metric
// object and still bounds what one read may hold in memory.
inline constexpr std::size_t kMaxProgressLineBytes = 64 * 1024;

struct ProgressLine {
  std::optional<std::int64_t> step, total_steps;
  std::optional<std::string> metric_name;  // the first key of "metric"
  std::optional<double> metric_value;
  std::optional<double> units;         // items processed so far (samples, tokens, predictions)
  std::optional<double> egress_gb;     // data sent out so far
  std::optional<std::string> tracker;  // "wandb:1a2b3c4d" (tracker_label), several joined by ","
};

// The most of a line's tracker labels kept, joined: whole labels only, the first that would go
// past it and those after it dropped. The run's tag `tracker` is this text, and a tag's value is
// at most run/input_limits.hpp's kMaxTagValueBytes (the same number; one label is at most 161).
inline constexpr std::size_t kMaxTrackerBytes = 256;

// The experiment tracker's run id as spendcap records it: "mlflow:<id>", "wandb:<id>". nullopt
// when the name is not 1-32 of [a-z0-9_-] or the id not 1-128 printable ASCII characters without
// spaces or commas (an id is a key in reports, not a sentence).
std::optional<std::string> tracker_label(std::string_view tracker, std::string_view id);

// nullopt for a line that is not a JSON object with at least one known field of the right type
// (steps and units are non-negative; a metric is {"name": number}).
std::optional<ProgressLine> parse_progress_line(std::string_view line);

// Splits a byte stream into lines, holding at most kMaxProgressLineBytes of an unfinished line.
class ProgressLines {
 public:
  explicit ProgressLines(std::size_t max_line_bytes = kMaxProgressLineBytes)
      : max_line_bytes_(max_line_bytes) {}
  // The complete lines in `bytes` (with what was held before); lines over the limit are dropped
  // and counted in oversized().
  std::vector<std::string> feed(std::string_view bytes);
  std::int64_t oversized() const { return oversized_; }

 private:
  std::size_t max_line_bytes_;
  std::string partial_;
  bool skipping_ = false;  // inside a line that was already too long
  std::int64_t oversized_ = 0;
};

struct ProgressState {
  std::optional<std::int64_t> step, total_steps;
  std::optional<std::string> metric_name;
  std::optional<double> metric_value;
  std::optional<double> units, egress_gb;
  std::optional<std::string> tracker;  // the last line's that named one
  std::int64_t good_lines = 0, bad_lines = 0;
  std::optional<TimePoint> last_line_at;  // when the last good line was read
  std::string last_line;                  // it, as the job wrote it (the reader sets it)
  Money spend_at_last_line;               // the run's spend when it was read
  // The pace: the step, the time it was read and the spend then, of recent lines. The time is
  // each line's own as read (the reader polls the file every kProgressPoll), not the sampling
  // interval's; the job's start-up before its first step is never inside it, and a resumed run
  // whose first step is 40000 is not priced as if it had done 40000 steps here. A step below the
  // last (the job restarted from an older checkpoint) starts the measure again. Kept: the window
  // (pace_window) and the one sample before it, about kPaceSampleGap apart.
  struct PaceSample {
    std::int64_t step;
    TimePoint at;
    Money spend;
  };
  std::deque<PaceSample> pace;
  std::optional<TimePoint> training_since;  // the first line of the current measure

  // Folds one line in (nullopt: a bad line), read at `at` when the spend was `spend`.
  void apply(const std::optional<ProgressLine>& line, TimePoint at, Money spend);
};

// Costs from what the job reported, at the spend when the last line was read; nullopt where the
// job did not report what it needs (never 0 for "not known").
std::optional<double> cost_per_step(const ProgressState& state);
std::optional<double> cost_per_thousand_units(const ProgressState& state);
// How far back the pace is measured: a quarter of the time since the first step, at least
// kPaceWindowMin (a pace that changed shows within it) and at most kPaceWindowMax.
inline constexpr Nanos kPaceWindowMin = std::chrono::seconds(5);
inline constexpr Nanos kPaceWindowMax = std::chrono::minutes(10);
// No pace from lines read closer together than this (the read times' jitter would dominate).
inline constexpr Nanos kPaceMinSpan = std::chrono::seconds(1);
inline constexpr Nanos kPaceSampleGap = std::chrono::milliseconds(250);
Nanos pace_window(const ProgressState& state);

// Spend so far + (spend over the pace window / steps in it) x steps remaining: the total the run
// will cost at its recent training pace. None before two lines with different steps read at
// least kPaceMinSpan apart.
std::optional<Money> projected_total(const ProgressState& state);

// The time the run still needs for its steps at its recent pace (the steps per second over the
// pace window): (total_steps - step) / rate, as of the last line's reading, at most
// kMaxSecondsLeft (a crawling run is not promised for next year); 0 once the steps are done.
// None without a total, before the pace is known (as projected_total), or at a pace of 0 steps.
inline constexpr double kMaxSecondsLeft = 30.0 * 24 * 3600;
std::optional<double> seconds_left(const ProgressState& state);
// When that is: the last step's reading + seconds_left (none as seconds_left).
std::optional<TimePoint> steps_done_at(const ProgressState& state);

// "$0.0012", "$0.00004617": four significant digits, never an exponent (format_unit_price).
std::string format_unit_cost(double amount, std::string_view currency = "USD");

// "progress: step 1200 of 50000, $0.0012/step, $0.03 per 1000 units, projected $60.00"
std::string progress_summary(const ProgressState& state, std::string_view currency);

}  // namespace spendcap
