#include "spendcap/process/pid_namespace.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "spendcap/base/error.hpp"

namespace spendcap {

int guard_own_io_fd = -1;
int guard_thread_io_fd = -1;

namespace {

// What the child reports once set up: the step that failed and its errno, or {0, 0}.
struct SetupResult {
  int step = 0;
  int error = 0;
};
constexpr const char* kStepNames[] = {"", "making / private", "mounting /proc", "PR_SET_DUMPABLE",
                                      "waiting for the id maps"};

// glibc's fork() takes no flags; clone with a null stack forks the same way (as bubblewrap does).
// The caller is single-threaded, so no lock of another thread is left held in the child.
pid_t raw_clone(unsigned long flags) {
  return static_cast<pid_t>(
      ::syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
}

bool write_file(const std::string& path, const std::string& text, std::string* why_not) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    *why_not = "writing " + path + ": " + errno_text(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

// In the child: the namespace's own /proc, then no ptrace from the tree. Never returns on failure.
void set_up_child(bool user_namespace, int go_fd, int ready_fd) {
  auto fail = [&](int step) {
    SetupResult result{step, errno};
    [[maybe_unused]] ssize_t n = ::write(ready_fd, &result, sizeof result);
    ::_exit(1);
  };
  if (user_namespace) {
    // Until the parent wrote uid_map and gid_map this process has no ids and no rights to mount.
    char byte;
    ssize_t n;
    while ((n = ::read(go_fd, &byte, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) {
      errno = ECANCELED;
      fail(4);
    }
  }
  // The copied mount table may share propagation with the host's: without this the fresh /proc
  // would be mounted over the host's own /proc too.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(1);
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) fail(2);
  // After the id maps: a non-dumpable process's /proc files belong to root, and the parent could
  // no longer write them.
  guard_own_io_fd = ::open("/proc/self/io", O_RDONLY | O_CLOEXEC);
  std::string thread_io = "/proc/self/task/" + std::to_string(::getpid()) + "/io";
  guard_thread_io_fd = ::open(thread_io.c_str(), O_RDONLY | O_CLOEXEC);
  if (::prctl(PR_SET_DUMPABLE, 0) != 0) fail(3);
  SetupResult ok;
  [[maybe_unused]] ssize_t n = ::write(ready_fd, &ok, sizeof ok);
}

// One try with `flags`: 0 in the child, its pid in the parent, -1 with *why_not.
pid_t try_clone(unsigned long flags, std::string* why_not) {
  bool user_namespace = flags & CLONE_NEWUSER;
  int go[2], ready[2];
  if (::pipe2(go, O_CLOEXEC) != 0) {
    *why_not = "pipe: " + errno_text(errno);
    return -1;
  }
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    *why_not = "pipe: " + errno_text(errno);
    ::close(go[0]);
    ::close(go[1]);
    return -1;
  }
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  pid_t pid = raw_clone(flags);
  if (pid == 0) {
    ::close(go[1]);
    ::close(ready[0]);
    set_up_child(user_namespace, go[0], ready[1]);
    ::close(go[0]);
    ::close(ready[1]);
    return 0;
  }
  int clone_errno = errno;
  ::close(go[0]);
  ::close(ready[1]);
  bool ok = pid > 0;
  if (!ok) {
    *why_not = std::string(user_namespace ? "clone(CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNS)"
                                          : "clone(CLONE_NEWPID|CLONE_NEWNS)") +
               ": " + errno_text(clone_errno);
    if (user_namespace && (clone_errno == EPERM || clone_errno == ENOSPC)) {
      *why_not +=
          " (user namespaces are off here: see sysctl user.max_user_namespaces and "
          "kernel.unprivileged_userns_clone)";
    }
  }
  if (ok && user_namespace) {
    // Only the caller's own ids: the job sees its own uid, and nothing else is granted.
    std::string proc = "/proc/" + std::to_string(pid);
    ok = write_file(proc + "/setgroups", "deny", why_not) &&
         write_file(proc + "/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n",
                    why_not) &&
         write_file(proc + "/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n",
                    why_not);
    if (ok) {
      [[maybe_unused]] ssize_t n = ::write(go[1], "g", 1);
    }
  }
  ::close(go[1]);  // on failure: EOF ends the waiting child
  if (ok) {
    SetupResult result;
    ssize_t n;
    while ((n = ::read(ready[0], &result, sizeof result)) < 0 && errno == EINTR) {
    }
    if (n != sizeof result) {
      *why_not = "the namespace's init died while being set up";
      ok = false;
    } else if (result.step != 0) {
      *why_not = std::string(kStepNames[result.step]) + ": " + errno_text(result.error);
      ok = false;
    }
  }
  ::close(ready[0]);
  if (!ok && pid > 0) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return -1;
  }
  return pid;
}

}  // namespace

pid_t fork_into_pid_namespace(std::string* why_not) {
  // Root (or CAP_SYS_ADMIN) needs no user namespace, and keeps its real identity inside.
  std::string first_why;
  if (::geteuid() == 0) {
    pid_t pid = try_clone(CLONE_NEWPID | CLONE_NEWNS, &first_why);
    if (pid >= 0) return pid;
  }
  pid_t pid = try_clone(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS, why_not);
  if (pid < 0 && !first_why.empty()) *why_not = first_why + "; " + *why_not;
  return pid;
}

}  // namespace spendcap
