#include "spendcap/cli/run.hpp"

#include <iostream>

#include "spendcap/base/text.hpp"
#include "spendcap/run/summary.hpp"
#include "spendcap/supervise/supervisor.hpp"

namespace spendcap {

int run_command(const RunRequest& request, const Inherited& inherited) {
  try {
    return run_steps(request, inherited);
  } catch (const Error& error) {
    // Every outcome leaves a trace: 125, 126 and 127 too (not where the path itself was refused).
    if (request.status_file && !error.subject().starts_with("--status-file")) {
      write_error_status(*request.status_file, error);
    }
    // Setup gives up at once when a stop signal comes while it waits (a locked ledger): spendcap
    // dies by that signal, as it would have without the block, once it has said why.
    if (int signal = take_pending_stop_signal()) {
      std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
      reraise(signal);
    }
    throw;
  }
}

}  // namespace spendcap
