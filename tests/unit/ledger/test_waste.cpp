// Waste (ledger/waste.hpp): the rule, case by case, and its SQL, which the rollups store, giving
// the rule's micro-units for every case on SQLite and on PostgreSQL (a report read from the rollups
// must equal one read from the runs).
#include <doctest/doctest.h>
#include <sqlite3.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "ledger/ledger_conformance.hpp"
#include "ledger/postgres/pg_test_support.hpp"
#include "spendcap/ledger/waste.hpp"
#include "test_support.hpp"

namespace spendcap::testing {
namespace {

const RunStatus kStatuses[] = {RunStatus::running,  RunStatus::succeeded, RunStatus::failed,
                               RunStatus::killed,   RunStatus::refused,   RunStatus::lost,
                               RunStatus::preempted};

TEST_CASE("Waste: a killed run that wrote its checkpoint wastes only the spend after it") {
  const Money spend = usd(2.41);
  // Tripped 60 s after launch, its checkpoint written at 50 s: a sixth is waste.
  CHECK(wasted_spend(RunStatus::killed, spend, 60.0, 50.0) == Money{401'666});
  // $0.125 over 9.7 s, written at 3.3 s: 125000 x 6.4 / 9.7 = 82474.2..., rounded down.
  CHECK(wasted_spend(RunStatus::killed, usd(0.125), 9.7, 3.3) == Money{82'474});
  // No checkpoint written (none caught the signal, --checkpoint-signal none, or no grace): whole.
  CHECK(wasted_spend(RunStatus::killed, spend, 60.0, std::nullopt) == spend);
  // Written at launch or before it (a clock step): whole; at or after the end: nothing.
  CHECK(wasted_spend(RunStatus::killed, spend, 60.0, 0.0) == spend);
  CHECK(wasted_spend(RunStatus::killed, spend, 60.0, -2.0) == spend);
  CHECK(wasted_spend(RunStatus::killed, spend, 60.0, 60.0) == Money{});
  CHECK(wasted_spend(RunStatus::killed, spend, 60.0, 75.0) == Money{});
  // No elapsed time to divide by: whole.
  CHECK(wasted_spend(RunStatus::killed, spend, std::nullopt, 50.0) == spend);
  CHECK(wasted_spend(RunStatus::killed, spend, 0.0, 50.0) == spend);
  CHECK(wasted_spend(RunStatus::killed, spend, std::nan(""), 50.0) == spend);
  // Within [0, spend] whatever the arithmetic: the largest amount, a sliver after the checkpoint.
  CHECK(wasted_spend(RunStatus::killed, kMaxMoney, 1e9, 1e-9) <= kMaxMoney);
  CHECK(wasted_spend(RunStatus::killed, Money{}, 60.0, 50.0) == Money{});

  // The other outcomes are as they were: a checkpoint changes nothing for them.
  for (RunStatus status : {RunStatus::failed, RunStatus::lost, RunStatus::preempted}) {
    CAPTURE(to_string(status));
    CHECK(wasted_spend(status, spend, 60.0, 50.0) == spend);
    CHECK(wasted_spend(status, spend, std::nullopt, std::nullopt) == spend);
  }
  for (RunStatus status : {RunStatus::succeeded, RunStatus::refused, RunStatus::running}) {
    CAPTURE(to_string(status));
    CHECK(wasted_spend(status, spend, 60.0, 50.0) == Money{});
    CHECK(wasted_spend(status, spend, 60.0, std::nullopt) == Money{});
  }
}

// Every case the SQL is checked on: each status, spend, elapsed time and written time.
struct Case {
  RunStatus status;
  Money spend;
  std::optional<double> elapsed, written;
  Money expected() const { return wasted_spend(status, spend, elapsed, written); }
};

std::vector<Case> cases() {
  const std::optional<double> none;
  std::vector<Case> all;
  for (RunStatus status : kStatuses) {
    for (std::int64_t micros : {0LL, 1LL, 7LL, 125'000LL, 999'999LL, 2'410'000LL, 123'456'789'012LL,
                                999'999'999'999'999LL}) {
      for (std::optional<double> elapsed :
           {none, std::optional(0.0), std::optional(-1.0), std::optional(9.7), std::optional(10.0),
            std::optional(3600.123), std::optional(1e9)}) {
        for (std::optional<double> written :
             {none, std::optional(-1.0), std::optional(0.0), std::optional(1e-9),
              std::optional(0.001), std::optional(3.3), std::optional(9.7), std::optional(10.0),
              std::optional(20.0), std::optional(3599.9)}) {
          all.push_back({status, Money{micros}, elapsed, written});
        }
      }
    }
  }
  return all;
}

std::string literal(const std::optional<double>& value) {
  if (!value) return "NULL";
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", *value);
  return text;
}

TEST_CASE("Waste: the rollups' SQL gives the rule's micro-units, case by case (SQLite)") {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(":memory:", &db) == SQLITE_OK);
  // The ledger's column types (REAL, INTEGER): as the runs table and the journal store them.
  REQUIRE(sqlite3_exec(db,
                       "CREATE TABLE runs (status TEXT NOT NULL, spend_micros INTEGER NOT NULL, "
                       "elapsed_seconds REAL, checkpoint_written_seconds REAL)",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  std::string sql = "SELECT " + rollup_sql::wasted_spend_sql(rollup_sql::Dialect::sqlite) +
                    ", typeof(" + rollup_sql::wasted_spend_sql(rollup_sql::Dialect::sqlite) +
                    ") FROM runs R";
  int checked = 0;
  for (const Case& c : cases()) {
    std::string row = "DELETE FROM runs; INSERT INTO runs VALUES ('" + to_string(c.status) + "', " +
                      std::to_string(c.spend.micros) + ", " + literal(c.elapsed) + ", " +
                      literal(c.written) + ")";
    REQUIRE(sqlite3_exec(db, row.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(q) == SQLITE_ROW);
    CAPTURE(row);
    CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 1))) == "integer");
    CHECK(sqlite3_column_int64(q, 0) == c.expected().micros);
    sqlite3_finalize(q);
    ++checked;
  }
  CHECK(checked == 7 * 8 * 7 * 10);
  sqlite3_close(db);
}

TEST_CASE("Waste: the rollups' SQL gives the rule's micro-units, case by case (postgresql)") {
  // psql on the test server (PGHOST, PGPORT: scripts/pg-test-server.sh env), in a temporary
  // table of the ledger's column types, one row out per case in order.
  std::vector<Case> all = cases();
  std::string values;
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    values += std::string(values.empty() ? "" : ",\n") + "(" + std::to_string(i) + ", '" +
              to_string(c.status) + "', " + std::to_string(c.spend.micros) + ", " +
              literal(c.elapsed) + "::double precision, " + literal(c.written) +
              "::double precision)";
  }
  TempDir dir;
  std::string script = dir.file("waste.sql"), out = dir.file("waste.out");
  {
    std::ofstream file(script);
    file << "CREATE TEMPORARY TABLE runs (n INTEGER, status TEXT NOT NULL, spend_micros BIGINT "
            "NOT NULL, elapsed_seconds DOUBLE PRECISION, checkpoint_written_seconds DOUBLE "
            "PRECISION);\nINSERT INTO runs VALUES\n"
         << values << ";\nSELECT " << rollup_sql::wasted_spend_sql(rollup_sql::Dialect::postgres)
         << ", pg_typeof(" << rollup_sql::wasted_spend_sql(rollup_sql::Dialect::postgres)
         << ") FROM runs R ORDER BY n;\n";
  }
  std::string command = "psql -X -q -v ON_ERROR_STOP=1 -At -F ' ' -f " + script + " > " + out;
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream answers(out);
  std::string line;
  size_t i = 0;
  for (; std::getline(answers, line); ++i) {
    REQUIRE(i < all.size());
    const Case& c = all[i];
    CAPTURE(to_string(c.status));
    CAPTURE(c.spend.micros);
    CAPTURE(literal(c.elapsed));
    CAPTURE(literal(c.written));
    CHECK(line == std::to_string(c.expected().micros) + " bigint");
  }
  CHECK(i == all.size());
}

}  // namespace
}  // namespace spendcap::testing
