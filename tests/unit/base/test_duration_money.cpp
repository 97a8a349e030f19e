#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <limits>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/base/money.hpp"

using namespace spendcap;
using namespace std::chrono;

TEST_CASE("durations parse as users write them") {
  CHECK(parse_duration("90s") == seconds(90));
  CHECK(parse_duration("5m") == minutes(5));
  CHECK(parse_duration("1h30m") == minutes(90));
  CHECK(parse_duration("250ms") == milliseconds(250));
  CHECK(parse_duration("1.5s") == milliseconds(1500));
  CHECK(parse_duration("2d") == hours(48));
  CHECK(parse_duration("0") == seconds(0));
  CHECK(parse_duration("60") == seconds(60));  // a bare number is seconds, as with timeout(1)
}

TEST_CASE("bad durations are refused") {
  for (const char* bad :
       {"", "-1s", "5x", "s", "1h30", "nan", "inf", "1e3s", "1..5s", "5 s", "999999999h"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_duration(bad).has_value());
  }
  CHECK_THROWS_WITH_AS(parse_duration_or_throw("5x", "--grace"),
                       doctest::Contains("--grace 5x: not a duration"), Error);
}

TEST_CASE("durations print compactly") {
  CHECK(format_duration(seconds(7)) == "7s");
  CHECK(format_duration(milliseconds(250)) == "250ms");
  CHECK(format_duration(milliseconds(1250)) == "1.25s");
  CHECK(format_duration(minutes(90)) == "1h30m");
  CHECK(format_duration(seconds(3661)) == "1h1m1s");
}

TEST_CASE("money parses exactly into micro-units") {
  CHECK(parse_money("0.10")->micros == 100000);
  CHECK(parse_money("50")->micros == 50000000);
  CHECK(parse_money("$1.5")->micros == 1500000);
  CHECK(parse_money("0.000001")->micros == 1);
  for (const char* bad : {"", "-1", "abc", "nan", "NaN", "inf", "1e3", "0.0000001", "1.2.3", ".",
                          "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_money(bad).has_value());
  }
  CHECK_FALSE(money_from_number(-0.01).has_value());
  CHECK_FALSE(money_from_number(std::nan("")).has_value());
  CHECK(money_from_number(4.10)->micros == 4100000);
}

TEST_CASE("money prints with sensible precision") {
  CHECK(format_money(Money{70000}) == "$0.07");
  CHECK(format_money(Money{36000000}) == "$36.00");
  CHECK(format_money(Money{1500000}, "EUR") == "1.50 EUR");
  CHECK(to_decimal(Money{100000}) == "0.1");
  CHECK(to_decimal(Money{36000000}) == "36");
  CHECK(to_decimal(Money{125}) == "0.000125");
}

TEST_CASE("money in text: cents from a cent up, 4 decimals below a cent, 6 below 0.01 cent") {
  // Issue 40 item 7: "$0.0000" beside "$0.00", "$0.0010" beside "$1.00". One rule everywhere.
  CHECK(format_money(Money{0}) == "$0.00");
  CHECK(format_money(Money{4'999}) == "$0.0050");  // 0.004999
  CHECK(format_money(Money{5'000}) == "$0.0050");
  CHECK(format_money(Money{4'200}) == "$0.0042");
  CHECK(format_money(Money{9'949}) == "$0.0099");
  // 0.0099999 is no amount of micro-units: it is read as 0.01. Just below: at 4 decimals it
  // would say "$0.0100", so a cent.
  CHECK(money_from_number(0.0099999) == Money{10'000});
  CHECK(format_money(*money_from_number(0.0099999)) == "$0.01");
  CHECK(format_money(Money{9'999}) == "$0.01");
  CHECK(format_money(Money{9'950}) == "$0.01");
  CHECK(format_money(Money{10'000}) == "$0.01");
  CHECK(format_money(Money{14'999}) == "$0.01");
  CHECK(format_money(Money{15'000}) == "$0.02");  // half away from zero
  CHECK(format_money(Money{500'000}) == "$0.50");
  CHECK(format_money(Money{1'005'000}) == "$1.01");  // exact: no double's 1.00499...
  // Below 0.01 cent: 6 decimals (0.0000999 is read as 0.0001: 4 decimals).
  CHECK(format_money(Money{99}) == "$0.000099");
  CHECK(format_money(Money{42}) == "$0.000042");
  CHECK(format_money(Money{1}) == "$0.000001");
  CHECK(format_money(*money_from_number(0.0000999)) == "$0.0001");
  CHECK(format_money(Money{100}) == "$0.0001");
  // Negative amounts by their magnitude.
  CHECK(format_money(Money{-4'200}) == "-$0.0042");
  CHECK(format_money(Money{-42}) == "-$0.000042");
  CHECK(format_money(Money{-1'500'000}) == "-$1.50");
  CHECK(format_money(Money{-4'200}, "EUR") == "-0.0042 EUR");
  // Thousands grouped, exact to the largest amount accepted.
  CHECK(format_money(Money{1'234'500'000}) == "$1,234.50");
  CHECK(format_money(Money{999'994'999}) == "$999.99");
  CHECK(format_money(Money{999'995'000}) == "$1,000.00");
  CHECK(format_money(Money{3'600'000'000}) == "$3,600.00");
  CHECK(format_money(kMaxMoney) == "$1,000,000,000,000.00");
  CHECK(format_money(Money{1'234'567'000'000}, "EUR") == "1,234,567.00 EUR");
  CHECK(format_money(Money{INT64_MIN}) == "-$9,223,372,036,854.78");
  // Other currencies: the same decimals.
  CHECK(format_money(Money{42}, "EUR") == "0.000042 EUR");
  CHECK(format_money(Money{0}, "GBP") == "0.00 GBP");
  // Decimals given (a table column's).
  CHECK(format_money(Money{1'000'000}, "USD", 4) == "$1.0000");
  CHECK(format_money(Money{0}, "USD", 6) == "$0.000000");
  CHECK(format_money(Money{4'242}, "USD", 2) == "$0.00");
  // An amount that is no whole number of micro-units (an estimate): rounded to one, then the
  // same rule; never an exponent.
  CHECK(format_money(27.777777, "USD") == "$27.78");
  CHECK(format_money(0.0042, "USD") == "$0.0042");
  CHECK(format_money(0.00000042, "USD") == "$0.000000");
  CHECK(format_money(-0.0042, "USD") == "-$0.0042");
  CHECK(format_money(1e20, "USD") == "$100,000,000,000,000,000,000.00");
  CHECK(format_money(0.0, "USD") == "$0.00");
  CHECK(money_decimals(Money{0}) == 2);
  CHECK(money_decimals(Money{9'949}) == 4);
  CHECK(money_decimals(Money{99}) == 6);
  CHECK(money_decimals(1e-9) == 6);
}

TEST_CASE("a money column prints every amount with the decimals its most precise one needs") {
  MoneyColumn column;
  CHECK(column.text(Money{1'000'000}, "USD") == "$1.00");  // nothing added: cents
  column.add(Money{1'000'000});
  column.add(Money{0});
  CHECK(column.decimals() == 2);
  column.add(Money{4'200});
  CHECK(column.decimals() == 4);
  CHECK(column.text(Money{1'000'000}, "USD") == "$1.0000");
  CHECK(column.text(Money{4'200}, "USD") == "$0.0042");
  CHECK(column.text(Money{0}, "USD") == "$0.0000");
  column.add(Money{1'000'000'000});  // a larger amount lowers nothing
  CHECK(column.decimals() == 4);
  column.add(0.00002);
  CHECK(column.decimals() == 6);
  CHECK(column.text(1.5, "EUR") == "1.500000 EUR");
}

TEST_CASE("cost is rate times time, in 128-bit arithmetic") {
  Money rate{36000000};  // 36/h = 0.01/s
  CHECK(cost_of(rate, seconds(7)).micros == 70000);
  CHECK(cost_of(rate, milliseconds(1)).micros == 10);
  // A year at a million dollars an hour does not overflow.
  CHECK(cost_of(Money{1'000'000'000'000LL}, hours(24 * 365)).micros ==
        1'000'000'000'000LL * 24 * 365);
  // Rounding up is for reserves: never too small.
  CHECK(cost_of_rounded_up(Money{1}, seconds(1)).micros == 1);
  CHECK(cost_of(Money{1}, seconds(1)).micros == 0);
}

TEST_CASE("time_to_cost inverts cost_of") {
  Money rate{36000000};
  CHECK(time_to_cost(rate, Money{70000}) == seconds(7));
  CHECK(time_to_cost(Money{0}, Money{1}) == Nanos::max());
  for (std::int64_t micros : {1LL, 7LL, 99999LL, 123456789LL}) {
    Nanos t = time_to_cost(Money{3333333}, Money{micros});
    CHECK(cost_of(Money{3333333}, t).micros >= micros);
    CHECK(cost_of(Money{3333333}, t - Nanos(1)).micros < micros);
  }
}

TEST_CASE("a duration gives each unit once, largest first") {
  CHECK(parse_duration("1h30m") == minutes(90));
  CHECK(parse_duration("1d2h3m4s5ms").has_value());
  CHECK_FALSE(parse_duration("1h1h").has_value());
  CHECK_FALSE(parse_duration("5m1h").has_value());
  CHECK_FALSE(parse_duration("1s500ms1s").has_value());
  CHECK_THROWS_WITH_AS(parse_duration_or_throw("1h1h", "--grace"),
                       doctest::Contains("--grace 1h1h: gives the unit h twice"), Error);
  CHECK_THROWS_WITH_AS(parse_duration_or_throw("5m1h", "--grace"),
                       doctest::Contains("--grace 5m1h: gives h after the smaller unit m"), Error);
}

TEST_CASE("money products never wrap") {
  Money huge = parse_money("1000000000000").value();  // kMaxMoney per hour
  Nanos long_grace = hours(5000);
  CHECK(cost_of(huge, long_grace) == kMaxMoney);
  CHECK(cost_of_rounded_up(huge, long_grace) == kMaxMoney);
  CHECK_FALSE(checked_cost_of_rounded_up(huge, long_grace).has_value());
  CHECK(checked_cost_of_rounded_up(parse_money("36").value(), hours(2)) ==
        parse_money("72").value());
  CHECK(cost_of(Money{std::numeric_limits<std::int64_t>::max()}, Nanos::max()) == kMaxMoney);
  CHECK_FALSE(checked_times(huge, 2).has_value());
  CHECK_FALSE(checked_times(Money{1}, -1).has_value());
  CHECK(checked_times(parse_money("1.5").value(), 4) == parse_money("6").value());
}
