// process/runner_channel: /etc/spendcap/runner.json as the setuid runner reads it. Its spool key
// (issue 29, item 2) has a default; a key it does not know is refused, not ignored.
#include <doctest/doctest.h>

#include <string>

#include "spendcap/base/error.hpp"
#include "spendcap/process/runner_channel.hpp"

namespace {

const char* const kBase =
    R"("runner": "/usr/local/lib/spendcap/spendcap-runner", "user": "spendcap", )"
    R"("spendcap": "/usr/local/bin/spendcap")";

std::string config_with(const std::string& more) {
  return std::string("{") + kBase + more + "}";
}

}  // namespace

TEST_CASE("runner.json: the spool is the runner's, by default beside the ledger") {
  spendcap::RunnerConfig config = spendcap::parse_runner_config(config_with(""));
  CHECK(config.spool == "/var/lib/spendcap/spool");
  config = spendcap::parse_runner_config(config_with(R"(, "spool": "/srv/spendcap/spool")"));
  CHECK(config.spool == "/srv/spendcap/spool");
  CHECK(config.user == "spendcap");
}

TEST_CASE("runner.json: a relative spool or an unknown key is refused, naming it") {
  CHECK_THROWS_WITH_AS(spendcap::parse_runner_config(config_with(R"(, "spool": "spool")")),
                       doctest::Contains("\"spool\""), spendcap::Error);
  try {
    spendcap::parse_runner_config(config_with(R"(, "spool_dir": "/x")"));
    FAIL("an unknown key was accepted");
  } catch (const spendcap::Error& error) {
    CHECK(spendcap::format_error(error).find("unknown key \"spool_dir\"") != std::string::npos);
  }
}
