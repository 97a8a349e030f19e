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
//
// Isolation (GuardOptions::pid_namespace): the guard is created in a new PID namespace and a
// private mount namespace with a fresh /proc (as root with CLONE_NEWPID|CLONE_NEWNS; otherwise
// inside a user namespace that maps only the caller's own uid and gid). It is then the namespace's
// init: the tree cannot name spendcap (its /proc shows only the tree, its PPid chain ends at the
// guard, pid 1), the kernel does not deliver SIGKILL or SIGSTOP from inside to the namespace's
// init, the guard is not dumpable (no ptrace), and when the guard exits the kernel kills every
// process of the namespace. The pids in GuardEvent are then the namespace's own; the supervisor
// never uses them to signal: it walks the tree from the guard's host pid with the host's /proc.
//
// The watchdog: the supervisor sends GuardOrder records over the control pipe, a tick every
// interval and the kill deadline (the moment spend reaches the granted ceiling). No process of the
// tree outlives the deadline: at it the guard kills whatever is left; and when the ticks have
// stopped (the supervisor is SIGSTOPped or hung) it starts the kill path (SIGTERM, SIGCONT) at
// deadline - orphan_kill_after so that SIGKILL at the deadline finds little left. The decision is
// watchdog.hpp's pure step; the guard's loop reaps, reads orders, takes the step and sleeps.
#pragma once

#include <atomic>
#include <cstdint>

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "spendcap/base/duration.hpp"
#include "spendcap/process/launcher.hpp"

namespace spendcap {

class Cgroup;

// $SPENDCAP_CHECKPOINT_DONE: the file in the run's directory the job creates when its checkpoint is
// written (the supervisor watches it; the guard removes it when the supervisor died).
inline std::string checkpoint_done_path(const std::string& run_dir) {
  return run_dir + "/checkpoint-done";
}

enum class GuardEventKind : std::int32_t {
  launched = 1,       // pid = the main process
  launch_failed = 2,  // value = errno of exec (the child still exits 126/127 and is reaped)
  main_exited = 3,    // value = wait status; tree_empty = 1 when nothing else was left
  tree_empty = 4,     // every process of the tree is reaped; the guard exits next
  main_stopped = 5,   // the main process stopped (Ctrl-Z, SIGTTIN): job control on a terminal
  orphan_exited = 6,  // pid = an orphan the guard reaped (numbered in the guard's PID namespace),
                      // value = its wait status: the respawn-loop fallback counts it fully
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

// What the supervisor tells the guard, one fixed-size record per write (atomic on a pipe).
enum class GuardOrderKind : std::int32_t {
  tick = 1,      // the supervisor is alive
  deadline = 2,  // value = CLOCK_MONOTONIC ns by which the tree must be gone; 0 = none (warn mode)
  // Launch the command now. The guard waits for it, so that every thread spendcap needs is
  // running before the job can take the user's last process slot (RLIMIT_NPROC counts threads).
  launch = 3,
};
struct GuardOrder {
  GuardOrderKind kind;
  std::int32_t unused = 0;
  std::int64_t value = 0;
};
static_assert(sizeof(GuardOrder) == 16);

struct GuardOptions {
  bool subreaper = true;  // off only through the test-only switch (the negative control)
  // Try to create the guard in its own PID namespace (see above). Whether it was made is in
  // GuardHandle::isolated.
  bool pid_namespace = true;
  // Refuse (Error, exit 125) rather than run the job without the namespace.
  bool pid_namespace_required = false;
  // The supervisor counts as stopped when no tick came for this long (ticks come every interval).
  Nanos stale_after = std::chrono::seconds(3);
  // When the supervisor is gone, how long the tree has between SIGTERM and SIGKILL. Short: a
  // supervisor is SIGKILLed by schedulers and OOM killers, and then nothing may outlive it by 2 s.
  Nanos orphan_kill_after = std::chrono::milliseconds(500);
  // The run's directory: when the guard cleans up after a dead supervisor it also removes this and
  // the run's cgroup, which the supervisor would have removed.
  std::string run_dir;
};

// What the guard's reaped children wrote, as the guard itself counts it (its whole write count
// less its own threads'), in a page shared with the supervisor: the guard is not dumpable, so an
// ordinary user's supervisor cannot read /proc/GUARD/io (root can). kNotPublished until the
// guard wrote it.
inline constexpr std::uint64_t kNotPublished = ~std::uint64_t{0};

struct GuardHandle {
  pid_t pid = -1;  // the host's pid, also when the guard runs in its own namespace
  const std::atomic<std::uint64_t>* reaped_written = nullptr;  // none: not shared
  bool isolated = false;         // the guard is the init of its own PID namespace
  std::string why_not_isolated;  // why a PID namespace was asked for and could not be made
  int events_fd = -1;            // read end: GuardEvent records (close-on-exec, non-blocking)
  int control_fd = -1;           // write end: closing it (or dying) tells the guard to clean up
};

// Forks the guard, which launches `spec` on the supervisor's launch order (or exits without
// launching when the control pipe closes first). Throws Error if spendcap already has more than
// one thread or fork fails. `cgroup` may be null. When a PID namespace is asked for and cannot be
// made, the guard is forked without one and GuardHandle::why_not_isolated says why.
GuardHandle start_guard(const LaunchSpec& spec, const Cgroup* cgroup, const GuardOptions& options);

// The privileged runner's guard (shared_runner/entry.hpp). Forked by the runner while it is
// still root, into its own PID and mount namespaces, it becomes the service user at once
// (credentials.hpp), keeping CAP_KILL, and CAP_SETUID and CAP_SETGID until the launch, and waits;
// start_guard then sends it the spec over a pipe instead of forking. Whom the command runs as,
// the fds it inherits and the run's cgroup are fixed here, from the runner, never taken from the
// spec the supervisor sends. Throws Error; call as root, single-threaded.
struct PreforkedGuard {
  Identity caller;
  uid_t service_uid = 0;
  gid_t service_gid = 0;
  std::string cgroup_dir;
  int cgroup_procs_fd = -1;  // opened by the runner (root)
  int cgroup_kill_fd = -1;   // opened by the runner (root)
  Inherited inherited;
};
// Returns the guard's pid and the ends of its pipes kept here (close-on-exec).
struct PreforkedEnds {
  pid_t pid = -1;
  int spec_fd = -1;
  int events_fd = -1;
  int control_fd = -1;
};
PreforkedEnds prefork_guard(const PreforkedGuard& setup);

// In the exec'd supervisor (the split runner, shared_runner/adoption.hpp): the guard the runner
// preforked before the exec, its pipes' ends inherited (made close-on-exec here); start_guard then
// hands it the spec as above.
void adopt_preforked_guard(pid_t pid, int spec_fd, int events_fd, int control_fd);

// Writes one order to the guard's control pipe (non-blocking; a full pipe or a gone guard drops
// it: the guard acts on the last deadline it read). Never throws.
void send_guard_order(int control_fd, GuardOrderKind kind, std::int64_t value) noexcept;

}  // namespace spendcap
