#include <doctest/doctest.h>

#include "spendcap/base/error.hpp"
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

TEST_CASE("UTF-8 is checked strictly") {
  CHECK(is_valid_utf8("plain"));
  CHECK(is_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  CHECK_FALSE(is_valid_utf8("\xFF"));
  CHECK_FALSE(is_valid_utf8("\xC3"));              // cut short
  CHECK_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong "/"
  CHECK_FALSE(is_valid_utf8("\xED\xA0\x80"));      // a surrogate
  CHECK_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
}

TEST_CASE("text for a terminal has its control characters escaped") {
  CHECK(escape_for_terminal("vision-team") == "vision-team");
  CHECK(escape_for_terminal("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(escape_for_terminal("a\x1B]0;pwned\x07z") == "a\\e]0;pwned\\x07z");
  CHECK(escape_for_terminal("x\ny\tz\r") == "x\\ny\\tz\\r");
  CHECK(escape_for_terminal("\x7F") == "\\x7F");
  CHECK(escape_for_terminal("\xC2\x9B"
                            "2J") == "\\u{009B}2J");  // C1 CSI
  CHECK(escape_for_terminal("\xFF\xFE") == "\\xFF\\xFE");
  CHECK(escape_for_terminal("a\\b") == "a\\\\b");
}

TEST_CASE("names refuse control characters and bytes that are not UTF-8") {
  CHECK_NOTHROW(require_printable_name("vision", "--team"));
  CHECK_NOTHROW(require_printable_name("\xC3\xA9quipe", "--team"));
  CHECK_NOTHROW(require_printable_name("", "--team"));
  CHECK_THROWS_WITH_AS(require_printable_name("a\x1B[2Jb", "--team"),
                       doctest::Contains("--team a\x1B[2Jb: holds a control character"), Error);
  CHECK_THROWS_WITH_AS(require_printable_name("bad\xFF", "--tag"),
                       doctest::Contains("--tag bad\xFF: not valid UTF-8"), Error);
}

TEST_CASE("an excerpt keeps printable characters only, at most the count asked") {
  CHECK(printable_excerpt("step \x1b[31m1\x1b[0m\tok\r\n", 100) == "step [31m1[0m ok");
  CHECK(printable_excerpt("h\xc3\xa9llo \xff world", 100) == "h\xc3\xa9llo  world");
  CHECK(printable_excerpt("\xc3\xa9\xc3\xa9\xc3\xa9", 2) == "\xc3\xa9\xc3\xa9");  // characters
  CHECK(printable_excerpt(std::string(300, 'x'), 200).size() == 200);
  CHECK(printable_excerpt("", 10).empty());
}

TEST_CASE("format_utc writes every form of one instant") {
  // 2026-12-01T10:07:03Z, with a fraction that every form truncates.
  double at = 1796119623.75;
  CHECK(format_utc(at, UtcForm::rfc3339) == "2026-12-01T10:07:03Z");
  CHECK(rfc3339_utc(at) == "2026-12-01T10:07:03Z");
  CHECK(format_utc(at, UtcForm::date) == "2026-12-01");
  CHECK(format_utc(at, UtcForm::clock) == "2026-12-01 10:07:03");
  CHECK(format_utc(at, UtcForm::clock_z) == "2026-12-01 10:07:03Z");
  CHECK(format_utc(at, UtcForm::clock_utc) == "2026-12-01 10:07:03 UTC");
  // Before the epoch a fraction goes towards the earlier second, as a day's start must.
  CHECK(format_utc(-0.5, UtcForm::clock) == "1969-12-31 23:59:59");
  UtcFields day = utc_fields(at);
  CHECK(day.year == 2026);
  CHECK(day.month == 12);
  CHECK(day.day == 1);
}
