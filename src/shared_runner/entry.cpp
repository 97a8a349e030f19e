#include "spendcap/shared_runner/entry.hpp"

#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <string>

#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/process/runner_channel.hpp"
#include "spendcap/shared_runner/adoption.hpp"
#include "spendcap/shared_runner/front.hpp"

namespace spendcap {

std::optional<int> enter_shared_runner(int& argc, char**& argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == kSupervisorFlag) return become_supervisor(argc, argv);
    if (argc >= 2 && std::string(argv[1]) == kCallFlag) return become_runner_call(argc, argv);
    if (::geteuid() == 0 && ::getuid() != 0) {
      throw Error(argv[0], "spendcap itself is setuid root: only spendcap-runner may be",
                  "the runner's owner reinstalls with scripts/install-shared-runner.sh");
    }
    // Root is trusted with the ledger and runs as a plain spendcap.
    if (::getuid() == 0) return std::nullopt;
    // Started with another effective group: the runner's exec for a subcommand (the setgid
    // install's ids), or the setgid-only install itself. Either goes on as the setgid install.
    if (::getegid() != ::getgid()) return std::nullopt;
    std::optional<RunnerConfig> config = read_runner_config();
    if (!config) return std::nullopt;
    if (argc >= 2 && std::string(argv[1]) == "run") return run_front(*config, argc, argv);
    ::execv(config->runner.c_str(), argv);
    throw Error(config->runner, "cannot run the runner: " + errno_text(errno),
                "the runner's owner reinstalls it with scripts/install-shared-runner.sh");
  } catch (const Error& error) {
    std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
    return to_int(ExitCode::internal);
  }
}

}  // namespace spendcap
