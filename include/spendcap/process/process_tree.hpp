// The processes of one run, as /proc shows them: discovery (the guard's descendants, or the run's
// cgroup), liveness (a zombie is not alive), which processes catch a signal (SigCgt), and
// signalling through pidfds, so that a pid reaped and reused since it was read is never signalled.
// Nothing here reaps: the guard is the tree's one reaper.
//
// Discovery never scans all of /proc per interval; it runs on the kill path only. Where the kernel
// has /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN) the walk reads just the tree; without it
// (some cloud and microVM kernels) one scan of /proc per walk finds the parent links.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spendcap {

class Cgroup;

struct ProcStat {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';              // R, S, D, T, t, Z, X, ...
  std::uint64_t start_time = 0;  // clock ticks after boot: with the pid, identifies the process
  bool alive() const { return state != 'Z' && state != 'X' && state != 'x'; }
};

// /proc/PID/stat, or nullopt when the process is gone.
std::optional<ProcStat> read_proc_stat(pid_t pid);

// Exists and is not a zombie.
bool is_alive(pid_t pid);

// Whether `pid` has a handler installed for `signal` (the SigCgt mask of /proc/PID/status).
bool catches_signal(pid_t pid, int signal);

// Every live (non-zombie) descendant of `root`, root excluded, parents before children.
std::vector<ProcStat> live_descendants(pid_t root);

// Whether this kernel lists children in /proc/PID/task/TID/children.
bool kernel_lists_children();

// Sends `signal` to `member` if it is still the process that was read (same pid and start time):
// pidfd_open, re-read the start time, pidfd_send_signal. False when it is gone.
bool signal_process(const ProcStat& member, int signal);

// The tree as the supervisor and the guard act on it. An interface so that the kill path can be
// driven against a fake in unit tests.
class ProcessTree {
 public:
  virtual ~ProcessTree() = default;
  // The live processes of the tree.
  virtual std::vector<ProcStat> members() = 0;
  // Sends `signal` to the members that catch it; returns how many were signalled.
  virtual int signal_catchers(int signal) = 0;
  // Sends `signal` to every member; returns how many were signalled.
  virtual int signal_all(int signal) = 0;
  // SIGKILL to every member (cgroup.kill where there is one); returns how many were alive.
  virtual int kill_all() = 0;
};

// The real tree: the live descendants of `root_pid` (the guard), or the members of `cgroup` when
// the run has one.
class LiveProcessTree : public ProcessTree {
 public:
  LiveProcessTree(pid_t root_pid, const Cgroup* cgroup) : root_pid_(root_pid), cgroup_(cgroup) {}
  std::vector<ProcStat> members() override;
  int signal_catchers(int signal) override;
  int signal_all(int signal) override;
  int kill_all() override;

 private:
  std::vector<ProcStat> cgroup_members() const;

  pid_t root_pid_;
  const Cgroup* cgroup_;
};

}  // namespace spendcap
