// PostgresLedger beyond the conformance suite: its schema version is SQLite's, it reports an
// unreachable server as a ledger error after retrying (the path the supervisor's AsyncLedger and
// the spool take), `ledger copy` carries a ledger across backends with its totals, and a read
// transaction whose COMMIT is not waited for still ends at once. Skipped without a test server
// (tests/unit/main.cpp).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <doctest/doctest.h>

#include "ledger/ledger_conformance.hpp"
#include "ledger/postgres/pg_test_support.hpp"
#include "spendcap/base/dynamic_library.hpp"
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

namespace {

// One query's first value on a connection of the test's own (libpq loaded here, as the store
// does): what the server says about the store's session, from outside it.
class OutsideSession {
 public:
  explicit OutsideSession(const std::string& url) : libpq_("libpq.so.5", "libpq") {
    auto connect = libpq_.function<void* (*)(const char*)>("PQconnectdb");
    conn_ = connect(url.c_str());
  }
  ~OutsideSession() { libpq_.function<void (*)(void*)>("PQfinish")(conn_); }
  OutsideSession(const OutsideSession&) = delete;
  OutsideSession& operator=(const OutsideSession&) = delete;

  // "" when there is no row.
  std::string value(const std::string& sql) {
    void* result = libpq_.function<void* (*)(void*, const char*)>("PQexec")(conn_, sql.c_str());
    std::string text;
    if (libpq_.function<int (*)(const void*)>("PQntuples")(result) > 0) {
      text = libpq_.function<char* (*)(const void*, int, int)>("PQgetvalue")(result, 0, 0);
    }
    libpq_.function<void (*)(void*)>("PQclear")(result);
    return text;
  }

 private:
  DynamicLibrary libpq_;
  void* conn_ = nullptr;
};

}  // namespace

TEST_CASE(
    "PostgreSQL ledger: a read transaction ends at once though its COMMIT is not waited for") {
  // The store sends a read transaction's COMMIT and reads its answer only before the next
  // statement (postgres_impl.hpp, commit_unread): the server must still end the transaction then,
  // or a run would hold a snapshot (and its tables' locks) for as long as its job runs. The
  // session is found by a name of its own; its state is polled, with a bound, from outside.
  std::string name = "spendcap_read_" + std::to_string(std::random_device{}());
  std::string url = fresh_pg_ledger_url("read") + "&application_name=" + name;
  PostgresLedger ledger(url, {});
  ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(10), Period::month, std::nullopt}}, true);
  REQUIRE(ledger.budget_rules().size() == 1);  // a read transaction, left as the last thing done
  OutsideSession outside(pg_test_server_direct_url());
  std::string query = "SELECT state FROM pg_stat_activity WHERE application_name = '" + name + "'";
  std::string state = outside.value(query);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (state != "idle" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    state = outside.value(query);
  }
  CHECK(state == "idle");  // not "idle in transaction"
  // The connection goes on: the COMMIT's answer is read before the next statements, a write's
  // and a read's.
  REQUIRE(ledger.begin_run(run_start("after", "vision", usd(1))).admitted);
  CHECK(ledger.active_runs().size() == 1);
  CHECK(ledger.outbox("").empty());
  CHECK(ledger.budget_rules().size() == 1);
}

TEST_CASE("PostgreSQL ledger: a v26 ledger migrates to v27, and its heartbeat stores the ETA") {
  std::string url = fresh_pg_ledger_url("eta");
  TestClock clock(unix_time(2024, 1, 31, 12));
  LedgerOptions options;
  options.wall_clock = [&clock] { return clock.now(); };
  HeartbeatProgress so_far{RunLastProgress{40, 200, R"({"step":40})"}};
  {
    PostgresLedger ledger(url, options);
    ledger.apply_budgets({{{ScopeKind::team, "vision"}, usd(10), Period::month, std::nullopt}},
                         true);
    REQUIRE(ledger.begin_run(run_start("r1", "vision", usd(1))).admitted);
    ledger.heartbeat("r1", usd(0.001), usd(1), so_far);
  }
  // Back to v26, as a ledger of the spendcap before v27 was (recorded as 25 and 26: the labels
  // run one ahead since v24's placeholder), SQLite's latest version.
  TempDir dir;
  const int latest = SqliteLedger(dir.file("ledger.db"), {}).schema_version();
  CHECK(latest == 26);
  OutsideSession outside(url);
  std::string column =
      "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
      "AND table_name = 'runs' AND column_name = 'progress_eta_at'";
  outside.value(
      "ALTER TABLE runs DROP COLUMN progress_eta_at; "
      "DELETE FROM schema_version WHERE version >= " +
      std::to_string(latest));
  REQUIRE(outside.value(column) == "0");
  CHECK(outside.value("SELECT max(version) FROM schema_version") == std::to_string(latest - 1));

  PostgresLedger ledger(url, options);
  CHECK(ledger.schema_version() == latest);
  CHECK(outside.value(column) == "1");
  // spendcap_heartbeat reads seconds_left from the progress and stores the server's now + it.
  check_migrated_run_takes_etas(ledger, so_far, clock.now());
  CHECK(outside.value("SELECT (progress_eta_at - " + std::to_string(clock.now()) +
                      ")::integer FROM runs WHERE id = 'r1'") == "250");
}

}  // namespace spendcap::testing

namespace spendcap::testing {

// The shared runner's bound on a stopped holder (docs/guide/shared-runner.md): with a lock_timeout,
// a lock held by a stopped transaction fails the wait with 55P03, which is retried until the
// holder goes: the run is admitted, late. Directly, the lock_timeout is the url's options; through
// the pooler (which takes no url options) the role's setting, as the install's ALTER ROLE, set
// before the role's first session.
TEST_CASE("PostgreSQL ledger: a lock held past lock_timeout is retried, not a failure") {
  const char* pooler = std::getenv("SPENDCAP_TEST_PG_POOLER");
  std::string url = fresh_pg_ledger_url("lockwait");
  std::string schema, timed_url;
  if (pooler && std::string(pooler) == "1") {
    std::string::size_type start = url.find("://") + 3;
    schema = url.substr(start, url.find('@', start) - start);  // the schema's own role
    std::string alter = "psql -X -q -v ON_ERROR_STOP=1 -c \"ALTER ROLE " + schema +
                        " SET lock_timeout = '100ms'\" >/dev/null";
    REQUIRE(std::system(alter.c_str()) == 0);
    timed_url = url;
  } else {
    schema = url.substr(url.find("search_path%3D") + 14);
    timed_url = url + "%20-clock_timeout%3D100ms";
  }
  PostgresLedger setup(url, {});
  setup.apply_budgets({{{ScopeKind::team, "vision"}, usd(10), Period::month, std::nullopt}}, true);
  PostgresOptions options;
  options.retry_timeout = std::chrono::seconds(20);
  PostgresLedger ledger(timed_url, {}, options);
  options.retry_timeout = std::chrono::milliseconds(400);
  PostgresLedger impatient(timed_url, {}, options);
  // The holder: psql holding the budgets table for a second and a half, then done.
  std::string marker = "/tmp/spendcap-lockwait-" + schema;
  std::string sql = "BEGIN; LOCK TABLE " + schema +
                    ".budgets IN ACCESS EXCLUSIVE MODE; \\! touch " + marker +
                    "\nSELECT pg_sleep(2.5); COMMIT;";
  std::string command = "printf '%s\\n' \"" + sql + "\" | psql -X -q -v ON_ERROR_STOP=1 " +
                        "-d \"$SPENDCAP_TEST_PG_URL\" >/dev/null 2>&1 &";
  REQUIRE(std::system(command.c_str()) == 0);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (::access(marker.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(::access(marker.c_str(), F_OK) == 0);
  ::unlink(marker.c_str());
  // The lock_timeout is in force: a short retry window ends on it.
  try {
    impatient.begin_run(run_start("early", "vision", usd(1)));
    FAIL("admitted while the budgets were locked");
  } catch (const Error& error) {
    CHECK(std::string(error.what()).find("lock timeout") != std::string::npos);
  }
  auto started = std::chrono::steady_clock::now();
  Admission admission = ledger.begin_run(run_start("late", "vision", usd(1)));
  CHECK(admission.admitted);
  // It waited for the holder (more than one lock_timeout), then went on.
  CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(200));
}

}  // namespace spendcap::testing
