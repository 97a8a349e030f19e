// Exit codes of spendcap: the one list. `spendcap --help` and README print exit_code_table().
#pragma once

#include <string>

namespace spendcap {

enum class ExitCode : int {
  ok = 0,
  refused = 120,             // refused to start: no budget left, stop order, reserve >= budget
  ledger_unreachable = 121,  // stopped: the ledger stayed unreachable past the granted ceiling
  preempted = 122,           // stopped for a preemption notice (--spot-notice)
  runaway = 123,             // stopped by a runaway guard or a stop order
  budget = 124,              // stopped because a budget tripped
  internal = 125,            // spendcap itself failed (usage, policy, ledger)
  not_executable = 126,      // the command was found but could not be executed
  not_found = 127,           // the command was not found
};

constexpr int to_int(ExitCode code) {
  return static_cast<int>(code);
}

// The table printed by --help and kept in README.md: one line per code.
std::string exit_code_table();

}  // namespace spendcap
