// The escalation that ends a tree, shared by the supervisor's kill path and the guard (when the
// supervisor dies): SIGTERM and SIGCONT to every member, then, after a kill-after, SIGKILL repeated
// every kKillRepeat until the reaper finds the tree empty. Best-effort and noexcept: a step that
// fails never stops the next.
#pragma once

#include <chrono>

#include "spendcap/process/process_tree.hpp"

namespace spendcap {

// How long after a SIGKILL round the tree is looked at again: forks race with every walk, so a
// child forked after the walk is caught by the next one. 20 ms keeps a fork bomb from outrunning
// the kill for long while costing one walk per round.
inline constexpr auto kKillRepeat = std::chrono::milliseconds(20);

// SIGTERM to every member, then SIGCONT: a stopped process must run to act on the SIGTERM.
void terminate_tree(ProcessTree& tree) noexcept;

// One SIGKILL round (cgroup.kill where there is one); call again after kKillRepeat until the
// reaper reports the tree empty. Returns how many were alive.
int kill_tree(ProcessTree& tree) noexcept;

}  // namespace spendcap
