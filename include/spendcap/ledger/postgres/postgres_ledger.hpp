// PostgresLedger: the Ledger (ledger.hpp) in a PostgreSQL database shared by many hosts: the
// rules of BudgetLedger (budget_ledger.hpp) over a PostgresStore (postgres_store.hpp: the
// connection, its retries, the schema and its roles). One PostgresLedger is used by one thread at
// a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "spendcap/ledger/budget_ledger.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/postgres/postgres_store.hpp"

namespace spendcap {

class PostgresLedger final : public BudgetLedger {
 public:
  // Connects as PostgresStore does (and throws as it does); `options.wall_clock` is the ledger's
  // clock when set, the server's otherwise.
  PostgresLedger(const std::string& url, LedgerOptions options,
                 PostgresOptions postgres_options = {});

  // ---- for tests, benchmarks and `ledger copy` (PostgresStore's) ----
  int schema_version() { return postgres_.schema_version(); }
  std::vector<std::string> verify_aggregates() { return postgres_.verify_aggregates(); }

 private:
  PostgresLedger(std::unique_ptr<PostgresStore> store, const LedgerOptions& options);
  PostgresStore& postgres_;  // owned by BudgetLedger
};

}  // namespace spendcap
