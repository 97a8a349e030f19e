// SqliteLedger: BudgetLedger over SqliteStore. Contract in sqlite_ledger.hpp.
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"

namespace spendcap {

SqliteLedger::SqliteLedger(const std::string& path, LedgerOptions options,
                           SqliteOptions sqlite_options)
    : SqliteLedger(std::make_unique<SqliteStore>(path, options.wall_clock, sqlite_options),
                   options) {}

// The base owns the store (it is built first); sqlite_ is the same object, seen with its extras.
SqliteLedger::SqliteLedger(std::unique_ptr<SqliteStore> store, const LedgerOptions& options)
    : BudgetLedger(std::move(store), options), sqlite_(static_cast<SqliteStore&>(this->store())) {}

}  // namespace spendcap
