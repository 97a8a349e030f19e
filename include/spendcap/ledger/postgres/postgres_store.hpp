// PostgresStore: the LedgerStore (ledger_store.hpp) in a PostgreSQL database, for runners on many
// hosts (cluster nodes whose shared filesystems SQLite cannot use). The rules are BudgetLedger's;
// PostgresLedger (postgres_ledger.hpp) puts the two together. libpq is loaded at run time
// (libpq.hpp), only when a postgresql:// ledger is opened.
//
// The url is libpq's ("postgresql://user@host:5432/db?options=-csearch_path%3Dteam_a"); the
// password comes from PGPASSWORD, ~/.pgpass or the service file as libpq finds it, never from
// spendcap, and url() never holds one. The ledger's tables live in the connection's current
// schema (the first of its search_path), created and migrated by spendcap with the same version
// numbers as the SQLite schema.
//
// Roles, enforced by the server: the owner of that schema (or a member of its role, or a
// superuser) is the ledger's owner, who applies budgets. Members of the role spendcap_runner
// (created by the first migration when the owner may create roles) read every table but write
// only through the ledger's SECURITY DEFINER functions: they insert runs (recorded with their
// login role), update their own runs (and charge another's lost run its ceiling once it is due
// by the server's clock), and place and clear their own stop orders. Usage rows are kept by a
// trigger on the runs table, so nobody writes them. budgets: owner only. The webhook outbox is
// under row-level security keyed on the login role (a runner sees and changes only its own
// entries); a runner accepts results only of runs it admitted (spendcap_accept_result).
//
// Ceilings: lock_scopes takes a transaction-level advisory lock per scope, in the sorted order
// BudgetLedger gives, through spendcap_lock_scopes: the key hashes a salt only the owner reads,
// and a role other than the owner's gets only the scopes of runs due their ceiling (so no user
// can hold another team's lock, issue 38 item 7). Transactions are READ COMMITTED (a write) or
// REPEATABLE READ READ ONLY (a read); serialization failures (40001), deadlocks (40P01) and lost
// connections are retried with back-off (a new connection each time) until `retry_timeout`, then
// Error names the ledger and the last failure, as SQLite's lock timeout does: the supervisor's
// AsyncLedger then keeps the run on its granted ceiling and the spool keeps its final row. The
// server's clock_timestamp() is the ledger's clock unless LedgerOptions::wall_clock is set (tests).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/ledger/ledger_store.hpp"

namespace spendcap {

// Whether `url` names a PostgreSQL ledger (postgresql:// or postgres://).
bool is_postgres_url(const std::string& url);

struct PostgresOptions {
  // How long a transaction is retried after lost connections, deadlocks and serialization
  // failures before it throws.
  Nanos retry_timeout = std::chrono::seconds(10);
  // The connection's password (ledger_password_file); "" for none. Never printed.
  std::string password;
};

class PostgresStore final : public LedgerStore {
 public:
  // Connects to `url` and creates or migrates the schema (the owner; a runner finding an older
  // schema is told to have the owner upgrade it). `wall_clock`: the ledger's clock in unix
  // seconds, the server's when empty. Throws Error naming the ledger (password redacted).
  PostgresStore(const std::string& url, std::function<double()> wall_clock,
                PostgresOptions options = {});
  ~PostgresStore() override;
  PostgresStore(const PostgresStore&) = delete;
  PostgresStore& operator=(const PostgresStore&) = delete;

  std::string url() const override;
  void transact(Access access, const std::function<void(StoreTxn&)>& body) override;
  bool caller_is_owner() override;
  // A PostgreSQL ledger is shared: its budgets change only through `spendcap budgets apply`.
  bool is_personal() override { return false; }
  std::string owner_name() override;
  // The grant rule in the server (spendcap_admit, spendcap_heartbeat): one round trip each.
  std::optional<ServerGrant> admit_in_server(const RunRecord& run, Money want,
                                             const std::vector<BudgetRule>& caps) override;
  std::optional<ServerGrant> heartbeat_in_server(
      const std::string& run_id, Money spend, Money want, const std::vector<BudgetRule>& caps,
      const std::optional<HeartbeatProgress>& progress) override;
  std::optional<std::string> finish_in_server(const RunRecord& final) override;

  // ---- for tests, benchmarks and `ledger copy` ----
  int schema_version();
  // The usage rows against a recomputation from the runs (as SqliteStore's); empty when they agree.
  std::vector<std::string> verify_aggregates();
  // The schema the tables are in.
  std::string schema();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spendcap
