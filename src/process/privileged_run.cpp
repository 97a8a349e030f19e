#include "spendcap/process/privileged_run.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <utility>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/process/credentials.hpp"
#include "spendcap/process/exit_status.hpp"
#include "spendcap/process/tree_guard.hpp"

extern char** environ;

namespace spendcap {

namespace {

RunnerRun* the_run = nullptr;
RunnerCall* the_call = nullptr;

// What the front passes on: a stop signal the user (or a scheduler, or `timeout`) sent it.
constexpr int kRelayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

void say(const Error& error) {
  std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
}

// ---- the front ----

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

// runner.json and its service user's ids, as the runner read them; Error naming `flag` if none.
struct ServiceUser {
  uid_t uid = 0;
  gid_t gid = 0;
};
std::pair<RunnerConfig, ServiceUser> installed_runner(const char* flag) {
  std::optional<RunnerConfig> config = read_runner_config();
  passwd entry{}, *found = nullptr;
  std::vector<char> buffer(16384);
  if (!config ||
      ::getpwnam_r(config->user.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      !found) {
    throw Error(flag, "no shared runner is installed here", "run spendcap ...");
  }
  return {*config, ServiceUser{found->pw_uid, found->pw_gid}};
}

// ---- the runner's exec for every other subcommand ----

// The service user's process with CAP_SETUID alone, as the runner made it; `settle_runner_call`
// below takes its last step once main knows the ledger's kind.
std::optional<int> become_runner_call(int& argc, char**& argv) {
  // `spendcap` alone is a call too (it prints the usage).
  if (argc < 3) throw Error(kCallFlag, "the runner's call is incomplete", "run spendcap ...");
  std::string verb = argc >= 4 ? argv[3] : "";
  auto [config, service] = installed_runner(kCallFlag);
  auto caller = static_cast<uid_t>(parse_runner_id(argv[2], kCallFlag));
  // Only the runner makes this process (the service user's ids with CAP_SETUID); anyone else who
  // calls it so runs as themselves, and is refused here.
  if (::getuid() != service.uid || ::geteuid() != service.uid ||
      !(effective_capabilities() & cap_bit(CAP_SETUID)) || caller == 0 || caller == service.uid ||
      verb == "run" || verb == kSupervisorFlag) {
    throw Error(kCallFlag, "not started by the runner", "run spendcap ...");
  }
  the_call = new RunnerCall{caller, service.uid, service.gid, config.spool, false};
  argv[2] = argv[0];
  argv += 2;
  argc -= 2;
  return std::nullopt;
}

// ---- the supervisor, exec'd by the runner ----

std::optional<int> become_supervisor(int& argc, char**& argv) {
  if (argc < 1 + kSupervisorArgs + 1) {
    throw Error(kSupervisorFlag, "the runner's call is incomplete", "run spendcap, not the runner");
  }
  SupervisorCall call =
      parse_supervisor_args(std::vector<std::string>(argv + 1, argv + 1 + kSupervisorArgs));
  auto [config, service] = installed_runner(kSupervisorFlag);
  // Only the runner makes this process: the service user's ids with CAP_SETUID and CAP_KILL.
  // Anyone else who calls it so runs as themselves, and is refused here.
  constexpr std::uint64_t kFromRunner = cap_bit(CAP_KILL) | cap_bit(CAP_SETUID);
  if (::getuid() != service.uid || ::geteuid() != service.uid ||
      (effective_capabilities() & kFromRunner) != kFromRunner || call.caller_uid == 0 ||
      call.caller_uid == service.uid) {
    throw Error(kSupervisorFlag, "not started by the runner", "run spendcap run ...");
  }
  settle_supervisor(call.caller_uid, cap_bit(CAP_KILL));
  adopt_preforked_guard(call.guard_pid, call.spec_fd, call.events_fd, call.control_fd);
  ::fcntl(call.kill_fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(call.env_fd, F_SETFD, FD_CLOEXEC);
  if (!is_front_environment(call.env_fd)) {
    throw Error(kSupervisorFlag, "the environment is not the front's sealed memfd");
  }
  std::map<std::string, std::string> environment = read_environment_fd(call.env_fd);
  ::close(call.env_fd);
  the_run = new RunnerRun{std::move(environment), Cgroup(call.cgroup_dir, call.kill_fd),
                          config.user, config.spool};
  argv[kSupervisorArgs] = argv[0];
  argv += kSupervisorArgs;
  argc -= kSupervisorArgs;
  return std::nullopt;
}

}  // namespace

const RunnerRun* runner_run() {
  return the_run;
}

const RunnerCall* runner_call() {
  return the_call;
}

std::optional<std::string> runner_spool() {
  if (the_run) return the_run->spool;
  if (the_call) return the_call->spool;
  return std::nullopt;
}

void settle_runner_call(bool as_the_caller) {
  if (!the_call || the_call->settled) return;
  const char* what = "runner's call";
  if (!as_the_caller) {
    settle_supervisor(the_call->caller_uid, 0);
    // The service user's connections follow the locked policy, not the caller's PG*, proxies...
    std::vector<std::string> dropped;
    for (char** entry = environ; entry && *entry; ++entry) {
      const char* eq = std::strchr(*entry, '=');
      std::string name(*entry, eq ? static_cast<size_t>(eq - *entry) : std::strlen(*entry));
      if (steers_network_code(name)) dropped.push_back(name);
    }
    for (const std::string& name : dropped) ::unsetenv(name.c_str());
  } else {
    // A PostgreSQL ledger checks each connection's own role: the caller's process, holding the
    // ledger's group as the setgid install does (the server bounds what a stopped one holds:
    // lock_timeout and idle_in_transaction_session_timeout, scripts/install-shared-runner.sh).
    if (::setresuid(the_call->caller_uid, the_call->caller_uid, the_call->caller_uid) != 0) {
      throw Error(what, "setresuid: " + errno_text(errno));
    }
    ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (!lower_capabilities(0) || ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 ||
        effective_capabilities() != 0 || ::setuid(the_call->service_uid) == 0 ||
        ::getuid() != the_call->caller_uid || ::geteuid() != the_call->caller_uid) {
      throw Error(what, "the caller's ids are not exactly the caller's");
    }
  }
  the_call->settled = true;
}

std::optional<int> enter_shared_runner(int& argc, char**& argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == kSupervisorFlag) return become_supervisor(argc, argv);
    if (argc >= 2 && std::string(argv[1]) == kCallFlag) return become_runner_call(argc, argv);
    if (::geteuid() == 0 && ::getuid() != 0) {
      throw Error(argv[0], "spendcap itself is setuid root: only spendcap-runner may be",
                  "the runner's owner reinstalls with scripts/install-shared-runner.sh");
    }
    // Root is trusted with the ledger and runs as a plain spendcap.
    if (::getuid() == 0) return std::nullopt;
    // Started with another effective group: the runner's exec for a subcommand (the setgid
    // install's ids), or the setgid-only install itself. Either goes on as the setgid install.
    if (::getegid() != ::getgid()) return std::nullopt;
    std::optional<RunnerConfig> config = read_runner_config();
    if (!config) return std::nullopt;
    if (argc >= 2 && std::string(argv[1]) == "run") return run_front(*config, argc, argv);
    ::execv(config->runner.c_str(), argv);
    throw Error(config->runner, "cannot run the runner: " + errno_text(errno),
                "the runner's owner reinstalls it with scripts/install-shared-runner.sh");
  } catch (const Error& error) {
    say(error);
    return to_int(ExitCode::internal);
  }
}

}  // namespace spendcap
