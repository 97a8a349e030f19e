#include "spendcap/base/money.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

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

namespace {
// "4166.67" -> "4,166.67" (digits, a dot, digits; no sign).
std::string with_thousands(const std::string& plain) {
  size_t dot = std::min(plain.find('.'), plain.size());
  std::string out;
  out.reserve(plain.size() + dot / 3);
  for (size_t i = 0; i < dot; ++i) {
    out += plain[i];
    size_t left = dot - i - 1;
    if (left > 0 && left % 3 == 0) out += ',';
  }
  out.append(plain, dot);
  return out;
}

constexpr std::int64_t kMicrosPer[7] = {1'000'000, 100'000, 10'000, 1'000, 100, 10, 1};

// `micros` (>= 0) with `decimals` (0 to 6) decimals, rounded half up: exact, no double on the way.
std::string micros_text(std::int64_t micros, int decimals) {
  const std::int64_t step = kMicrosPer[decimals];
  const std::int64_t steps = micros / step + (micros % step >= (step + 1) / 2 && step > 1);
  const std::int64_t per_unit = 1'000'000 / step;
  std::string text = std::to_string(steps / per_unit);
  if (decimals > 0) {
    std::string fraction = std::to_string(steps % per_unit);
    text += '.' + std::string(static_cast<size_t>(decimals) - fraction.size(), '0') + fraction;
  }
  return with_thousands(text);
}

int decimals_of_micros(std::int64_t micros) {  // micros >= 0
  if (micros == 0 || micros >= 9'950) return 2;
  return micros >= 100 ? 4 : 6;
}

int valid_decimals(int decimals) {
  return decimals == 4 || decimals == 6 ? decimals : 2;
}

// The micro-units of a double, when it is within int64 range and finite.
std::optional<std::int64_t> micros_of(double units) {
  double micros = std::fabs(units) * 1e6;
  if (!std::isfinite(micros) || micros >= 9.0e18) return std::nullopt;
  return std::llround(micros);
}
}  // namespace

int money_decimals(Money amount) {
  // -(INT64_MIN) overflows: a ledger never holds it (sums stay far below), but stay defined.
  std::int64_t micros = amount.micros == INT64_MIN ? INT64_MAX : std::abs(amount.micros);
  return decimals_of_micros(micros);
}

int money_decimals(double units) {
  std::optional<std::int64_t> micros = micros_of(units);
  if (!micros) return 2;
  if (*micros == 0 && units != 0) return 6;  // below half a micro-unit: "$0.000000", not "$0.00"
  return decimals_of_micros(*micros);
}

std::string format_money(Money amount, std::string_view currency, int decimals) {
  std::int64_t micros = amount.micros == INT64_MIN ? INT64_MAX : std::abs(amount.micros);
  return with_currency(micros_text(micros, valid_decimals(decimals)), amount.micros < 0, currency);
}

std::string format_money(Money amount, std::string_view currency) {
  return format_money(amount, currency, money_decimals(amount));
}

std::string format_money(double units, std::string_view currency, int decimals) {
  if (std::isnan(units)) return with_currency("?", false, currency);
  std::optional<std::int64_t> micros = micros_of(units);
  if (!micros) {  // beyond int64 micro-units (an estimate of a huge job): whole cents, grouped
    if (std::isinf(units)) return with_currency("inf", units < 0, currency);
    char text[400];
    char* end = std::to_chars(text, text + sizeof text, std::fabs(units), std::chars_format::fixed,
                              valid_decimals(decimals))
                    .ptr;
    return with_currency(with_thousands(std::string(text, end)), units < 0, currency);
  }
  return with_currency(micros_text(*micros, valid_decimals(decimals)), units < 0 && *micros > 0,
                       currency);
}

std::string format_money(double units, std::string_view currency) {
  return format_money(units, currency, money_decimals(units));
}

void MoneyColumn::add(Money amount) {
  decimals_ = std::max(decimals_, money_decimals(amount));
}

void MoneyColumn::add(double units) {
  decimals_ = std::max(decimals_, money_decimals(units));
}

std::string MoneyColumn::text(Money amount, std::string_view currency) const {
  return format_money(amount, currency, decimals_);
}

std::string MoneyColumn::text(double units, std::string_view currency) const {
  return format_money(units, currency, decimals_);
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
