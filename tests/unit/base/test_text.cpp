#include <doctest/doctest.h>

#include "spendcap/base/text.hpp"

using namespace spendcap;

TEST_CASE("join and split") {
  CHECK(join({"a", "b", "c"}, ", ") == "a, b, c");
  CHECK(join({}, ", ").empty());
  CHECK(split("a,,b,", ',') == std::vector<std::string>{"a", "b"});
  CHECK(split("", ',').empty());
}

TEST_CASE("passwords in URLs are redacted") {
  CHECK(redact_password("postgresql://app:s3cret@db.internal/spendcap") ==
        "postgresql://app:***@db.internal/spendcap");
  CHECK(redact_password("postgresql://db/spendcap?user=app&password=s3cret&sslmode=require") ==
        "postgresql://db/spendcap?user=app&password=***&sslmode=require");
  CHECK(redact_password("postgresql://app@db/spendcap") == "postgresql://app@db/spendcap");
  CHECK(redact_password("sqlite:/var/lib/spendcap/ledger.db") ==
        "sqlite:/var/lib/spendcap/ledger.db");
  CHECK(redact_password("host:5432") == "host:5432");
}
