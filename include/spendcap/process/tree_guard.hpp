// The guard: a small process that spendcap forks before any thread exists (PR_SET_PDEATHSIG follows
// the forking thread, and Asio and libcurl start threads). It launches the command and is its
// parent and a subreaper, so every process of the tree, double-forked daemons included, stays its
// descendant; it is the tree's one reaper (waitpid(-1) on SIGCHLD through a signalfd). It reports
// to the supervisor over a pipe: the launch, the main process's exit status, the moment the tree
// is empty. The supervisor signals the tree itself (through pidfds); the guard only reaps, except
// when the supervisor dies: on EOF of the control pipe it terminates the tree (SIGTERM, SIGCONT,
// then SIGKILL after orphan_kill_after, repeated until nothing is left) and exits.
//
// If the guard itself dies, the command's PDEATHSIG kills the main process and the orphans fall to
// the supervisor, also a subreaper, which kills them. Either way nothing of the tree survives.
// The guard ignores SIGTERM, SIGINT, SIGHUP and friends: a signal to spendcap's process group must
// reach the supervisor's kill path, not bypass it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "spendcap/base/duration.hpp"
#include "spendcap/process/launcher.hpp"

namespace spendcap {

class Cgroup;

enum class GuardEventKind : std::int32_t {
  launched = 1,       // pid = the main process
  launch_failed = 2,  // value = errno of exec (the child still exits 126/127 and is reaped)
  main_exited = 3,    // value = wait status; tree_empty = 1 when nothing else was left
  tree_empty = 4,     // every process of the tree is reaped; the guard exits next
};

// One fixed-size record per event: a pipe write this small is atomic.
struct GuardEvent {
  GuardEventKind kind;
  std::int32_t pid;
  std::int32_t value;
  std::int32_t tree_empty;
  std::int64_t monotonic_ns;  // CLOCK_MONOTONIC, the same clock as the supervisor's
};
static_assert(sizeof(GuardEvent) == 24);

struct GuardOptions {
  bool subreaper = true;  // off only through the test-only switch (the negative control)
  // When the supervisor is gone, how long the tree has between SIGTERM and SIGKILL. Short: a
  // supervisor is SIGKILLed by schedulers and OOM killers, and then nothing may outlive it by 2 s.
  Nanos orphan_kill_after = std::chrono::milliseconds(500);
  // The run's directory: when the guard cleans up after a dead supervisor it also removes this and
  // the run's cgroup, which the supervisor would have removed.
  std::string run_dir;
};

struct GuardHandle {
  pid_t pid = -1;
  int events_fd = -1;   // read end: GuardEvent records (close-on-exec, non-blocking)
  int control_fd = -1;  // write end: closing it (or dying) tells the guard to clean up
};

// Forks the guard, which launches `spec` at once. Throws Error if spendcap already has more than
// one thread or fork fails. `cgroup` may be null.
GuardHandle start_guard(const LaunchSpec& spec, const Cgroup* cgroup, const GuardOptions& options);

}  // namespace spendcap
