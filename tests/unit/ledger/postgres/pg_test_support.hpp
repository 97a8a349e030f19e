// A fresh PostgreSQL ledger for a test: a new schema on the server of SPENDCAP_TEST_PG_URL
// (scripts/pg-test-server.sh), named in the url's search_path, so that every test starts empty.
// Tests that use it have "postgresql" in their names: tests/unit/main.cpp skips them, saying so,
// when no server is set.
#pragma once

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>

namespace spendcap::testing {

inline std::string pg_test_server_url() {
  const char* url = std::getenv("SPENDCAP_TEST_PG_URL");
  return url ? url : "";
}

// The url of a new, empty schema (spendcap creates it on first connection).
inline std::string fresh_pg_ledger_url(const std::string& prefix = "t") {
  static std::atomic<int> counter{0};
  static const unsigned salt = std::random_device{}();
  std::string schema = prefix + "_" + std::to_string(salt) + "_" + std::to_string(++counter);
  std::string url = pg_test_server_url();
  url += url.find('?') == std::string::npos ? "?" : "&";
  return url + "options=-csearch_path%3D" + schema;
}

}  // namespace spendcap::testing
