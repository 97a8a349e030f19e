#include "spendcap/process/escalation.hpp"

#include <signal.h>

namespace spendcap {

void terminate_tree(ProcessTree& tree) noexcept {
  try {
    tree.signal_all(SIGTERM);
  } catch (...) {
  }
  try {
    tree.signal_all(SIGCONT);
  } catch (...) {
  }
}

int kill_tree(ProcessTree& tree) noexcept {
  try {
    return tree.kill_all();
  } catch (...) {
    return 0;
  }
}

}  // namespace spendcap
