// A fresh PostgreSQL ledger for a test: a new schema on the server of SPENDCAP_TEST_PG_URL
// (scripts/pg-test-server.sh), named in the url's search_path, so that every test starts empty.
// Tests that use it have "postgresql" in their names: tests/unit/main.cpp skips them, saying so,
// when no server is set.
//
// Through a pooler (SPENDCAP_TEST_PG_POOLER=1, set with the pgbouncer url as SPENDCAP_TEST_PG_URL
// by tests/cmake/through_pgbouncer.sh): pgbouncer refuses a url's `options`, so each new schema
// gets a login role of its own (a superuser, as the direct tests' user is) whose search_path names
// it, made by psql on the server directly (PGHOST, PGPORT: scripts/pg-test-server.sh env).
#pragma once

#include <atomic>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>

namespace spendcap::testing {

inline std::string pg_test_server_url() {
  const char* url = std::getenv("SPENDCAP_TEST_PG_URL");
  return url ? url : "";
}

// The server itself, not a pooler in front of it (tests/cmake/through_pgbouncer.sh): for a test
// that looks at the server's sessions from outside.
inline std::string pg_test_server_direct_url() {
  const char* url = std::getenv("SPENDCAP_TEST_PG_DIRECT_URL");
  return url ? url : pg_test_server_url();
}

// The url of a new, empty schema (spendcap creates it on first connection).
inline std::string fresh_pg_ledger_url(const std::string& prefix = "t") {
  static std::atomic<int> counter{0};
  static const unsigned salt = std::random_device{}();
  std::string schema = prefix + "_" + std::to_string(salt) + "_" + std::to_string(++counter);
  std::string url = pg_test_server_url();
  const char* pooler = std::getenv("SPENDCAP_TEST_PG_POOLER");
  if (pooler && std::string(pooler) == "1") {
    std::string sql = "CREATE ROLE " + schema + " LOGIN SUPERUSER; ALTER ROLE " + schema +
                      " SET search_path = " + schema;
    std::string command = "psql -X -q -v ON_ERROR_STOP=1 -c '" + sql + "' >/dev/null";
    if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
    // postgresql://USER@host...: the role instead of the url's user.
    std::string::size_type start = url.find("://") + 3, at = url.find('@', start);
    url = url.substr(0, start) + schema + url.substr(at);
    return url + (url.find('?') == std::string::npos ? "?" : "&") + "application_name=spendcap";
  }
  url += url.find('?') == std::string::npos ? "?" : "&";
  return url + "options=-csearch_path%3D" + schema;
}

}  // namespace spendcap::testing
