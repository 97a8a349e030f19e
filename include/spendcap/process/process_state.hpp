// The process state a caller hands to what it starts, beyond ids and fds: resource limits,
// umask, nice value, scheduling policy, I/O priority, CPU affinity and timer slack. Each survives
// fork and a setuid exec, so a user can aim every one of them at a privileged process (`ulimit
// -f 8` fails its ledger writes with EFBIG, `ulimit -v` fails libcurl's mmap, a huge timer slack
// makes its timers late, SCHED_IDLE starves it). The privileged runner captures the caller's
// state first thing, resets its own (reset_process_state) before any privileged step, and the
// job gets the caller's back just before exec (restore_process_state), as it would have without
// spendcap. The signal mask and dispositions travel in launcher.hpp's Inherited with the fds.
#pragma once

#include <sched.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <array>

namespace spendcap {

struct ProcessState {
  bool captured = false;
  std::array<rlimit, RLIM_NLIMITS> limits{};
  mode_t umask = 022;
  int nice = 0;
  int sched_policy = SCHED_OTHER;  // SCHED_RESET_ON_FORK is not kept
  sched_param sched{};
  int io_priority = 0;  // ioprio_get's value, 0 = the kernel's default
  bool have_affinity = false;
  cpu_set_t affinity{};
  long timer_slack_ns = 0;

  static ProcessState capture() noexcept;
};

// The values reset_process_state sets, per limit: {soft, hard}; a limit the caller had higher
// (a generous hard limit from the admin) is raised, never lowered, except RLIMIT_CORE, which is
// 0 (a privileged process writes no core). Named for the tests and the docs.
rlimit runner_limit(int resource) noexcept;
// Without CAP_SYS_RESOURCE (root in many containers) a hard limit the caller lowered cannot be
// raised again: the runner then refuses the run when the hard limit is below this.
rlim_t runner_floor(int resource) noexcept;

// As root, before any privileged step: fds 0-2 open (/dev/null fills a gap), every resource
// limit runner_limit's (or, without CAP_SYS_RESOURCE, its soft limit up to the hard one; Error
// when that is below runner_floor), every signal SIG_DFL and none blocked, umask 022, nice 0 and
// SCHED_OTHER, the default I/O priority, every CPU allowed, the default timer slack, and the
// working directory / (returns an O_PATH fd of the old one, close-on-exec, for the supervisor;
// -1 when it could not be opened). Throws Error naming the step that could not be done.
int reset_process_state();

// In the job's child between fork and exec, after the change to the caller's ids: the caller's
// state back. Best effort and async-signal-safe: what the caller could not have set itself (a
// negative nice, a real-time policy without RLIMIT_RTPRIO) stays as reset.
void restore_process_state(const ProcessState& state) noexcept;

}  // namespace spendcap
