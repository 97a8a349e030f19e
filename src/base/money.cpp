#include "spendcap/base/money.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {
// GCC's 128-bit integer: exact products of micro-units and nanoseconds. __extension__ marks the
// one use of the extension, so -Wpedantic stays on for everything else.
__extension__ typedef __int128 int128;
constexpr int128 kNanosPerHour = static_cast<int128>(3600) * 1'000'000'000;
}  // namespace

std::optional<Money> parse_money(std::string_view text) {
  if (!text.empty() && text.front() == '$') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  int128 whole = 0, fraction = 0;
  int fraction_digits = 0;
  bool seen_dot = false, seen_digit = false;
  for (char c : text) {
    if (c == '.' && !seen_dot) {
      seen_dot = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    seen_digit = true;
    if (seen_dot) {
      if (++fraction_digits > 6) return std::nullopt;
      fraction = fraction * 10 + (c - '0');
    } else {
      whole = whole * 10 + (c - '0');
      if (whole > kMaxMoney.micros) return std::nullopt;
    }
  }
  if (!seen_digit) return std::nullopt;
  while (fraction_digits++ < 6) fraction *= 10;
  int128 micros = whole * 1'000'000 + fraction;
  if (micros > kMaxMoney.micros) return std::nullopt;
  return Money{static_cast<std::int64_t>(micros)};
}

Money parse_money_or_throw(std::string_view text, std::string_view what) {
  if (auto parsed = parse_money(text)) return *parsed;
  throw Error(std::string(what) + " " + std::string(text),
              "not an amount of money (a non-negative decimal, at most 6 decimal places)",
              "write it like 50 or 0.25");
}

std::optional<Money> money_from_number(double value) {
  if (!std::isfinite(value) || value < 0 || value * 1e6 > static_cast<double>(kMaxMoney.micros)) {
    return std::nullopt;
  }
  return Money{static_cast<std::int64_t>(std::llround(value * 1e6))};
}

namespace {
// `units` printed with `decimals` decimals, trailing zeros beyond `keep` decimals trimmed.
std::string fixed_decimals(double units, int decimals, int keep) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, units);
  std::string text = buffer;
  size_t dot = text.find('.');
  if (dot == std::string::npos) return text;
  while (text.size() > dot + 1 + static_cast<size_t>(keep) && text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

std::string with_currency(const std::string& number, bool negative, std::string_view currency) {
  if (currency == "USD") return std::string(negative ? "-" : "") + "$" + number;
  return std::string(negative ? "-" : "") + number + " " + std::string(currency);
}
}  // namespace

std::string format_money(Money amount, std::string_view currency) {
  double units = std::fabs(amount.units());
  // Below $0.0001 four decimals would say $0.0000 for money that was spent: show the micro-units.
  int decimals = units >= 1.0 ? 2 : (units > 0 && units < 0.0001 ? 6 : 4);
  return with_currency(fixed_decimals(units, decimals, decimals == 6 ? 4 : decimals),
                       amount.micros < 0, currency);
}

std::string format_unit_price(double amount, std::string_view currency) {
  if (!std::isfinite(amount)) return with_currency("?", false, currency);
  double units = std::fabs(amount);
  int decimals = 2;
  if (units > 0 && units < 1.0) {
    // 4 significant digits: 0.004617 -> 6 decimals, 0.00004617 -> 8; at most 12 (a trillionth).
    int leading_zeros = static_cast<int>(std::floor(-std::log10(units)));
    decimals = std::clamp(leading_zeros + 4, 4, 12);
  }
  return with_currency(fixed_decimals(units, decimals, units >= 1.0 ? 2 : 4), amount < 0, currency);
}

double money_to_json(Money amount) {
  return static_cast<double>(amount.micros) / 1e6;
}

std::string to_decimal(Money amount) {
  char buffer[48];
  std::int64_t micros = amount.micros < 0 ? -amount.micros : amount.micros;
  std::snprintf(buffer, sizeof buffer, "%s%lld.%06lld", amount.micros < 0 ? "-" : "",
                static_cast<long long>(micros / 1'000'000),
                static_cast<long long>(micros % 1'000'000));
  std::string text = buffer;
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

namespace {
// rate x elapsed / 1 h in micro-units, exact: |rate| <= int64 max and elapsed <= int64 max keep
// the product below 2^126. Saturating at kMaxMoney keeps the int64 result and its sums exact.
int128 cost_micros(Money rate_per_hour, Nanos elapsed, bool round_up) {
  if (elapsed.count() <= 0 || rate_per_hour.micros <= 0) return 0;
  int128 product = static_cast<int128>(rate_per_hour.micros) * elapsed.count();
  return (product + (round_up ? kNanosPerHour - 1 : 0)) / kNanosPerHour;
}
Money saturate(int128 micros) {
  return Money{static_cast<std::int64_t>(std::min<int128>(micros, kMaxMoney.micros))};
}
}  // namespace

Money cost_of(Money rate_per_hour, Nanos elapsed) {
  return saturate(cost_micros(rate_per_hour, elapsed, false));
}

Money cost_of_rounded_up(Money rate_per_hour, Nanos elapsed) {
  return saturate(cost_micros(rate_per_hour, elapsed, true));
}

std::optional<Money> checked_cost_of_rounded_up(Money rate_per_hour, Nanos elapsed) {
  int128 micros = cost_micros(rate_per_hour, elapsed, true);
  if (micros > kMaxMoney.micros) return std::nullopt;
  return Money{static_cast<std::int64_t>(micros)};
}

std::optional<Money> checked_times(Money amount, std::int64_t count) {
  int128 micros = static_cast<int128>(amount.micros) * count;
  if (micros < 0 || micros > kMaxMoney.micros) return std::nullopt;
  return Money{static_cast<std::int64_t>(micros)};
}

Nanos time_to_cost(Money rate_per_hour, Money amount) {
  if (amount.micros <= 0) return Nanos(0);
  if (rate_per_hour.micros <= 0) return Nanos::max();
  int128 numerator = static_cast<int128>(amount.micros) * kNanosPerHour;
  int128 ns = (numerator + rate_per_hour.micros - 1) / rate_per_hour.micros;
  if (ns > Nanos::max().count()) return Nanos::max();
  return Nanos(static_cast<std::int64_t>(ns));
}

}  // namespace spendcap
