// Fuzzes what the setuid spendcap-runner reads before it trusts anything (issue 29, item 7;
// process/runner_channel.hpp): its argv (--front-fds, and the supervisor call it writes), the
// front's environment block from the memfd, and /etc/spendcap/runner.json. The first byte picks
// the parser, the rest is its input (NUL-separated words for an argv). Each either returns a
// value that holds its contract or throws spendcap::Error; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/process/runner_channel.hpp"

namespace {

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    words.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

void check(bool holds) {
  if (!holds) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0: {
        spendcap::RunnerConfig config = spendcap::parse_runner_config(input);
        check(config.runner.starts_with("/") && config.spendcap.starts_with("/") &&
              config.spool.starts_with("/") && !config.user.empty());
        break;
      }
      case 1: {
        for (const auto& [name, value] : spendcap::parse_environment_block(input)) {
          check(!name.empty() && name.find('=') == std::string::npos &&
                name.find('\0') == std::string::npos && value.find('\0') == std::string::npos);
        }
        break;
      }
      case 2: {
        spendcap::FrontFds fds = spendcap::parse_front_fds(input);
        check(fds.environment > 2 && fds.control > 2 && fds.environment != fds.control);
        break;
      }
      case 3: {
        spendcap::SupervisorCall call = spendcap::parse_supervisor_args(words_of(input));
        check(call.spec_fd > 2 && call.events_fd > 2 && call.control_fd > 2 && call.kill_fd > 2 &&
              call.env_fd > 2 && call.guard_pid > 1 && call.cgroup_dir.starts_with("/"));
        // What the runner writes, the supervisor reads back as written.
        spendcap::SupervisorCall again =
            spendcap::parse_supervisor_args(spendcap::supervisor_args(call));
        check(again.caller_uid == call.caller_uid && again.guard_pid == call.guard_pid &&
              again.cgroup_dir == call.cgroup_dir && again.env_fd == call.env_fd);
        break;
      }
    }
  } catch (const spendcap::Error&) {
    // refused: fine
  }
  return 0;
}
