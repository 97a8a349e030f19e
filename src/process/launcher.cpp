#include "spendcap/process/launcher.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/process/v2/posix/default_launcher.hpp>
#include <boost/process/v2/process.hpp>
#include <cerrno>
#include <cstdlib>

#include "spendcap/base/acting_user.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"

namespace bp = boost::process::v2;

namespace spendcap {

Inherited Inherited::capture() {
  Inherited inherited;
  inherited.state = ProcessState::capture();
  for (int fd = 0; fd <= 2; ++fd) {
    inherited.closed_standard[fd] = ::fcntl(fd, F_GETFD) < 0 && errno == EBADF;
  }
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    int own = ::dirfd(dir);
    while (dirent* entry = ::readdir(dir)) {
      int fd = std::atoi(entry->d_name);
      if (entry->d_name[0] == '.' || fd <= 2 || fd == own) continue;
      int flags = ::fcntl(fd, F_GETFD);
      if (flags >= 0 && !(flags & FD_CLOEXEC)) inherited.fds.push_back(fd);
    }
    ::closedir(dir);
  }
  ::sigprocmask(SIG_BLOCK, nullptr, &inherited.mask);
  for (int signal = 1; signal < NSIG; ++signal) {
    struct sigaction action {};
    if (::sigaction(signal, nullptr, &action) == 0 && action.sa_handler == SIG_IGN) {
      inherited.ignored_signals.push_back(signal);
    }
  }
  return inherited;
}

void restore_signals(const Inherited& inherited) {
  for (int signal = 1; signal < NSIG; ++signal) {
    if (signal == SIGKILL || signal == SIGSTOP) continue;
    bool ignored = std::find(inherited.ignored_signals.begin(), inherited.ignored_signals.end(),
                             signal) != inherited.ignored_signals.end();
    ::signal(signal, ignored ? SIG_IGN : SIG_DFL);
  }
  ::sigprocmask(SIG_SETMASK, &inherited.mask, nullptr);
}

namespace {

// The one initializer (see launcher.hpp for the steps and why).
struct ExecSetup {
  const LaunchSpec* spec;
  pid_t guard_pid;
  // The run's cgroup.procs, when the child could not be created inside the cgroup (old kernels).
  int cgroup_procs_fd;

  template <typename Launcher>
  bp::error_code on_exec_setup(Launcher& launcher, const bp::filesystem::path&,
                               const char* const*&) {
    if (::setpgid(0, 0) != 0) return bp::error_code(errno, bp::system_category());
    // The guard ignores SIGTTOU, and this child still does: tcsetpgrp from a background group
    // would otherwise stop it.
    if (spec->take_terminal) ::tcsetpgrp(STDIN_FILENO, ::getpid());
    // Before PDEATHSIG: a change of credentials clears it.
    if (spec->run_as && !become_caller(*spec->run_as)) {
      return bp::error_code(errno ? errno : EPERM, bp::system_category());
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The guard may have died between fork and prctl: then PDEATHSIG will never fire.
    if (::getppid() != guard_pid) ::_exit(to_int(ExitCode::internal));
    if (cgroup_procs_fd >= 0 && !launcher.cloned_into_cgroup) {
      // Best effort: without the cgroup the tree is still followed by parentage.
      [[maybe_unused]] ssize_t n = ::write(cgroup_procs_fd, "0", 1);
    }
    restore_process_state(spec->inherited.state);
    restore_signals(spec->inherited);
    // Last: nothing here opens an fd after it (Boost's error pipe was made before the fork).
    for (int fd = 0; fd <= 2; ++fd) {
      if (spec->inherited.closed_standard[fd]) ::close(fd);
    }
    return {};
  }
};

// clone3(CLONE_INTO_CGROUP): the child is born in the run's cgroup. Moving a process there
// afterwards (writing cgroup.procs) takes the cgroup threadgroup lock for writing, which waits for
// an RCU grace period: 11 to 20 ms per launch measured here, several times spendcap's whole
// overhead budget. Returns -1 with errno ENOSYS/EINVAL/E2BIG on kernels without it (before 5.7).
pid_t clone_into_cgroup(int cgroup_dir_fd) {
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<std::uint64_t>(cgroup_dir_fd);
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

// Boost.Process v2's default launcher (1.81), with three changes: the fork may be a clone3 into
// the run's cgroup; a failed exec ends the child with _exit(126/127) (Boost calls exit(), which
// would run the guard's atexit handlers and flush its stdio in the child); and on_success gets its
// arguments (Boost passes the error code as an initializer). Everything else is Boost's: the
// initializer hooks, the close-on-exec error pipe, the fd whitelist, basic_process.
class CgroupLauncher : public bp::posix::default_launcher {
 public:
  int cgroup_dir_fd = -1;
  bool cloned_into_cgroup = false;

  template <typename Executor, typename... Inits>
  bp::basic_process<Executor> launch(Executor exec, bp::error_code& ec,
                                     const bp::filesystem::path& executable, const char** argv,
                                     Inits&&... inits) {
    namespace hooks = bp::posix::detail;
    const char* const* cmd = argv;
    pipe_guard pg;
    if (::pipe2(pg.p, O_CLOEXEC) != 0) {
      ec.assign(errno, bp::system_category());
      return bp::basic_process<Executor>{exec};
    }
    ec = hooks::on_setup(*this, executable, cmd, inits...);
    if (ec) {
      hooks::on_error(*this, executable, cmd, ec, inits...);
      return bp::basic_process<Executor>{exec};
    }
    fd_whitelist.push_back(pg.p[1]);
    auto& context = boost::asio::query(exec, boost::asio::execution::context);
    context.notify_fork(boost::asio::execution_context::fork_prepare);
    pid = -1;
    if (cgroup_dir_fd >= 0) {
      pid = clone_into_cgroup(cgroup_dir_fd);
      cloned_into_cgroup = pid >= 0;
    }
    if (!cloned_into_cgroup) pid = ::fork();
    if (pid == -1) {
      int err = errno;
      context.notify_fork(boost::asio::execution_context::fork_parent);
      ec.assign(err, bp::system_category());
      hooks::on_fork_error(*this, executable, cmd, ec, inits...);
      hooks::on_error(*this, executable, cmd, ec, inits...);
      return bp::basic_process<Executor>{exec};
    }
    if (pid == 0) {
      ::close(pg.p[0]);
      context.notify_fork(boost::asio::execution_context::fork_child);
      ec = hooks::on_exec_setup(*this, executable, cmd, inits...);
      if (!ec) close_all_fds(ec);
      if (!ec) {
        ::execve(executable.c_str(), const_cast<char* const*>(cmd), const_cast<char* const*>(env));
        // A script without a #! line: run it with /bin/sh, as execvp (and so `timeout`) does.
        if (errno == ENOEXEC) {
          std::vector<const char*> shell_argv{"/bin/sh", executable.c_str()};
          for (const char* const* arg = cmd + 1; *arg; ++arg) shell_argv.push_back(*arg);
          shell_argv.push_back(nullptr);
          ::execve("/bin/sh", const_cast<char* const*>(shell_argv.data()),
                   const_cast<char* const*>(env));
          errno = ENOEXEC;
        }
      }
      int err = ec && ec.value() ? ec.value() : errno;
      [[maybe_unused]] ssize_t n = ::write(pg.p[1], &err, sizeof err);
      ::_exit(exec_failure_status(err));
    }
    context.notify_fork(boost::asio::execution_context::fork_parent);
    ::close(pg.p[1]);
    pg.p[1] = -1;
    int child_error = 0;
    ssize_t count;
    while ((count = ::read(pg.p[0], &child_error, sizeof child_error)) == -1 && errno == EINTR) {
    }
    if (count > 0) ec.assign(child_error, bp::system_category());
    if (ec) {
      hooks::on_error(*this, executable, cmd, ec, inits...);
      return bp::basic_process<Executor>{exec};
    }
    bp::basic_process<Executor> process(exec, pid);
    hooks::on_success(*this, executable, cmd, inits...);
    return process;
  }
};

}  // namespace

Launched launch_command(const LaunchSpec& spec) {
  std::vector<const char*> argv;
  for (const std::string& arg : spec.argv) argv.push_back(arg.c_str());
  argv.push_back(nullptr);
  std::vector<const char*> envp;
  for (const std::string& entry : spec.env) envp.push_back(entry.c_str());
  envp.push_back(nullptr);

  boost::asio::io_context context;
  CgroupLauncher launcher;
  launcher.env = envp.data();
  // Keep what spendcap inherited. (Boost 1.81 leaves fds between whitelisted ones open; spendcap's
  // own fds are all close-on-exec, so none of them leaks.)
  for (int fd : spec.inherited.fds) launcher.fd_whitelist.push_back(fd);
  int cgroup_dir_fd = -1, cgroup_procs_fd = -1;
  if (!spec.cgroup_dir.empty()) {
    cgroup_dir_fd = ::open(spec.cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    launcher.cgroup_dir_fd = cgroup_dir_fd;
  }

  // The child joins the cgroup by clone3; this fd is its way in where the kernel refuses that.
  if (spec.cgroup_procs_fd >= 0) {
    cgroup_procs_fd = spec.cgroup_procs_fd;
  } else if (cgroup_dir_fd >= 0) {
    cgroup_procs_fd = ::open((spec.cgroup_dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  }
  ExecSetup setup{&spec, ::getpid(), cgroup_procs_fd};
  bp::error_code ec;
  // A raw argv keeps argv[0] as the user wrote it (the default would put the resolved path there).
  auto process = launcher.launch(context.get_executor(), ec, bp::filesystem::path(spec.executable),
                                 argv.data(), setup);
  Launched launched;
  launched.pid = launcher.pid;
  if (ec) {
    launched.exec_errno = ec.value();
  } else {
    process.detach();  // the guard reaps; the destructor would SIGKILL an undetached process
  }
  if (cgroup_dir_fd >= 0) ::close(cgroup_dir_fd);
  if (cgroup_procs_fd >= 0 && cgroup_procs_fd != spec.cgroup_procs_fd) ::close(cgroup_procs_fd);
  return launched;
}

std::string resolve_executable(const std::string& name, const std::string& path_variable) {
  auto check = [](const std::string& path, int* err) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      *err = errno;
      return false;
    }
    if (S_ISDIR(st.st_mode)) {
      *err = EISDIR;
      return false;
    }
    if (access_as_user(path.c_str(), X_OK) != 0) {
      *err = errno;
      return false;
    }
    return true;
  };
  if (name.empty()) throw Error("command", "empty command name", "", ExitCode::not_found);
  int err = 0;
  if (name.find('/') != std::string::npos) {
    if (check(name, &err)) return name;
    if (err == ENOENT || err == ENOTDIR) {
      throw Error(name, "command not found: " + errno_text(err), "check the path",
                  ExitCode::not_found);
    }
    // 126 as the shell gives, but chmod would not help a directory (issue 40).
    if (err == EISDIR) {
      throw Error(name, "a directory, not a program", "give the program to run, not its directory",
                  ExitCode::not_executable);
    }
    throw Error(name, "not executable: " + errno_text(err),
                "chmod +x it, or run it through its interpreter", ExitCode::not_executable);
  }
  std::string path = path_variable.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_variable;
  int first_error = 0;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (check(candidate, &err)) return candidate;
    // As the shell searches: a file that is there but not executable is an error (126); one
    // that cannot be seen at all (ENOENT, or a PATH directory the user cannot search: EACCES
    // from stat) is not there, and the search goes on (127 when nothing is found).
    struct stat st {};
    bool seen = ::stat(candidate.c_str(), &st) == 0;
    if (seen && !first_error) first_error = err;
    start = end + 1;
  }
  if (first_error == EISDIR) {
    throw Error(name, "found in PATH as a directory, not a program",
                "check the name, or give its path", ExitCode::not_executable);
  }
  if (first_error) {
    throw Error(name, "found in PATH but not executable: " + errno_text(first_error),
                "chmod +x it, or run it through its interpreter", ExitCode::not_executable);
  }
  throw Error(name, "command not found in PATH", "check the name, or give its path",
              ExitCode::not_found);
}

}  // namespace spendcap
