// SqliteStore: the LedgerStore (ledger_store.hpp) in one SQLite file on this host. The rules are
// BudgetLedger's; SqliteLedger (sqlite_ledger.hpp) puts the two together.
//
// The file: WAL, synchronous=NORMAL, a lock timeout (default 10 s); every write is one
// BEGIN IMMEDIATE transaction, which takes the database's single write lock: that is the "lock the
// scopes' budget rows first, in one fixed order" of the ceiling rule, for SQLite (lock_scopes has
// nothing left to do). A transaction that finds the file locked is retried until the lock
// timeout, then throws Error naming the file. Several processes (and several connections in one
// process) may share the file; one SqliteStore is used by one thread at a time. Opening refuses a
// network filesystem (WAL needs shared memory and POSIX locks that NFS, Lustre, CIFS... do not
// give) and points to PostgreSQL. In a group-writable directory (a shared ledger such as
// /var/lib/spendcap, group spendcap) the file is created 0660 so that group members record their
// runs; only the file's owner (or root) changes budgets. That is enforced by spendcap, not by
// SQLite: a group member with the sqlite3 shell could still edit rows.
//
// Budgets are summed from per-day usage rows: each run adds to the row of each of its named scopes
// (team, experiment, project, user) for the UTC day it started. A budget period (day, ISO week,
// calendar month, total) is then a sum over at most 31 rows (all of the scope's days for total),
// so budgets can be added or change period without a backfill and `spendcap budgets` stays fast
// over millions of runs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap {

// The name of the network filesystem whose statfs f_type is `f_type` ("NFS", "Lustre", ...), or
// nullopt for a local one.
std::optional<std::string> network_filesystem_name(long f_type);

// The file of a sqlite ledger url ("sqlite:/x", "sqlite:///x", "/x", "rel/x"), or nullopt when the
// url names another backend ("postgresql://...", "mysql://...").
std::optional<std::string> sqlite_path_of_url(const std::string& url);

struct SqliteOptions {
  // How long a transaction waits for the file's write lock before it throws.
  Nanos lock_timeout = std::chrono::seconds(10);
  // Test seam: the effective uid that caller_is_owner() compares with the file's owner.
  std::optional<uid_t> effective_uid;
};

class SqliteStore final : public LedgerStore {
 public:
  // Opens `path`, creating it (and its missing parent directories, 0700) with the current schema.
  // `wall_clock` is the ledger's clock in unix seconds (the host's when empty). Throws Error
  // naming the ledger for a network filesystem, a file that is not a spendcap ledger, a schema
  // newer than this build knows, or any SQLite failure.
  SqliteStore(const std::string& path, std::function<double()> wall_clock,
              SqliteOptions sqlite_options = {});
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  std::string url() const override;
  void transact(Access access, const std::function<void(StoreTxn&)>& body) override;
  bool caller_is_owner() override;
  bool is_personal() override;
  std::string owner_name() override;
  // Folds the rollups' journal (which writes fold only every few dozen rows), waiting at most
  // 200 ms for the write lock; a ledger it cannot write, or one locked longer, is left as it is.
  void settle_rollups() override;

  // ---- for tests, benchmarks and repair ----
  const std::string& path() const;
  int schema_version();
  static int latest_schema_version();  // what a ledger opened by this spendcap is migrated to
  // Compares the usage rows with a recomputation from the runs table; one line per difference
  // ("team:vision day 19700: held 300000 != 200000"), empty when they agree.
  std::vector<std::string> verify_aggregates();
  // Recomputes every usage row and every rollup (rollup.hpp) from the runs table (after a bulk
  // import of runs, or a repair).
  void rebuild_aggregates();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spendcap
