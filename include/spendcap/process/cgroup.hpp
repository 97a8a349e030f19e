// The run's own cgroup (v2), where the hierarchy is writable: every process of the tree stays in it
// whatever it does (setsid, double fork, re-parenting), and cgroup.kill ends them all at once.
// Where it is not writable (no root, no delegation), the tree is followed by parentage instead
// (process_tree.hpp): the guard is a subreaper, so nothing can leave its descendants.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace spendcap {

class Cgroup {
 public:
  // Creates `name` under the cgroup this process is in (found through /proc/self/mountinfo and the
  // `0::` line of /proc/self/cgroup). nullopt when there is no writable cgroup v2 hierarchy; then
  // `why_not` says why (for the debug line).
  static std::optional<Cgroup> create(const std::string& name, std::string* why_not);

  // An existing cgroup directory (tests).
  explicit Cgroup(std::string path) : path_(std::move(path)) {}
  // One the privileged runner made, with its cgroup.kill opened there: write permission on a
  // cgroup file is checked at open, so the dropped supervisor and guard can still kill the tree.
  Cgroup(std::string path, int kill_fd) : path_(std::move(path)), kill_fd_(kill_fd) {}

  const std::string& path() const { return path_; }
  std::string procs_file() const { return path_ + "/cgroup.procs"; }

  // The pids in it and in its child cgroups (zombies may be listed until reaped).
  std::vector<pid_t> procs() const;
  // Whether `pid` is in it or in one of its child cgroups now (/proc/PID/cgroup).
  bool holds(pid_t pid) const;
  // SIGKILLs every process in it (cgroup.kill, Linux 5.14+). False where the kernel lacks it.
  bool kill() const;
  // Removes the (empty) directory; best effort, never throws.
  void remove() const noexcept;

 private:
  std::string path_;
  int kill_fd_ = -1;
};

// The writable cgroup v2 directory this process is in, or nullopt (with the reason).
std::optional<std::string> own_cgroup_dir(std::string* why_not);

// Where the cgroup v2 hierarchy is mounted and the directory of this process's cgroup in it,
// writable or not. False (with the reason) when there is none.
bool locate_cgroup_v2(std::string* mount_point, std::string* own_dir, std::string* why_not);

}  // namespace spendcap
