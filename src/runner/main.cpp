// spendcap-runner: the shared runner's one setuid-root program (README "Installing a shared
// runner", "Threat model"; shared_runner/entry.hpp has the whole protocol). Small on purpose, as
// bubblewrap is: it links the process and base areas only (no SQLite, libcurl, libpq, NVML, CLI11,
// JSON library, nor the front's or the supervisor's code; tests/integration/test_runner_binary.py
// and scripts/check_layering.py check), and reads as named steps:
//
//   acquire       root as the real uid; at once the caller's filesystem uid and gid and only the
//                 capabilities below (hold_only: every path a later step opens is opened with the
//                 caller's rights); the caller's state captured, then reset (process_state.hpp),
//                 and the reset's two capabilities dropped; the environment cleared;
//                 /etc/spendcap/runner.json read;
//   a front call  (`--front-fds ENV,CTL run ...`, from the plain spendcap of `spendcap run`):
//     check       the environment a sealed memfd, the control fd a pipe, the subcommand run; the
//                 memfd parsed, with the rights acquire left;
//     make cgroup the run's cgroup under the caller's, root-owned; itself moved out of reach
//                 (as_root_on_files: the one kind of step that takes the filesystem uid 0 again);
//     fork        the keeper (this process) and the supervisor (its child);
//     keeper      reduced to CAP_KILL (to signal the supervisor) and CAP_DAC_OVERRIDE (to remove
//                 the run's cgroup from the caller's cgroup directory), root's ids, bounding set
//                 cut, no_new_privs; relays the front's signals, mirrors stops, removes the cgroup;
//     guard       forked by the supervisor (as_root_on_files) into the run's PID and mount
//                 namespaces (tree_guard.hpp): the service user with CAP_KILL, CAP_SETUID and
//                 CAP_SETGID until it has launched the job as the caller;
//     drop, exec  the supervisor becomes the service user with CAP_KILL and CAP_SETUID ambient
//                 (the bounding set cut to those, no_new_privs) and execs the ordinary spendcap,
//                 which sets its filesystem uid to the caller's and keeps CAP_KILL alone;
//   any other     (the front execs the runner for every other subcommand): moved out of the
//                 caller's cgroup, the terminal's stop signals ignored, the service user with
//                 CAP_SETUID alone (ambient, bounding set cut, no_new_privs) and the exec of the
//                 ordinary spendcap as `--runner-call CALLER_UID ...`, which takes the caller's
//                 filesystem uid and drops CAP_SETUID: no process of the caller's ever holds the
//                 ledger, its lock or its group (issue 29, item 1).
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

#include "spendcap/base/error.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/process/cgroup.hpp"
#include "spendcap/process/credentials.hpp"
#include "spendcap/process/exit_status.hpp"
#include "spendcap/process/launcher.hpp"
#include "spendcap/process/process_state.hpp"
#include "spendcap/process/runner_channel.hpp"
#include "spendcap/process/tree_guard.hpp"

extern char** environ;

namespace spendcap {
namespace {

const char* const kWhat = "privileged runner";
// The keeper is root and tiny: no signal but SIGCHLD (and SIGKILL, SIGSTOP) may move it.
constexpr int kKeeperIgnores[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGTSTP, SIGTTIN,
                                  SIGTTOU, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM};
// What the front passes on over the control pipe.
constexpr int kRelayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr std::uint64_t kKeeperCaps = cap_bit(CAP_KILL) | cap_bit(CAP_DAC_OVERRIDE);
// Every capability the steps after acquire use; acquire drops all the others.
constexpr std::uint64_t kRunnerCaps =
    cap_bit(CAP_SETUID) |   // the service user's uids (supervisor, guard), the guard's fsuid
    cap_bit(CAP_SETGID) |   // setgroups and setresgid: the supervisor's, the guard's, the keeper's
    cap_bit(CAP_SETPCAP) |  // the keeper's and the supervisor's bounding sets cut
    cap_bit(CAP_KILL) |     // the keeper's relay to the supervisor; the guard's to the tree
    cap_bit(CAP_SYS_ADMIN) |    // clone(CLONE_NEWPID | CLONE_NEWNS) of the guard, its /proc mount
    cap_bit(CAP_DAC_OVERRIDE);  // the run's cgroup made in (and removed from) the caller's
                                // cgroup directory, which systemd delegates to the caller; in
                                // the effective set only while as_root_on_files
// reset_process_state's, dropped right after it: raising a hard limit the caller lowered, and the
// nice value and scheduling policy back from what the caller set.
constexpr std::uint64_t kResetCaps = cap_bit(CAP_SYS_RESOURCE) | cap_bit(CAP_SYS_NICE);
constexpr std::uint64_t kSupervisorAmbient = cap_bit(CAP_KILL) | cap_bit(CAP_SETUID);

struct Service {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct Start {
  Inherited caller_state;  // the caller's limits, signals... (the job gets them back)
  int cwd_fd = -1;         // the caller's working directory (O_PATH)
  char** caller_environ = nullptr;
  Identity caller;
  RunnerConfig config;
  Service service;
};

bool root_only(const struct stat& st) {
  return st.st_uid == 0 && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

Service service_of(const RunnerConfig& config, const Identity& caller) {
  passwd entry{}, *found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwnam_r(config.user.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      !found) {
    throw Error(kRunnerConfigPath, "no service user " + config.user,
                "scripts/install-shared-runner.sh creates it");
  }
  if (found->pw_uid == 0 || found->pw_uid == caller.uid || found->pw_gid == caller.gid) {
    throw Error(kRunnerConfigPath,
                "the service user " + config.user +
                    " is root or the caller, or its group the caller's: it must be neither",
                "run jobs as another user");
  }
  return Service{found->pw_uid, found->pw_gid};
}

// ---- acquire ----

Start acquire() {
  Start start;
  start.caller_environ = environ;
  environ = nullptr;
  if (::geteuid() != 0) {
    throw Error(kWhat, "not running as root (is it installed setuid root? no_new_privs set?)",
                "run spendcap, which starts the runner; its owner installs it with "
                "scripts/install-shared-runner.sh");
  }
  start.caller = caller_identity();
  // A setuid exec leaves the real uid the caller's, and kill(2) lets a sender whose uid matches
  // the target's real uid signal it: root as the real and saved uid before anything else. (This
  // also sets the filesystem uid to 0, so it comes before hold_only.)
  uid_t r = 1, e = 1, s = 1;
  if (::setresuid(0, 0, 0) != 0 || ::getresuid(&r, &e, &s) != 0 || r != 0 || e != 0 || s != 0) {
    throw Error(kWhat, "cannot take root as the real uid: " + errno_text(errno));
  }
  hold_only(start.caller, kRunnerCaps | kResetCaps);
  // What the caller set (ulimit, trap, nice, umask, cd) steers no later step.
  start.caller_state = Inherited::capture();
  start.cwd_fd = reset_process_state();
  hold_only(start.caller, kRunnerCaps);
  std::optional<RunnerConfig> config = read_runner_config();
  if (!config) {
    throw Error(kRunnerConfigPath, "missing: this setuid runner is not configured",
                "the runner's owner installs it with scripts/install-shared-runner.sh");
  }
  start.config = *config;
  struct stat st {};
  if (::stat(config->spendcap.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !root_only(st) ||
      (st.st_mode & (S_ISUID | S_ISGID))) {
    throw Error(config->spendcap, "not a plain root-owned spendcap (or it is setuid or setgid)",
                "the runner's owner reinstalls it with scripts/install-shared-runner.sh");
  }
  start.service = service_of(start.config, start.caller);
  return start;
}

// A step that makes or removes what root must own (the run's cgroup and the runner's own, the
// guard's namespaces and /proc): the filesystem uid 0 for its length, then the caller's again.
// The kernel puts the permitted CAP_DAC_OVERRIDE back into the effective set while the fsuid is 0
// and takes it out again after. Its paths are the kernel's (mountinfo, /proc/self/cgroup, the
// cgroup filesystem has no links), so no user can aim it elsewhere.
class AsRootOnFiles {
 public:
  explicit AsRootOnFiles(const Identity& caller) : caller_(caller) { set_filesystem_uid(0); }
  ~AsRootOnFiles() {
    // Fails closed: a runner left with root's filesystem uid goes no further.
    try {
      set_filesystem_uid(caller_.uid);
    } catch (...) {
      ::_exit(to_int(ExitCode::internal));
    }
  }
  AsRootOnFiles(const AsRootOnFiles&) = delete;
  AsRootOnFiles& operator=(const AsRootOnFiles&) = delete;

 private:
  const Identity& caller_;
};

// ---- make cgroup ----

struct RunCgroups {
  std::string job_dir;
  int procs_fd = -1;
  int kill_fd = -1;
};

void write_text(int fd, const char* text, const std::string& what) {
  if (::write(fd, text, std::strlen(text)) != static_cast<ssize_t>(std::strlen(text))) {
    throw Error(kWhat, what + ": " + errno_text(errno));
  }
}

// Out of every user's cgroup: what a user freezes, limits or kills there is not the runner's.
void move_out_of_reach(const std::string& mount) {
  std::string runner_dir = mount + "/spendcap-runner";
  if (::mkdir(runner_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error(kWhat, "cannot create " + runner_dir + ": " + errno_text(errno));
  }
  struct stat st {};
  if (::lstat(runner_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !root_only(st)) {
    throw Error(kWhat, runner_dir + " is not a directory root alone writes");
  }
  int self = ::open((runner_dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (self < 0) throw Error(kWhat, "cannot open " + runner_dir + "/cgroup.procs");
  try {
    write_text(self, "0", "moving the runner to " + runner_dir);
  } catch (...) {
    ::close(self);
    throw;
  }
  ::close(self);
}

// The run's cgroups, made as root (as_root_on_files). Paths are the kernel's (mountinfo,
// /proc/self/cgroup) and the cgroup filesystem has no links, so no user can aim these steps
// elsewhere.
RunCgroups make_cgroups() {
  std::string mount, own, why_not;
  if (!locate_cgroup_v2(&mount, &own, &why_not)) {
    throw Error(kWhat, "no cgroup v2 hierarchy: " + why_not,
                "the privileged runner needs cgroup v2 (mounted at /sys/fs/cgroup or unified)");
  }
  RunCgroups cgroups;
  std::string id = random_uuid();
  id.erase(std::remove(id.begin(), id.end(), '-'), id.end());
  cgroups.job_dir = own + "/spendcap-" + id.substr(0, 16);
  if (::mkdir(cgroups.job_dir.c_str(), 0755) != 0) {
    throw Error(kWhat, "cannot create " + cgroups.job_dir + ": " + errno_text(errno));
  }
  cgroups.procs_fd = ::open((cgroups.job_dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  cgroups.kill_fd = ::open((cgroups.job_dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (cgroups.procs_fd < 0) {
    ::rmdir(cgroups.job_dir.c_str());
    throw Error(kWhat, "cannot open " + cgroups.job_dir + "/cgroup.procs: " + errno_text(errno));
  }
  move_out_of_reach(mount);
  return cgroups;
}

// ---- the keeper ----

// After the supervisor: nothing of the run may be left in its cgroup, then it goes.
void remove_job_cgroup(const RunCgroups& cgroups) {
  Cgroup cgroup(cgroups.job_dir, cgroups.kill_fd);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!cgroup.procs().empty() && std::chrono::steady_clock::now() < until) {
    cgroup.kill();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  cgroup.remove();
}

bool relayed(int signal) {
  return std::find(std::begin(kRelayed), std::end(kRelayed), signal) != std::end(kRelayed);
}

// No input but one byte per relayed signal.
[[noreturn]] void keep(pid_t supervisor, int control_fd, const RunCgroups& cgroups) {
  for (int signal : kKeeperIgnores) ::signal(signal, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  int signal_fd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  bool front_alive = true;
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(supervisor, &status, WNOHANG | WUNTRACED);
    if (pid == supervisor && WIFSTOPPED(status)) {
      ::kill(::getpid(), SIGSTOP);  // mirrored: the front sees its child stop
      continue;
    }
    if (pid == supervisor) {
      remove_job_cgroup(cgroups);
      exit_as(status);
    }
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {control_fd, POLLIN, 0}};
    int ready = ::poll(fds, front_alive ? 2 : 1, signal_fd < 0 ? 100 : -1);
    if (ready < 0 && errno != EINTR) ::_exit(to_int(ExitCode::internal));
    if (fds[0].revents) {
      signalfd_siginfo info;
      while (::read(signal_fd, &info, sizeof info) > 0) {
      }
    }
    if (front_alive && fds[1].revents) {
      char bytes[64];
      ssize_t n = ::read(control_fd, bytes, sizeof bytes);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        // The front is gone (SIGKILL included): stop the run as a SIGHUP to spendcap would.
        front_alive = false;
        ::kill(supervisor, SIGHUP);
      }
      for (ssize_t i = 0; i < n; ++i) {
        if (relayed(bytes[i])) ::kill(supervisor, bytes[i]);
      }
    }
  }
}

// ---- the supervisor, until its exec ----

[[noreturn]] void supervise(const Start& start, const FrontFds& front,
                            const std::map<std::string, std::string>& environment,
                            const RunCgroups& cgroups, int argc, char** argv) {
  // The caller's working directory, for the supervisor's relative paths and the job.
  if (start.cwd_fd >= 0 && ::fchdir(start.cwd_fd) != 0) {
    throw Error(kWhat, "cannot enter the caller's working directory: " + errno_text(errno));
  }
  PreforkedGuard guard;
  guard.caller = start.caller;
  guard.service_uid = start.service.uid;
  guard.service_gid = start.service.gid;
  guard.cgroup_dir = cgroups.job_dir;
  guard.cgroup_procs_fd = cgroups.procs_fd;
  guard.cgroup_kill_fd = cgroups.kill_fd;
  guard.inherited = start.caller_state;
  PreforkedEnds ends;
  {
    AsRootOnFiles as_root(start.caller);
    ends = prefork_guard(guard);
  }
  ::close(cgroups.procs_fd);

  SupervisorCall call;
  call.caller_uid = start.caller.uid;
  call.guard_pid = ends.pid;
  call.spec_fd = ends.spec_fd;
  call.events_fd = ends.events_fd;
  call.control_fd = ends.control_fd;
  call.kill_fd = cgroups.kill_fd;
  call.env_fd = front.environment;
  call.cgroup_dir = cgroups.job_dir;
  std::vector<std::string> words = supervisor_args(call);
  std::vector<char*> args{const_cast<char*>("spendcap")};
  for (std::string& word : words) args.push_back(word.data());
  for (int i = 3; i < argc; ++i) args.push_back(argv[i]);  // "run" and the user's arguments
  args.push_back(nullptr);
  std::vector<std::string> entries;
  for (const auto& [name, value] : environment) {
    if (!steers_the_loader(name) && !steers_network_code(name)) {
      entries.push_back(name + "=" + value);
    }
  }
  std::vector<char*> envp;
  for (std::string& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);
  // The job's inherited fds are the guard's to pass on: none of them reaches the supervisor.
  for (int fd : start.caller_state.fds) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  for (int fd : {call.spec_fd, call.events_fd, call.control_fd, call.kill_fd, call.env_fd}) {
    if (::fcntl(fd, F_SETFD, 0) != 0) throw Error(kWhat, "fd " + std::to_string(fd));
  }
  switch_to_service_for_exec(start.caller, start.service.uid, start.service.gid,
                             kSupervisorAmbient);
  ::execve(start.config.spendcap.c_str(), args.data(), envp.data());
  throw Error(start.config.spendcap, "cannot run it as the supervisor: " + errno_text(errno),
              "the runner's owner reinstalls it with scripts/install-shared-runner.sh");
}

// ---- the two calls ----

int run_for_the_front(Start& start, int argc, char** argv) {
  FrontFds front = parse_front_fds(argv[2]);
  struct stat control_st {};
  if (!is_front_environment(front.environment) || ::fstat(front.control, &control_st) != 0 ||
      !S_ISFIFO(control_st.st_mode)) {
    throw Error("--front-fds", "not the front's sealed environment memfd and control pipe",
                "run spendcap, not the runner");
  }
  // A forged call's other subcommand would run as the service user: only `run` is served.
  if (argc < 4 || std::string(argv[3]) != "run") {
    throw Error("--front-fds", "the runner serves the front's `run` only",
                "run spendcap, not the runner");
  }
  ::fcntl(front.environment, F_SETFD, FD_CLOEXEC);
  ::fcntl(front.control, F_SETFD, FD_CLOEXEC);
  // Up to 16 MiB the caller wrote, parsed with what acquire left: the caller's filesystem uid,
  // kRunnerCaps permitted, no CAP_DAC_OVERRIDE effective (test_runner_state checks it here).
  std::map<std::string, std::string> environment = read_environment_fd(front.environment);
  // What the job inherits: the front's fds (make's jobserver, Slurm's PMI), none of the runner's.
  Inherited now = Inherited::capture();
  start.caller_state.fds = now.fds;
  start.caller_state.closed_standard = front.closed_standard;
  RunCgroups cgroups;
  {
    AsRootOnFiles as_root(start.caller);
    cgroups = make_cgroups();
  }

  pid_t supervisor = ::fork();
  if (supervisor < 0) throw Error(kWhat, "fork: " + errno_text(errno));
  if (supervisor > 0) {
    ::close(cgroups.procs_fd);
    ::close(front.environment);
    if (start.cwd_fd >= 0) ::close(start.cwd_fd);
    for (int fd : start.caller_state.fds) ::close(fd);
    reduce_keeper(kKeeperCaps);
    keep(supervisor, front.control, cgroups);
  }
  try {
    ::close(front.control);
    supervise(start, front, environment, cgroups, argc, argv);
  } catch (const Error& error) {
    std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
    ::_exit(to_int(ExitCode::internal));
  }
}

// Every other subcommand (ps, stop, accept, report...): the service user's process, as the
// supervisor is (issue 29, item 1), so that no ledger lock, file or group is ever held by a process
// of the caller's: the caller can neither signal, trace, limit nor freeze it, and the terminal's
// stop keys do not stop it (its Ctrl-C and Ctrl-\ still end it). It reads and writes what the
// caller names with the caller's filesystem uid, the ledger with the service group.
[[noreturn]] void run_for_the_caller(const Start& start, int argc, char** argv) {
  std::string mount, own, why_not;
  if (!locate_cgroup_v2(&mount, &own, &why_not)) {
    throw Error(kWhat, "no cgroup v2 hierarchy: " + why_not,
                "the privileged runner needs cgroup v2 (mounted at /sys/fs/cgroup or unified)");
  }
  {
    AsRootOnFiles as_root(start.caller);
    move_out_of_reach(mount);
  }
  for (int signal : {SIGTSTP, SIGTTIN, SIGTTOU}) ::signal(signal, SIG_IGN);
  if (start.cwd_fd >= 0 && ::fchdir(start.cwd_fd) != 0) {
    throw Error(kWhat, "cannot enter the working directory: " + errno_text(errno));
  }
  std::string caller_uid = std::to_string(start.caller.uid);
  std::vector<char*> args{const_cast<char*>("spendcap"), const_cast<char*>(kCallFlag),
                          caller_uid.data()};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** entry = start.caller_environ; entry && *entry; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    // The network code's own (PG*, proxies) it drops itself, where it stays the service user's.
    if (eq && !steers_the_loader(std::string(*entry, static_cast<size_t>(eq - *entry)))) {
      envp.push_back(*entry);
    }
  }
  envp.push_back(nullptr);
  switch_to_service_for_exec(start.caller, start.service.uid, start.service.gid,
                             cap_bit(CAP_SETUID));
  ::execve(start.config.spendcap.c_str(), args.data(), envp.data());
  throw Error(start.config.spendcap, "cannot run it: " + errno_text(errno),
              "the runner's owner reinstalls it with scripts/install-shared-runner.sh");
}

int runner_main(int argc, char** argv) {
  try {
    Start start = acquire();
    if (argc >= 3 && std::string(argv[1]) == "--front-fds") {
      return run_for_the_front(start, argc, argv);
    }
    if (argc >= 2 && std::string(argv[1]) == "run") {
      throw Error("run", "the runner runs jobs only for the front", "run spendcap run ...");
    }
    run_for_the_caller(start, argc, argv);
  } catch (const Error& error) {
    std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
    return to_int(ExitCode::internal);
  }
}

}  // namespace
}  // namespace spendcap

int main(int argc, char** argv) {
  return spendcap::runner_main(argc, argv);
}
