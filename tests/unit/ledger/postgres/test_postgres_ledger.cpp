// PostgresLedger beyond the conformance suite: its schema version is SQLite's, it reports an
// unreachable server as a ledger error after retrying (the path the supervisor's AsyncLedger and
// the spool take), and `ledger copy` carries a ledger across backends with its totals. Skipped
// without a test server (tests/unit/main.cpp).
#include <chrono>

#include <doctest/doctest.h>

#include "ledger/ledger_conformance.hpp"
#include "ledger/postgres/pg_test_support.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/ledger_copy.hpp"
#include "spendcap/ledger/postgres/postgres_ledger.hpp"
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"
#include "spendcap/ledger/sqlite/sqlite_store.hpp"
#include "test_support.hpp"

namespace spendcap::testing {

TEST_CASE("PostgreSQL ledger: the schema has SQLite's version, and opening twice migrates once") {
  TempDir dir;
  SqliteLedger sqlite(dir.file("ledger.db"), {});
  std::string url = fresh_pg_ledger_url("version");
  PostgresLedger first(url, {});
  PostgresLedger second(url, {});
  CHECK(first.schema_version() == sqlite.schema_version());
  CHECK(second.schema_version() == sqlite.schema_version());
  CHECK(first.url().find("postgresql://") == 0);
}

TEST_CASE("PostgreSQL ledger: an unreachable server is a ledger error after the retries") {
  PostgresOptions options;
  options.retry_timeout = std::chrono::milliseconds(300);
  auto started = std::chrono::steady_clock::now();
  try {
    // Port 1 on loopback: nothing listens, connections are refused at once.
    PostgresLedger ledger("postgresql://nobody:pw-not-shown@127.0.0.1:1/x", {}, options);
    FAIL("opened a ledger on a closed port");
  } catch (const Error& error) {
    std::string text = error.what();
    CHECK(text.find("unreachable or failing for") != std::string::npos);
    CHECK(text.find("pw-not-shown") == std::string::npos);
  }
  // It retried (with back-off) until the timeout, and not much longer.
  CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(300));
}

TEST_CASE("PostgreSQL ledger: ledger copy from SQLite keeps every run and total") {
  TempDir dir;
  TestClock clock(unix_time(2024, 3, 5, 10));
  LedgerOptions options;
  options.wall_clock = [&] { return clock.now(); };
  SqliteLedger sqlite(dir.file("ledger.db"), options);
  sqlite.apply_budgets({{{ScopeKind::team, "vision"}, usd(10), Period::month, std::nullopt}}, true);
  for (int i = 0; i < 5; ++i) {
    std::string id = "r" + std::to_string(i);
    REQUIRE(sqlite.begin_run(run_start(id, "vision", usd(1))).admitted);
    sqlite.finish_run(run_final(id, usd(0.25 * (i + 1))));
  }
  sqlite.place_stop_order({ScopeKind::team, "other"}, "frozen", "tester");
  REQUIRE(sqlite.begin_run(run_start("busy", "vision", usd(1))).admitted);

  std::string url = fresh_pg_ledger_url("copy");
  SqliteStore from(dir.file("ledger.db"), nullptr);
  {
    auto to = open_ledger_store(url);
    CHECK_THROWS_WITH_AS(copy_ledger(from, *to), doctest::Contains("unfinished"), Error);
  }
  sqlite.finish_run(run_final("busy", usd(0.5)));
  auto to = open_ledger_store(url);
  CopiedLedger copied = copy_ledger(from, *to);
  CHECK(copied.runs == 6);
  CHECK(copied.budgets == 1);
  CHECK(copied.stop_orders == 1);

  PostgresLedger postgres(url, options);
  CHECK(postgres.verify_aggregates().empty());
  REQUIRE(postgres.budgets().size() == 1);
  CHECK(postgres.budgets()[0].spent == sqlite.budgets()[0].spent);
  CHECK(postgres.budgets()[0].spent == usd(0.25 + 0.5 + 0.75 + 1 + 1.25 + 0.5));
  for (const char* id : {"r0", "r3", "busy"}) {
    auto lite = sqlite.find_run(id);
    auto post = postgres.find_run(id);
    REQUIRE(post);
    CHECK(post->spend == lite->spend);
    CHECK(post->status == lite->status);
    CHECK(post->started_at == lite->started_at);
    CHECK(post->finished_at == lite->finished_at);
  }
  CHECK(postgres.active_stop_orders().size() == 1);
  CHECK_THROWS_WITH_AS(copy_ledger(from, *to), doctest::Contains("already holds runs"), Error);
}

}  // namespace spendcap::testing
