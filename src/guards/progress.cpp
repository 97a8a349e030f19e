#include "spendcap/guards/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace spendcap {

namespace {

std::optional<double> non_negative(const nlohmann::json& value) {
  if (!value.is_number()) return std::nullopt;
  double number = value.get<double>();
  if (!std::isfinite(number) || number < 0) return std::nullopt;
  return number;
}

std::optional<std::int64_t> whole(const nlohmann::json& value) {
  if (!value.is_number_integer() && !value.is_number_unsigned()) return std::nullopt;
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > INT64_MAX) return std::nullopt;
  std::int64_t number = value.get<std::int64_t>();
  if (number < 0) return std::nullopt;
  return number;
}

}  // namespace

std::optional<std::string> tracker_label(std::string_view tracker, std::string_view id) {
  bool name_ok = !tracker.empty() && tracker.size() <= 32 &&
                 std::all_of(tracker.begin(), tracker.end(), [](unsigned char c) {
                   return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
                 });
  bool id_ok = !id.empty() && id.size() <= 128 &&
               std::all_of(id.begin(), id.end(),
                           [](unsigned char c) { return c > ' ' && c < 127 && c != ','; });
  if (!name_ok || !id_ok) return std::nullopt;
  return std::string(tracker) + ":" + std::string(id);
}

std::optional<ProgressLine> parse_progress_line(std::string_view text) {
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  ProgressLine line;
  bool known = false;
  // A known field of the wrong type makes the whole line bad: half a line is not trusted.
  auto take = [&](const char* name, auto& slot, auto read) {
    auto it = json.find(name);
    if (it == json.end()) return true;
    auto value = read(*it);
    if (!value) return false;
    slot = *value;
    known = true;
    return true;
  };
  if (!take("step", line.step, whole) || !take("total_steps", line.total_steps, whole) ||
      !take("units", line.units, non_negative) ||
      !take("egress_gb", line.egress_gb, non_negative)) {
    return std::nullopt;
  }
  if (auto metric = json.find("metric"); metric != json.end()) {
    if (!metric->is_object() || metric->empty()) return std::nullopt;
    auto first = metric->begin();
    if (!first->is_number() || !std::isfinite(first->get<double>())) return std::nullopt;
    line.metric_name = first.key();
    line.metric_value = first->get<double>();
    known = true;
  }
  if (auto tracker = json.find("tracker"); tracker != json.end()) {
    if (!tracker->is_object() || tracker->empty()) return std::nullopt;
    std::string labels;
    bool full = false;
    for (auto it = tracker->begin(); it != tracker->end(); ++it) {
      if (!it->is_string()) return std::nullopt;
      auto label = tracker_label(it.key(), it->get_ref<const std::string&>());
      if (!label) return std::nullopt;
      std::size_t joined = labels.size() + (labels.empty() ? 0 : 1) + label->size();
      full = full || joined > kMaxTrackerBytes;  // whole labels, in order (all still checked)
      if (full) continue;
      labels += (labels.empty() ? "" : ",") + *label;
    }
    line.tracker = labels;
    known = true;
  }
  if (!known) return std::nullopt;
  return line;
}

std::vector<std::string> ProgressLines::feed(std::string_view bytes) {
  std::vector<std::string> lines;
  while (!bytes.empty()) {
    auto newline = bytes.find('\n');
    std::string_view piece = bytes.substr(0, newline);
    if (!skipping_) {
      if (partial_.size() + piece.size() > max_line_bytes_) {
        // Cut: what was held is dropped, the rest of the line is skipped as it comes.
        partial_.clear();
        partial_.shrink_to_fit();
        skipping_ = true;
        ++oversized_;
      } else {
        partial_.append(piece);
      }
    }
    if (newline == std::string_view::npos) break;
    if (!skipping_ && !partial_.empty()) lines.push_back(std::move(partial_));
    partial_.clear();
    skipping_ = false;
    bytes.remove_prefix(newline + 1);
  }
  return lines;
}

void ProgressState::apply(const std::optional<ProgressLine>& line, TimePoint at, Money spend) {
  if (!line) {
    ++bad_lines;
    return;
  }
  ++good_lines;
  if (line->step) {
    step = line->step;
    if (!pace.empty() && *line->step < pace.back().step) pace.clear();
    if (pace.empty()) training_since = at;
    PaceSample sample{*line->step, at, spend};
    // Lines of one read share its time: the latest stands for them. Samples closer together than
    // kPaceSampleGap are thinned (the newest replaces the last), bounding what is kept.
    bool thin =
        !pace.empty() && (pace.back().at == at ||
                          (pace.size() >= 2 && at - pace[pace.size() - 2].at < kPaceSampleGap));
    if (thin) {
      pace.back() = sample;
    } else {
      pace.push_back(sample);
    }
    TimePoint window_start = at - pace_window(*this);
    while (pace.size() > 2 && pace[1].at <= window_start) pace.pop_front();
  }
  if (line->total_steps) total_steps = line->total_steps;
  if (line->metric_name) {
    metric_name = line->metric_name;
    metric_value = line->metric_value;
  }
  if (line->units) units = line->units;
  if (line->egress_gb) egress_gb = line->egress_gb;
  if (line->tracker) tracker = line->tracker;
  last_line_at = at;
  spend_at_last_line = spend;
}

Nanos pace_window(const ProgressState& state) {
  if (!state.training_since || state.pace.empty()) return kPaceWindowMin;
  Nanos training = state.pace.back().at - *state.training_since;
  return std::clamp<Nanos>(training / 4, kPaceWindowMin, kPaceWindowMax);
}

namespace {
// The spend per step over the pace window; none until two samples differ in step and are read
// kPaceMinSpan apart.
std::optional<double> pace_micros_per_step(const ProgressState& state) {
  if (state.pace.size() < 2) return std::nullopt;
  const auto& from = state.pace.front();
  const auto& to = state.pace.back();
  if (to.step <= from.step || to.at - from.at < kPaceMinSpan) return std::nullopt;
  return static_cast<double>((to.spend - from.spend).micros) /
         static_cast<double>(to.step - from.step);
}
}  // namespace

std::optional<double> cost_per_step(const ProgressState& state) {
  if (!state.step || *state.step <= 0) return std::nullopt;
  return state.spend_at_last_line.units() / static_cast<double>(*state.step);
}

std::optional<double> cost_per_thousand_units(const ProgressState& state) {
  if (!state.units || *state.units <= 0) return std::nullopt;
  return state.spend_at_last_line.units() / *state.units * 1000.0;
}

std::optional<Money> projected_total(const ProgressState& state) {
  auto pace = pace_micros_per_step(state);
  if (!pace || !state.total_steps) return std::nullopt;
  double remaining =
      static_cast<double>(std::max<std::int64_t>(*state.total_steps - *state.step, 0));
  double micros = static_cast<double>(state.spend_at_last_line.micros) + *pace * remaining;
  if (!std::isfinite(micros) || micros > static_cast<double>(kMaxMoney.micros)) return kMaxMoney;
  return Money{static_cast<std::int64_t>(std::llround(micros))};
}

std::optional<double> seconds_left(const ProgressState& state) {
  if (!state.step || !state.total_steps) return std::nullopt;
  if (*state.step >= *state.total_steps) return 0.0;
  if (state.pace.size() < 2) return std::nullopt;
  const auto& from = state.pace.front();
  const auto& to = state.pace.back();
  if (to.step <= from.step || to.at - from.at < kPaceMinSpan) return std::nullopt;
  double rate = static_cast<double>(to.step - from.step) /
                std::chrono::duration<double>(to.at - from.at).count();
  double left = static_cast<double>(*state.total_steps - *state.step) / rate;
  if (!std::isfinite(left)) return kMaxSecondsLeft;
  return std::clamp(left, 0.0, kMaxSecondsLeft);
}

std::optional<TimePoint> steps_done_at(const ProgressState& state) {
  std::optional<double> left = seconds_left(state);
  if (!left || state.pace.empty()) return std::nullopt;  // a step was read: a sample is kept
  return state.pace.back().at +
         std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(*left));
}

std::string format_unit_cost(double amount, std::string_view currency) {
  return format_unit_price(amount, currency);
}

std::string progress_summary(const ProgressState& state, std::string_view currency) {
  std::string line = "progress:";
  std::string sep = " ";
  auto add = [&](const std::string& part) {
    line += sep + part;
    sep = ", ";
  };
  if (state.step) {
    add("step " + std::to_string(*state.step) +
        (state.total_steps ? " of " + std::to_string(*state.total_steps) : ""));
  }
  if (auto per_step = cost_per_step(state)) add(format_unit_cost(*per_step, currency) + "/step");
  if (auto per_k = cost_per_thousand_units(state)) {
    add(format_unit_cost(*per_k, currency) + " per 1000 units");
  }
  if (auto total = projected_total(state)) {
    add("projected total " + format_money(*total, std::string(currency)));
  }
  if (state.metric_name) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", *state.metric_value);
    add(*state.metric_name + " " + value);
  }
  if (state.tracker) add("tracker " + *state.tracker);
  if (state.bad_lines > 0) add(std::to_string(state.bad_lines) + " bad lines ignored");
  // Good lines that named no step (a tracker id alone, say) are progress the job reported.
  if (sep == " ") add(state.good_lines > 0 ? "no step reported yet" : "no progress reported yet");
  return line;
}

}  // namespace spendcap
