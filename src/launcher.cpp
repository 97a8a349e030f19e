#include "spendcap/launcher.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/process/v2/posix/default_launcher.hpp>
#include <boost/process/v2/process.hpp>
#include <cerrno>
#include <cstdlib>

#include "spendcap/error.hpp"

namespace bp = boost::process::v2;

namespace spendcap {

Inherited Inherited::capture() {
  Inherited inherited;
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
    bool ignored = false;
    for (int s : inherited.ignored_signals) ignored |= s == signal;
    ::signal(signal, ignored ? SIG_IGN : SIG_DFL);  // EINVAL for glibc's internal signals: fine
  }
  ::sigprocmask(SIG_SETMASK, &inherited.mask, nullptr);
}

namespace {

// The one initializer (see launcher.hpp for the steps and why).
struct ExecSetup {
  const LaunchSpec* spec;
  pid_t guard_pid;
  int cgroup_procs_fd;

  template <typename Launcher>
  bp::error_code on_exec_setup(Launcher&, const bp::filesystem::path&, const char* const*&) {
    if (::setpgid(0, 0) != 0) return bp::error_code(errno, bp::system_category());
    // The guard ignores SIGTTOU, and this child still does: tcsetpgrp from a background group
    // would otherwise stop it.
    if (spec->take_terminal) ::tcsetpgrp(STDIN_FILENO, ::getpid());
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The guard may have died between fork and prctl: then PDEATHSIG will never fire.
    if (::getppid() != guard_pid) ::_exit(125);
    if (cgroup_procs_fd >= 0) {
      // Best effort: without the cgroup the tree is still followed by parentage.
      [[maybe_unused]] ssize_t n = ::write(cgroup_procs_fd, "0", 1);
    }
    restore_signals(spec->inherited);
    return {};
  }

  // Boost 1.81 detects on_exec_error by a five-parameter call but invokes it with four, and then
  // calls exit(), which would run the guard's atexit handlers and flush its stdio in the child.
  // Both overloads are declared so that the four-parameter one is found and _exits first.
  template <typename Launcher>
  void on_exec_error(Launcher&, const bp::error_code&, const bp::filesystem::path&,
                     const char* const*&, const bp::error_code&) {}
  template <typename Launcher>
  void on_exec_error(Launcher&, const bp::filesystem::path&, const char* const*&,
                     const bp::error_code& ec) {
    ::_exit(exec_failure_status(ec.value()));
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

  int cgroup_fd = -1;
  if (!spec.cgroup_procs.empty())
    cgroup_fd = ::open(spec.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);

  boost::asio::io_context context;
  bp::posix::default_launcher launcher;
  launcher.env = envp.data();
  // Keep what spendcap inherited. (Boost 1.81 leaves fds between whitelisted ones open; spendcap's
  // own fds are all close-on-exec, so none of them leaks.)
  for (int fd : spec.inherited.fds) launcher.fd_whitelist.push_back(fd);

  bp::error_code ec;
  ExecSetup setup{&spec, ::getpid(), cgroup_fd};
  // A raw argv keeps argv[0] as the user wrote it (the default would put the resolved path there).
  // The executor overload is the one that reports failure through `ec` instead of throwing.
  auto process = launcher(context.get_executor(), ec, bp::filesystem::path(spec.executable),
                          argv.data(), setup);
  Launched launched;
  launched.pid = launcher.pid;
  if (ec) {
    launched.exec_errno = ec.value();
  } else {
    process.detach();  // the guard reaps; the destructor would SIGKILL an undetached process
  }
  if (cgroup_fd >= 0) ::close(cgroup_fd);
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
    if (::access(path.c_str(), X_OK) != 0) {
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
    if (err != ENOENT && err != ENOTDIR && !first_error) first_error = err;
    start = end + 1;
  }
  if (first_error) {
    throw Error(name, "found in PATH but not executable: " + errno_text(first_error),
                "chmod +x it, or run it through its interpreter", ExitCode::not_executable);
  }
  throw Error(name, "command not found in PATH", "check the name, or give its path",
              ExitCode::not_found);
}

}  // namespace spendcap
