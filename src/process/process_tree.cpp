#include "spendcap/process/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "spendcap/process/cgroup.hpp"

namespace spendcap {

namespace {

// Reads a small /proc file in one read (these files are generated whole on read).
bool read_small_file(const char* path, std::string& out) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

std::vector<pid_t> parse_pids(const std::string& text) {
  std::vector<pid_t> pids;
  const char* p = text.c_str();
  while (*p) {
    char* end = nullptr;
    long value = std::strtol(p, &end, 10);
    if (end == p) {
      ++p;
      continue;
    }
    if (value > 0) pids.push_back(static_cast<pid_t>(value));
    p = end;
  }
  return pids;
}

bool is_number(const char* name) {
  if (!*name) return false;
  for (; *name; ++name) {
    if (*name < '0' || *name > '9') return false;
  }
  return true;
}

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

int pidfd_send_signal(int pidfd, int signal) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

// Children by walking /proc/PID/task/TID/children: a forked child is listed under the thread that
// forked it, so every thread is read.
void append_children_from_task_files(pid_t pid, std::vector<pid_t>& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR* tasks = ::opendir(path);
  if (!tasks) return;
  std::string text;
  while (dirent* entry = ::readdir(tasks)) {
    if (!is_number(entry->d_name)) continue;
    std::string children = std::string(path) + "/" + entry->d_name + "/children";
    if (read_small_file(children.c_str(), text)) {
      for (pid_t child : parse_pids(text)) out.push_back(child);
    }
  }
  ::closedir(tasks);
}

// One scan of /proc: every process's stat, grouped by parent.
std::unordered_map<pid_t, std::vector<ProcStat>> scan_by_parent() {
  std::unordered_map<pid_t, std::vector<ProcStat>> by_parent;
  DIR* proc = ::opendir("/proc");
  if (!proc) return by_parent;
  while (dirent* entry = ::readdir(proc)) {
    if (!is_number(entry->d_name)) continue;
    if (auto stat = read_proc_stat(std::atoi(entry->d_name))) {
      by_parent[stat->ppid].push_back(*stat);
    }
  }
  ::closedir(proc);
  return by_parent;
}

}  // namespace

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::string text;
  if (!read_small_file(path, text)) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so parse after the last ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return std::nullopt;
  ProcStat stat;
  stat.pid = pid;
  const char* p = text.c_str() + close + 2;
  stat.state = *p;
  // Fields after comm, counting state as field 3: ppid is 4, starttime is 22.
  int field = 3;
  while (*p && field < 22) {
    if (*p == ' ') {
      ++field;
      if (field == 4) stat.ppid = static_cast<pid_t>(std::strtol(p + 1, nullptr, 10));
      if (field == 22) stat.start_time = std::strtoull(p + 1, nullptr, 10);
    }
    ++p;
  }
  return stat;
}

bool is_alive(pid_t pid) {
  auto stat = read_proc_stat(pid);
  return stat && stat->alive();
}

bool catches_signal(pid_t pid, int signal) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/status", pid);
  std::string text;
  if (!read_small_file(path, text)) return false;
  size_t at = text.find("\nSigCgt:");
  if (at == std::string::npos) return false;
  unsigned long long mask = std::strtoull(text.c_str() + at + 8, nullptr, 16);
  return signal > 0 && signal <= 64 && (mask >> (signal - 1)) & 1ULL;
}

bool kernel_lists_children() {
  static const bool has_children_files = [] {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/children", ::getpid());
    return ::access(path, R_OK) == 0;
  }();
  return has_children_files;
}

std::vector<ProcStat> live_descendants(pid_t root) {
  std::vector<ProcStat> found;
  if (kernel_lists_children()) {
    std::vector<pid_t> frontier{root};
    while (!frontier.empty()) {
      pid_t parent = frontier.back();
      frontier.pop_back();
      std::vector<pid_t> children;
      append_children_from_task_files(parent, children);
      for (pid_t child : children) {
        auto stat = read_proc_stat(child);
        if (!stat || !stat->alive()) continue;  // gone, or a zombie: it has no children left
        // Reaped and its pid reused between the two reads: someone else's process now.
        if (stat->ppid != parent) continue;
        found.push_back(*stat);
        frontier.push_back(child);
      }
    }
    return found;
  }
  auto by_parent = scan_by_parent();
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    pid_t parent = frontier.back();
    frontier.pop_back();
    auto it = by_parent.find(parent);
    if (it == by_parent.end()) continue;
    for (const ProcStat& child : it->second) {
      if (!child.alive()) continue;
      found.push_back(child);
      frontier.push_back(child.pid);
    }
  }
  return found;
}

bool signal_process(const ProcStat& member, int signal) {
  int pidfd = pidfd_open(member.pid);
  if (pidfd < 0 && errno == ENOSYS) {
    // Kernels before 5.3, and some sandboxes, have no pidfds: check the start time, then kill().
    // The window between the two is a few microseconds instead of none.
    auto now = read_proc_stat(member.pid);
    return now && now->start_time == member.start_time && ::kill(member.pid, signal) == 0;
  }
  if (pidfd < 0) return false;  // ESRCH: gone (and reaped) since it was read
  // The pid may have been reaped and reused between the read and pidfd_open: the start time tells.
  bool same = false;
  if (auto now = read_proc_stat(member.pid)) same = now->start_time == member.start_time;
  bool sent = same && pidfd_send_signal(pidfd, signal) == 0;
  ::close(pidfd);
  return sent;
}

std::vector<ProcStat> LiveProcessTree::cgroup_members() const {
  std::vector<ProcStat> found;
  if (!cgroup_) return found;
  for (pid_t pid : cgroup_->procs()) {
    auto stat = read_proc_stat(pid);
    // Re-checked after the stat read: a pid reaped and reused in between is no longer in the run's
    // cgroup, and its start time must not be taken for a member's.
    if (stat && stat->alive() && cgroup_->holds(pid)) found.push_back(*stat);
  }
  return found;
}

std::vector<ProcStat> LiveProcessTree::members() {
  // A process can leave the run's cgroup only when someone with write access to another cgroup
  // (root) moves it. It is still a descendant of the guard (a subreaper), so once the cgroup is
  // empty the parentage walk finds it.
  std::vector<ProcStat> found = cgroup_members();
  return found.empty() ? live_descendants(root_pid_) : found;
}

int LiveProcessTree::signal_catchers(int signal) {
  int sent = 0;
  for (const ProcStat& member : members()) {
    if (catches_signal(member.pid, signal) && signal_process(member, signal)) ++sent;
  }
  return sent;
}

int LiveProcessTree::signal_all(int signal) {
  int sent = 0;
  for (const ProcStat& member : members()) {
    if (signal_process(member, signal)) ++sent;
  }
  return sent;
}

int LiveProcessTree::kill_all() {
  // cgroup.kill ends every member at once, including children forked while it runs.
  std::vector<ProcStat> in_cgroup = cgroup_members();
  if (!in_cgroup.empty() && cgroup_->kill()) return static_cast<int>(in_cgroup.size());
  std::vector<ProcStat> alive = in_cgroup.empty() ? live_descendants(root_pid_) : in_cgroup;
  for (const ProcStat& member : alive) signal_process(member, SIGKILL);
  return static_cast<int>(alive.size());
}

}  // namespace spendcap
