// Opening a ledger by url: the one place that knows every backend.
#include "spendcap/ledger/backends.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/postgres/postgres_ledger.hpp"
#include "spendcap/ledger/sqlite/sqlite_ledger.hpp"

namespace spendcap {

std::string default_ledger_url() {
  return "sqlite:" + xdg_dir(XdgDir::data) + "/spendcap/ledger.db";
}

std::unique_ptr<Ledger> open_ledger(const std::string& url, LedgerOptions options) {
  if (is_postgres_url(url)) return std::make_unique<PostgresLedger>(url, std::move(options));
  std::optional<std::string> path = sqlite_path_of_url(url);
  if (!path) {
    throw Error("ledger " + redact_password(url), "unknown kind of ledger",
                "use sqlite:/path/ledger.db, a path, or postgresql://...");
  }
  if (path->empty())
    throw Error("ledger " + redact_password(url), "no file named", "write sqlite:/path/ledger.db");
  struct stat file_status {};
  if (!options.create_if_missing && ::stat(path->c_str(), &file_status) != 0) {
    throw Error("ledger " + url, "cannot open it: " + errno_text(errno),
                "the runner's owner creates it with scripts/install-shared-runner.sh");
  }
  return std::make_unique<SqliteLedger>(*path, std::move(options));
}

std::unique_ptr<LedgerStore> open_ledger_store(const std::string& url) {
  if (is_postgres_url(url)) return std::make_unique<PostgresStore>(url, nullptr);
  std::optional<std::string> path = sqlite_path_of_url(url);
  if (!path || path->empty()) {
    throw Error("ledger " + redact_password(url), "unknown kind of ledger",
                "use sqlite:/path/ledger.db, a path, or postgresql://...");
  }
  return std::make_unique<SqliteStore>(*path, nullptr);
}

}  // namespace spendcap
