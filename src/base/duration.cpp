#include "spendcap/base/duration.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

// Nanoseconds per unit, smallest first; "ms" must be tried before "m".
struct Unit {
  std::string_view name;
  double nanos;
};
constexpr Unit kUnits[] = {{"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}, {"d", 86400e9}};

// Longest duration accepted: 100 years keeps every sum far from int64 nanosecond overflow.
constexpr double kMaxNanos = 100.0 * 365 * 86400e9;

// The duration, or nullopt with `why` set to what is wrong with it.
std::optional<Nanos> parse(std::string_view text, std::string& why) {
  why = "not a duration";
  if (text.empty()) return std::nullopt;
  double total = 0;
  size_t i = 0;
  // "1h30m" but not "1h1h" or "5m1h": each unit once, largest first, as format_duration writes.
  const Unit* previous = nullptr;
  while (i < text.size()) {
    size_t start = i;
    bool seen_digit = false, seen_dot = false;
    while (i < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[i])) || (text[i] == '.' && !seen_dot))) {
      seen_dot |= text[i] == '.';
      seen_digit |= text[i] != '.';
      ++i;
    }
    if (!seen_digit) return std::nullopt;
    double number = std::strtod(std::string(text.substr(start, i - start)).c_str(), nullptr);
    if (i == text.size()) {
      // A bare number ("90") is seconds, but only on its own: "1h30" is ambiguous.
      if (start != 0) return std::nullopt;
      total = number * 1e9;
      break;
    }
    const Unit* unit = nullptr;
    for (const Unit& candidate : kUnits) {
      if (text.substr(i, candidate.name.size()) == candidate.name) {
        unit = &candidate;
        break;
      }
    }
    if (!unit) return std::nullopt;
    if (previous && unit >= previous) {
      why = unit == previous ? "gives the unit " + std::string(unit->name) + " twice"
                             : "gives " + std::string(unit->name) + " after the smaller unit " +
                                   std::string(previous->name);
      return std::nullopt;
    }
    previous = unit;
    i += unit->name.size();
    total += number * unit->nanos;
  }
  if (!std::isfinite(total) || total < 0 || total > kMaxNanos) {
    why = "not a duration of at most 100 years";
    return std::nullopt;
  }
  return Nanos(static_cast<std::int64_t>(std::llround(total)));
}

}  // namespace

std::optional<Nanos> parse_duration(std::string_view text) {
  std::string why;
  return parse(text, why);
}

Nanos parse_duration_or_throw(std::string_view text, std::string_view what) {
  std::string why;
  if (auto parsed = parse(text, why)) return *parsed;
  throw Error(std::string(what) + " " + std::string(text), why,
              "write it like 90s, 5m, 1h30m or 250ms: each unit once, largest first");
}

std::string format_duration(Nanos duration) {
  using namespace std::chrono;
  char buffer[64];
  std::int64_t ns = duration.count();
  if (ns < 0) ns = 0;
  if (ns < 1'000'000'000 && ns % 1'000'000 == 0 && ns != 0) {
    std::snprintf(buffer, sizeof buffer, "%lldms", static_cast<long long>(ns / 1'000'000));
    return buffer;
  }
  if (ns < 60'000'000'000LL) {
    double seconds = ns / 1e9;
    if (ns % 1'000'000'000 == 0) {
      std::snprintf(buffer, sizeof buffer, "%llds", static_cast<long long>(ns / 1'000'000'000));
    } else {
      std::snprintf(buffer, sizeof buffer, "%.2fs", seconds);
    }
    return buffer;
  }
  std::int64_t seconds = ns / 1'000'000'000;
  std::int64_t h = seconds / 3600, m = (seconds / 60) % 60, s = seconds % 60;
  std::string out;
  if (h) out += std::to_string(h) + "h";
  if (m) out += std::to_string(m) + "m";
  if (s || out.empty()) out += std::to_string(s) + "s";
  return out;
}

}  // namespace spendcap
