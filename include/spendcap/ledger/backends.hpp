// Opening a ledger by url: the one place that knows every backend, so that the rules (ledger/)
// never depend on a storage engine and a command links only what it opens.
#pragma once

#include <memory>
#include <string>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap {

// The default ledger: $XDG_DATA_HOME/spendcap/ledger.db (~/.local/share/spendcap/ledger.db).
std::string default_ledger_url();

// Opens (creating when needed) the ledger at `url`: "sqlite:/path", "/path" or a relative path, or
// "postgresql://..." (postgres_store.hpp). Throws Error naming the url.
std::unique_ptr<Ledger> open_ledger(const std::string& url, LedgerOptions options = {});

// The store alone of the ledger at `url` (`ledger copy`), created when missing; the host's clock
// for SQLite, the server's for PostgreSQL.
std::unique_ptr<LedgerStore> open_ledger_store(const std::string& url);

}  // namespace spendcap
