// SqliteLedger: the Ledger (ledger.hpp) in one SQLite file on this host: the rules of BudgetLedger
// (budget_ledger.hpp) over a SqliteStore (sqlite_store.hpp: the file, its locking, permissions and
// schema). One SqliteLedger is used by one thread at a time.
//
// begin_run in warn mode, where enforce mode would refuse: admitted, with `refusal` and
// `refused_by` saying why it would have been refused (also recorded as its would-stop reason).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "spendcap/ledger/budget_ledger.hpp"
#include "spendcap/ledger/grant_rule.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/sqlite/sqlite_store.hpp"

namespace spendcap {

class SqliteLedger final : public BudgetLedger {
 public:
  // Opens `path` as SqliteStore does (and throws as it does); `options.wall_clock` is the ledger's
  // clock.
  SqliteLedger(const std::string& path, LedgerOptions options, SqliteOptions sqlite_options = {});

  // ---- for tests, benchmarks and repair (SqliteStore's) ----
  const std::string& path() const { return sqlite_.path(); }
  int schema_version() { return sqlite_.schema_version(); }
  std::vector<std::string> verify_aggregates() { return sqlite_.verify_aggregates(); }
  void rebuild_aggregates() { sqlite_.rebuild_aggregates(); }

 private:
  SqliteLedger(std::unique_ptr<SqliteStore> store, const LedgerOptions& options);
  SqliteStore& sqlite_;  // owned by BudgetLedger
};

}  // namespace spendcap
