// run/summary.hpp beyond the summary line (test_settings.cpp has that): what a run says at its end
// with a job key's total, and the --status-file written, skipped without the flag, and a file it
// cannot write said on the reporter instead of thrown.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "spendcap/run/summary.hpp"
#include "test_support.hpp"

namespace spendcap {

namespace {

// A reporter whose lines land in a memory file the test reads back.
struct Lines {
  int fd = ::memfd_create("spendcap-summary", MFD_CLOEXEC);
  ~Lines() { ::close(fd); }
  std::string text() const {
    std::string out;
    char buffer[4096];
    ssize_t n = 0;
    off_t offset = 0;
    while ((n = ::pread(fd, buffer, sizeof buffer, offset)) > 0) {
      out.append(buffer, static_cast<size_t>(n));
      offset += n;
    }
    return out;
  }
};

RunOutcome succeeded_outcome() {
  RunOutcome outcome;
  outcome.run_id = "1a2b3c4d-0000-4000-8000-000000000000";
  outcome.status = RunStatus::succeeded;
  outcome.reason = "exited";
  outcome.exit_code = 0;
  outcome.currency = "USD";
  outcome.spend = Money::from_micros(100'000);
  outcome.elapsed_seconds = 1.5;
  return outcome;
}

}  // namespace

TEST_CASE("a job key's summary adds its total across runs to the run's own line") {
  Lines lines;
  Admission admission;
  admission.job_spent_before = Money::from_micros(200'000);
  admission.run_budget = Money::from_micros(1'000'000);
  {
    Reporter reporter(false, false, ::dup(lines.fd));
    say_summary(succeeded_outcome(), admission, "train-42", reporter);
  }
  CHECK(lines.text().find("run 1a2b3c4d succeeded after 1.50s: spent $0.10; exit 0; job "
                          "train-42 total $0.30 of $1.00") != std::string::npos);
  // Negative control: a run without a job key's history says its own line only.
  Lines alone;
  {
    Reporter reporter(false, false, ::dup(alone.fd));
    say_summary(succeeded_outcome(), Admission{}, "", reporter);
  }
  CHECK(alone.text().find("run 1a2b3c4d succeeded") != std::string::npos);
  CHECK(alone.text().find("total") == std::string::npos);
}

TEST_CASE(
    "--status-file gets the outcome; without it nothing is written; an unwritable one is "
    "said") {
  testing::TempDir dir;
  Lines lines;
  {
    Reporter reporter(false, false, ::dup(lines.fd));
    write_status(dir.file("status.json"), succeeded_outcome(), reporter);
    write_status(std::nullopt, succeeded_outcome(), reporter);
    write_status(dir.file("missing/status.json"), succeeded_outcome(), reporter);
  }
  std::ifstream in(dir.file("status.json"));
  std::stringstream status;
  status << in.rdbuf();
  CHECK(status.str().find("\"status\": \"succeeded\"") != std::string::npos);
  CHECK(status.str().find("\"exit_code\": 0") != std::string::npos);
  CHECK(lines.text().find("--status-file " + dir.file("missing/status.json")) != std::string::npos);
}

}  // namespace spendcap
