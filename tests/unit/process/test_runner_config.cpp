// process/runner_channel: /etc/spendcap/runner.json as the setuid runner reads it. Its spool key
// (issue 29, item 2) has a default; a key it does not know is refused, not ignored.
#include <doctest/doctest.h>

#include <array>
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

TEST_CASE("--front-fds: two fds above 2, then the caller's closed fds 0-2") {
  spendcap::FrontFds plain = spendcap::parse_front_fds("5,6");
  CHECK(plain.environment == 5);
  CHECK(plain.control == 6);
  CHECK(plain.closed_standard == std::array<bool, 3>{false, false, false});
  spendcap::FrontFds closed = spendcap::parse_front_fds("5,6,02");
  CHECK(closed.control == 6);
  CHECK(closed.closed_standard == std::array<bool, 3>{true, false, true});
  CHECK(spendcap::closed_standard_text(closed.closed_standard) == "02");
  CHECK(spendcap::closed_standard_text({}) == "");
  for (const char* bad : {"0,6", "5,5", "5,6,", "5,6,3", "5,6,00", "5,6,0123", "5,6,x", "5"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(spendcap::parse_front_fds(bad), spendcap::Error);
  }
}
