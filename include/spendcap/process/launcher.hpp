// How the command starts, inside the guard: Boost.Process v2's default launcher, no shell, with one
// on_exec_setup initializer that runs in the child between fork and exec:
//   1. its own process group (the tree is signalled as one job, never with spendcap's group);
//   2. the terminal's foreground group, when spendcap was in the foreground of a terminal (as tini
//      does), so a job that reads the terminal (pdb) does not stop on SIGTTIN and Ctrl-C reaches
//      it;
//   3. PR_SET_PDEATHSIG(SIGKILL), then a getppid() re-check: the guard may have died before prctl;
//   4. the run's cgroup: the child is created in it (clone3 with CLONE_INTO_CGROUP), or on older
//      kernels writes "0" to its cgroup.procs before the command can fork;
//   5. the signal mask and dispositions spendcap inherited (SIG_IGN from nohup stays ignored), and
//      its resource limits, umask, nice value and scheduling (process_state.hpp).
// Under the privileged runner (LaunchSpec::run_as) the child first becomes the caller (groups,
// gids, uids, no capabilities: credentials.hpp), and only then arms PDEATHSIG, which a change of
// credentials clears; it joins the cgroup through the runner's cgroup.procs (open-time rights).
// The launcher is Boost's default one with the fork made a clone3 into the cgroup (launcher.cpp
// says why). Then detach(): the guard is the one reaper, so the process object's wait()/running()
// are never called. Every fd spendcap inherited stays open in the job (make's jobserver, Slurm's
// PMI_FD, 3>); spendcap's own fds are all O_CLOEXEC. A script without a #! line runs with /bin/sh,
// as with execvp. When exec fails the child _exits 127 (not found) or 126; 125 if the guard died
// before the child could arm PDEATHSIG.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <string>
#include <vector>

#include "spendcap/base/exit_code.hpp"
#include "spendcap/process/credentials.hpp"
#include "spendcap/process/process_state.hpp"

namespace spendcap {

// What spendcap inherited from its caller, captured first thing in main, before spendcap opens an
// fd or changes a signal: the job gets exactly this back.
struct Inherited {
  std::vector<int> fds;  // open above 2 and not close-on-exec
  // fds 0-2 the caller had closed (`spendcap run ... <&-`): spendcap fills them with /dev/null
  // for itself, and the job gets them closed again, as without spendcap.
  std::array<bool, 3> closed_standard{};
  sigset_t mask{};
  std::vector<int> ignored_signals;
  ProcessState state;  // limits, umask, nice... (process_state.hpp)

  static Inherited capture();
};

struct LaunchSpec {
  std::string executable;         // resolved path (resolve_executable)
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<std::string> env;   // KEY=VALUE
  Inherited inherited;
  std::string cgroup_dir;  // the run's cgroup, or "" without one
  bool take_terminal = false;
  // The privileged runner's guard only: whom the command runs as, and the run's cgroup.procs
  // opened by the runner (not owned by the spec; -1: open cgroup_dir's).
  const Identity* run_as = nullptr;
  int cgroup_procs_fd = -1;
};

struct Launched {
  pid_t pid = -1;      // the child, also when exec failed (it then exits 126/127: reap it)
  int exec_errno = 0;  // why exec failed, or 0
};

// Starts the command. Call only in the guard (the caller must be single-threaded: PDEATHSIG
// follows the forking thread).
Launched launch_command(const LaunchSpec& spec);

// Finds `name` as execvp would, in `path_variable` (the job's PATH). Throws Error with exit code
// 127 (not found) or 126 (found, not executable).
std::string resolve_executable(const std::string& name, const std::string& path_variable);

// The exit status a child reports when exec failed with `err`.
inline int exec_failure_status(int err) {
  return to_int(err == ENOENT ? ExitCode::not_found : ExitCode::not_executable);
}

// The signals the guard ignores (a signal to spendcap's process group must reach the supervisor's
// kill path, not the guard). The child restores exactly these: a caught signal is reset by exec
// anyway, only SIG_IGN survives it.
inline constexpr int kGuardIgnoredSignals[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT, SIGTSTP, SIGTTIN,
                                               SIGTTOU, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM};

// Restores, in the child before exec, the signal dispositions (each signal SIG_IGN if spendcap
// inherited it ignored, else SIG_DFL) and the signal mask that spendcap inherited.
void restore_signals(const Inherited& inherited);

}  // namespace spendcap
