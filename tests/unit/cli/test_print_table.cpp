// print_table (runs, budgets, ps, stop --list): the amounts of money of one column share their
// decimals (issue 40 item 7).
#include <doctest/doctest.h>

#include <iostream>
#include <sstream>

#include "spendcap/cli/runs.hpp"

using namespace spendcap;

namespace {
std::string printed(const std::vector<std::vector<TableCell>>& rows) {
  std::ostringstream out;
  std::streambuf* before = std::cout.rdbuf(out.rdbuf());
  print_table(rows);
  std::cout.rdbuf(before);
  return out.str();
}
}  // namespace

TEST_CASE("print_table: a money column prints every cell with the decimals the most needs") {
  std::string text = printed(
      {{"RUN", "SPEND", "BUDGET"},
       {"a", TableCell::money(Money{1'000'000}, "USD"), "-"},
       {"b", TableCell::money(Money{4'200}, "USD"),
        TableCell::money(Money{500'000}, "USD") + " (max_run of team:t)"},
       {"c", TableCell::money(Money{0}, "USD"), TableCell::money(Money{2'000'000}, "USD")}});
  CHECK(text ==
        "RUN  SPEND    BUDGET\n"
        "a    $1.0000  -\n"
        "b    $0.0042  $0.50 (max_run of team:t)\n"
        "c    $0.0000  $2.00\n");
  // Two amounts in one cell follow their column too; other currencies alike.
  text = printed({{"USED"},
                  {TableCell::money(Money{3'000'000}, "EUR") + " (overrun " +
                   TableCell::money(Money{42}, "EUR") + ")"}});
  CHECK(text == "USED\n3.000000 EUR (overrun 0.000042 EUR)\n");
  // Text is escaped for the terminal, as before.
  CHECK(printed({{std::string("a\x1b[31mb")}}).find('\x1b') == std::string::npos);
}
