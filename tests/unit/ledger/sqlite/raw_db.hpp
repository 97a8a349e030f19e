// A plain SQLite connection, for tests to do to a ledger file what spendcap would not.
#pragma once

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <cstdint>
#include <string>

namespace spendcap::testing {

class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    REQUIRE(sqlite3_open(path.c_str(), &db_) == SQLITE_OK);
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void exec(const std::string& sql) {
    char* message = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
    INFO(sql << ": " << (message ? message : ""));
    sqlite3_free(message);
    REQUIRE(rc == SQLITE_OK);
  }

  // The first column of the first row of `sql`, as an integer.
  std::int64_t count(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    INFO(sql);
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(statement) == SQLITE_ROW);
    std::int64_t value = sqlite3_column_int64(statement, 0);
    sqlite3_finalize(statement);
    return value;
  }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace spendcap::testing
