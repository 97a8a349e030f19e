#include "spendcap/shared_runner/front.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/process/exit_status.hpp"

extern char** environ;

namespace spendcap {

namespace {

// What the front passes on: a stop signal the user (or a scheduler, or `timeout`) sent it.
constexpr int kRelayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

void say(const Error& error) {
  std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
}

}  // namespace

int run_front(const RunnerConfig& config, int argc, char** argv) {
  // A closed fd 0-2 (`spendcap run ... <&-`) would hand its number to the memfd or the pipe
  // below: fill it with /dev/null, and tell the runner, whose job gets it closed again.
  std::array<bool, 3> closed{};
  for (int fd = 0; fd <= 2; ++fd) {
    closed[fd] = ::fcntl(fd, F_GETFD) < 0 && errno == EBADF;
    if (closed[fd] && ::open("/dev/null", O_RDWR) != fd) {
      say(Error("front", "fd " + std::to_string(fd) + " was closed and /dev/null cannot fill it"));
      return to_int(ExitCode::internal);
    }
  }
  struct stat st {};
  if (::stat(config.runner.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
      !(st.st_mode & S_ISUID)) {
    say(Error(
        config.runner,
        "the runner named by " + std::string(kRunnerConfigPath) + " is missing or not setuid root",
        "the runner's owner reinstalls it with scripts/install-shared-runner.sh"));
    return to_int(ExitCode::internal);
  }
  int env_fd = ::memfd_create("spendcap-environment", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  int control[2] = {-1, -1};
  if (env_fd < 0 || ::pipe2(control, O_CLOEXEC) != 0) {
    say(Error("front", "memfd or pipe: " + errno_text(errno)));
    return to_int(ExitCode::internal);
  }
  std::string block;
  for (char** entry = environ; entry && *entry; ++entry)
    block.append(*entry, std::strlen(*entry) + 1);
  for (size_t at = 0; at < block.size();) {
    ssize_t n = ::write(env_fd, block.data() + at, block.size() - at);
    if (n <= 0) {
      say(Error("front", "writing the environment: " + errno_text(errno)));
      return to_int(ExitCode::internal);
    }
    at += static_cast<size_t>(n);
  }
  // Sealed: what the runner reads is what was written, whoever else holds the fd.
  ::fcntl(env_fd, F_ADD_SEALS, front_seals());

  sigset_t watched, caller_mask;
  sigemptyset(&watched);
  for (int signal : kRelayed) sigaddset(&watched, signal);
  sigaddset(&watched, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &watched, &caller_mask);
  int signal_fd = ::signalfd(-1, &watched, SFD_CLOEXEC);

  std::string fds = std::to_string(env_fd) + "," + std::to_string(control[0]);
  if (std::string closed_text = closed_standard_text(closed); !closed_text.empty()) {
    fds += "," + closed_text;
  }
  std::vector<char*> runner_argv{argv[0], const_cast<char*>("--front-fds"), fds.data()};
  for (int i = 1; i < argc; ++i) runner_argv.push_back(argv[i]);
  runner_argv.push_back(nullptr);
  pid_t child = ::fork();
  if (child == 0) {
    ::sigprocmask(SIG_SETMASK, &caller_mask, nullptr);
    ::fcntl(env_fd, F_SETFD, 0);
    ::fcntl(control[0], F_SETFD, 0);
    ::execv(config.runner.c_str(), runner_argv.data());
    ::_exit(to_int(ExitCode::internal));
  }
  ::close(env_fd);
  ::close(control[0]);
  if (child < 0 || signal_fd < 0) {
    say(Error("front", "cannot start the runner: " + errno_text(errno)));
    return to_int(ExitCode::internal);
  }
  while (true) {
    signalfd_siginfo info{};
    ssize_t n = ::read(signal_fd, &info, sizeof info);
    if (n != static_cast<ssize_t>(sizeof info)) continue;
    int signal = static_cast<int>(info.ssi_signo);
    if (signal == SIGCHLD) {
      int status = 0;
      pid_t pid;
      while ((pid = ::waitpid(child, &status, WNOHANG | WUNTRACED)) > 0) {
        if (WIFSTOPPED(status)) {
          // The run stopped (Ctrl-Z on the job): the shell sees its child stop, as without
          // spendcap. Continued by the shell's SIGCONT to the group, or by hand: pass it on.
          ::raise(SIGTSTP);
          ::kill(child, SIGCONT);
          continue;
        }
        exit_as(status);
      }
      continue;
    }
    // The terminal's signals (SI_KERNEL) reached the run's processes already: they share the
    // front's process group. A kill(2) reached only the front.
    if (info.ssi_code == SI_KERNEL) continue;
    char byte = static_cast<char>(signal);
    [[maybe_unused]] ssize_t written = ::write(control[1], &byte, 1);
  }
}

}  // namespace spendcap
