#include "spendcap/base/exit_code.hpp"

namespace spendcap {

std::string exit_code_table() {
  return "Exit status:\n"
         "  the command's own  it ended by itself (128+N when signal N ended it)\n"
         "  120  refused to start: no budget left, stop order, reserve >= budget, crash loop, "
         "estimate\n"
         "       over budget\n"
         "  121  stopped: the ledger stayed unreachable past the granted ceiling\n"
         "  122  stopped for a spot/preemption notice (--spot-notice); the run is preempted\n"
         "  123  stopped by a runaway guard or a stop order\n"
         "  124  stopped because a budget tripped\n"
         "  125  spendcap itself failed (usage, policy, ledger)\n"
         "  126  the command was found but is not executable\n"
         "  127  the command was not found\n"
         "  killed by signal N  spendcap got SIGTERM/SIGINT/SIGHUP/SIGQUIT: it stops the job, "
         "then re-raises N\n"
         "       (SIGTERM: the run is recorded as preempted)\n";
}

}  // namespace spendcap
