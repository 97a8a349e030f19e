// A budget's members (issue 15) are kept with its rule in the ledger, so that a shared ledger
// checks them whatever policy its users load; a list that cannot be read admits nobody.
#include <sqlite3.h>

#include <doctest/doctest.h>

#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"
#include "test_support.hpp"

namespace spendcap {
namespace {

using testing::TempDir;

BudgetRule find_rule(Ledger& ledger, const std::string& name) {
  for (const BudgetRule& rule : ledger.budget_rules()) {
    if (rule.scope.name == name) return rule;
  }
  FAIL("no rule for " << name);
  return {};
}

TEST_CASE("SqliteLedger: a budget's members are kept with its rule") {
  TempDir dir;
  std::string path = dir.file("ledger.db");
  SqliteLedger ledger(path, {});
  ledger.apply_budgets({BudgetRule{{ScopeKind::team, "vision"},
                                   Money::from_micros(100'000'000),
                                   Period::month,
                                   std::nullopt,
                                   {"vision", "ml-admins"}},
                        BudgetRule{{ScopeKind::team, "open"}, Money::from_micros(1'000'000)}},
                       true);
  CHECK(find_rule(ledger, "vision").member_groups ==
        std::vector<std::string>{"vision", "ml-admins"});
  CHECK(find_rule(ledger, "open").member_groups.empty());

  SUBCASE("a locked policy's members win over the row's") {
    LedgerOptions options;
    options.budget_caps = {BudgetRule{{ScopeKind::team, "vision"},
                                      Money::from_micros(50'000'000),
                                      Period::month,
                                      std::nullopt,
                                      {"locked-group"}},
                           BudgetRule{{ScopeKind::team, "open"}, Money::from_micros(1'000'000)}};
    SqliteLedger capped(path, options);
    CHECK(find_rule(capped, "vision").member_groups == std::vector<std::string>{"locked-group"});
    CHECK(find_rule(capped, "vision").amount == Money::from_micros(50'000'000));
    CHECK(find_rule(capped, "open").member_groups.empty());
  }

  SUBCASE("a member list written by hand that cannot be read admits nobody") {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "UPDATE budgets SET member_groups = 'vision' WHERE scope_name = 'open'",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    std::vector<std::string> groups = find_rule(ledger, "open").member_groups;
    REQUIRE(groups.size() == 1);
    CHECK(groups.front() == "(unreadable member list)");
  }
}

}  // namespace
}  // namespace spendcap
