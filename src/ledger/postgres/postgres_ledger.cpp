// PostgresLedger: BudgetLedger over PostgresStore. Contract in postgres_ledger.hpp.
#include "spendcap/ledger/postgres/postgres_ledger.hpp"

namespace spendcap {

namespace {

PostgresOptions with_password(PostgresOptions options, const std::string& password) {
  if (!password.empty()) options.password = password;
  return options;
}

}  // namespace

PostgresLedger::PostgresLedger(const std::string& url, LedgerOptions options,
                               PostgresOptions postgres_options)
    : PostgresLedger(std::make_unique<PostgresStore>(
                         url, options.wall_clock,
                         with_password(std::move(postgres_options), options.postgres_password)),
                     options) {}

// The base owns the store (it is built first); postgres_ is the same object, seen with its extras.
PostgresLedger::PostgresLedger(std::unique_ptr<PostgresStore> store, const LedgerOptions& options)
    : BudgetLedger(std::move(store), options),
      postgres_(static_cast<PostgresStore&>(this->store())) {}

}  // namespace spendcap
