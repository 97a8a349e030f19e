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

// The one rule for money in text: zero and amounts of a cent or more in cents ("$1.23",
// "$0.00"), below a cent 4 decimals ("$0.0042"), below a hundredth of a cent 6 ("$0.000042"), each
// rounded half away from zero; a negative amount as its magnitude ("-$0.0042"); thousands grouped
// ("$1,234.50"); other currencies as "0.07 EUR". Never an exponent. Machine outputs (json, csv,
// FOCUS) carry the full number instead (to_decimal, money_to_json).
std::string format_money(Money amount, std::string_view currency = "USD");
// With the decimals given (2, 4 or 6): a table column's (MoneyColumn), so that all its cells agree.
std::string format_money(Money amount, std::string_view currency, int decimals);
// An amount that need not be a whole number of micro-units (an estimate, a cost per 1000 units):
// rounded to the micro-unit, then as above.
std::string format_money(double units, std::string_view currency = "USD");
std::string format_money(double units, std::string_view currency, int decimals);
// The decimals the rule gives an amount: 2, 4 or 6. $0.00995 and more is 2 ("$0.01": 4 decimals
// would print "$0.0100"), $0.0001 and more 4, a nonzero amount below that 6.
int money_decimals(Money amount);
int money_decimals(double units);

// The amounts of one table column: each printed with the decimals the most precise of them
// needs, so that a column never mixes "$0.00" and "$0.0042" (add every amount, then text each).
class MoneyColumn {
 public:
  void add(Money amount);
  void add(double units);
  int decimals() const { return decimals_; }
  std::string text(Money amount, std::string_view currency) const;
  std::string text(double units, std::string_view currency) const;

 private:
  int decimals_ = 2;
};

// A price per unit (per step, per 1000 tokens), which can be far below a micro-unit: fixed-point
// with at least 4 significant digits, never an exponent ("$0.00004617", "$1.25", "$1234.50").
// Every money figure spendcap prints goes through format_money or this.
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
