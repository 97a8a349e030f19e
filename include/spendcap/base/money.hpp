// Money as int64 micro-units of the policy currency: sums are exact, rounding happens only when
// printing. Rates are money per hour; cost = rate x elapsed monotonic time, in 128-bit arithmetic.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "spendcap/base/duration.hpp"

namespace spendcap {

struct Money {
  std::int64_t micros = 0;

  static constexpr Money from_micros(std::int64_t micros) { return Money{micros}; }
  double units() const { return static_cast<double>(micros) / 1e6; }

  auto operator<=>(const Money&) const = default;
  Money operator+(Money other) const { return Money{micros + other.micros}; }
  Money operator-(Money other) const { return Money{micros - other.micros}; }
  Money& operator+=(Money other) {
    micros += other.micros;
    return *this;
  }
  Money& operator-=(Money other) {
    micros -= other.micros;
    return *this;
  }
};

// The largest amount accepted anywhere (a trillion): keeps every sum far from overflow.
inline constexpr Money kMaxMoney = Money{1'000'000'000'000'000'000LL};

// "0.10", "50", "1234.5": plain decimals, at most 6 fractional digits. nullopt for negative, NaN,
// infinite, exponent forms, garbage, or more than kMaxMoney.
std::optional<Money> parse_money(std::string_view text);
Money parse_money_or_throw(std::string_view text, std::string_view what);

// A JSON number from a policy file; nullopt for negative, non-finite or too large.
std::optional<Money> money_from_number(double value);

// "$0.0700" below one unit, "$36.00" above, "$0.000022" for an amount a 4-decimal figure would
// show as $0.0000; other currencies as "0.07 EUR". Never an exponent.
std::string format_money(Money amount, std::string_view currency = "USD");
// A price per unit (per step, per 1000 tokens), which can be far below a micro-unit: fixed-point
// with at least 4 significant digits, never an exponent ("$0.00004617", "$1.25", "$1234.50").
// Every money figure spendcap prints goes through one of these two.
std::string format_unit_price(double amount, std::string_view currency = "USD");
// The amount as a number for JSON.
double money_to_json(Money amount);
// The amount as a plain decimal, trailing zeros trimmed: "0.1", "36", "0.000125".
std::string to_decimal(Money amount);

// What `rate_per_hour` costs over `elapsed`, rounded down to the micro-unit. Never wraps: a cost
// beyond kMaxMoney is kMaxMoney (callers that must refuse it use checked_cost_of_rounded_up).
Money cost_of(Money rate_per_hour, Nanos elapsed);
// The same, rounded up: for reserves, which must never be too small. Saturates as cost_of.
Money cost_of_rounded_up(Money rate_per_hour, Nanos elapsed);
// cost_of_rounded_up, or nullopt when the cost is beyond kMaxMoney.
std::optional<Money> checked_cost_of_rounded_up(Money rate_per_hour, Nanos elapsed);
// amount x count, or nullopt when it is negative or beyond kMaxMoney.
std::optional<Money> checked_times(Money amount, std::int64_t count);
// The shortest time over which `rate_per_hour` costs at least `amount`. Nanos::max() at rate 0.
Nanos time_to_cost(Money rate_per_hour, Money amount);

}  // namespace spendcap
