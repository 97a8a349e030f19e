#include "spendcap/process/privileged_run.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "spendcap/base/error.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/process/credentials.hpp"
#include "spendcap/process/exit_status.hpp"
#include "spendcap/process/launcher.hpp"
#include "spendcap/process/process_state.hpp"
#include "spendcap/process/tree_guard.hpp"

extern char** environ;

namespace spendcap {

namespace {

RunnerRun* the_run = nullptr;

constexpr size_t kMaxEnvironmentBytes = size_t{16} << 20;
constexpr int kFrontSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
// What the front passes on: a stop signal the user (or a scheduler, or `timeout`) sent it.
constexpr int kRelayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
// The keeper is root and tiny: no signal but SIGCHLD (and SIGKILL, SIGSTOP) may move it.
constexpr int kKeeperIgnores[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGTSTP, SIGTTIN,
                                  SIGTTOU, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM};

const char* const kConfigWhat = "privileged runner";

void say(const Error& error) {
  std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
}

bool root_only(const struct stat& st) {
  return st.st_uid == 0 && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

bool relayed(int signal) {
  return std::find(std::begin(kRelayed), std::end(kRelayed), signal) != std::end(kRelayed);
}

// Variables the supervisor's own code would follow (libcurl, libpq, OpenSSL, the C library):
// the job gets them, the supervisor does not.
bool steers_the_supervisor(const std::string& name) {
  static const char* const kPrefixes[] = {"LD_",   "PG",       "SSL",     "CURL",
                                          "GCONV", "OPENSSL_", "MALLOC_", "GLIBC_"};
  for (const char* prefix : kPrefixes) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  static const char* const kNames[] = {"nlspath",     "locpath",     "hostaliases",
                                       "localdomain", "res_options", "tzdir"};
  for (const char* listed : kNames) {
    if (lower == listed) return true;
  }
  return lower.size() >= 6 && lower.compare(lower.size() - 6, 6, "_proxy") == 0;
}

// ---- the front ----

int run_front(const RunnerConfig& config, int argc, char** argv) {
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
  ::fcntl(env_fd, F_ADD_SEALS, kFrontSeals);

  sigset_t watched, caller_mask;
  sigemptyset(&watched);
  for (int signal : kRelayed) sigaddset(&watched, signal);
  sigaddset(&watched, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &watched, &caller_mask);
  int signal_fd = ::signalfd(-1, &watched, SFD_CLOEXEC);

  std::string fds = std::to_string(env_fd) + "," + std::to_string(control[0]);
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

// ---- the runner ----

std::map<std::string, std::string> read_environment(int fd) {
  std::string block;
  char buffer[65536];
  off_t offset = 0;
  while (true) {
    ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(kConfigWhat, "reading the front's environment: " + errno_text(errno));
    if (n == 0) break;
    block.append(buffer, static_cast<size_t>(n));
    offset += n;
    if (block.size() > kMaxEnvironmentBytes) {
      throw Error(kConfigWhat, "the front's environment is over 16 MiB", "unset something");
    }
  }
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start < block.size()) {
    size_t end = block.find('\0', start);
    if (end == std::string::npos) end = block.size();
    std::string entry = block.substr(start, end - start);
    size_t eq = entry.find('=');
    if (eq != std::string::npos && eq > 0) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
    start = end + 1;
  }
  return env;
}

// The front's environment: a memfd (F_GET_SEALS fails on any other file but tmpfs and
// hugetlbfs ones, which cannot hold these seals) sealed as the front seals it, so that its content
// is what the front wrote and nobody can change it while the runner reads.

bool is_front_environment(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kFrontSeals) != kFrontSeals) return false;
  char link[64] = {};
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
  return n > 0 && std::string(link, static_cast<size_t>(n)).rfind("/memfd:", 0) == 0;
}

int parse_fd(const std::string& text) {
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value <= 2 || value > 1 << 20) {
    throw Error("--front-fds", "not a descriptor pair", "run spendcap, not the runner");
  }
  return static_cast<int>(value);
}

struct Service {
  uid_t uid = 0;
  gid_t gid = 0;
};

Service service_of(const RunnerConfig& config, const Identity& caller) {
  passwd entry{}, *found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwnam_r(config.user.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      !found) {
    throw Error(kRunnerConfigPath, "no service user " + config.user,
                "scripts/install-shared-runner.sh creates it");
  }
  if (found->pw_uid == 0 || found->pw_uid == caller.uid) {
    throw Error(kRunnerConfigPath,
                "the service user " + config.user + " is root or the caller: it must be neither",
                "run jobs as another user");
  }
  return Service{found->pw_uid, found->pw_gid};
}

void write_text(int fd, const char* text, const std::string& what) {
  if (::write(fd, text, std::strlen(text)) != static_cast<ssize_t>(std::strlen(text))) {
    throw Error(kConfigWhat, what + ": " + errno_text(errno));
  }
}

// The run's cgroups, made as root. Paths are the kernel's (mountinfo, /proc/self/cgroup) and the
// cgroup filesystem has no links, so no user can aim these steps elsewhere.
struct RunCgroups {
  std::string job_dir;
  int procs_fd = -1;
  int kill_fd = -1;
};

RunCgroups make_cgroups() {
  std::string mount, own, why_not;
  if (!locate_cgroup_v2(&mount, &own, &why_not)) {
    throw Error(kConfigWhat, "no cgroup v2 hierarchy: " + why_not,
                "the privileged runner needs cgroup v2 (mounted at /sys/fs/cgroup or unified)");
  }
  std::string runner_dir = mount + "/spendcap-runner";
  if (::mkdir(runner_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error(kConfigWhat, "cannot create " + runner_dir + ": " + errno_text(errno));
  }
  struct stat st {};
  if (::lstat(runner_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || !root_only(st)) {
    throw Error(kConfigWhat, runner_dir + " is not a directory root alone writes");
  }
  RunCgroups cgroups;
  std::string id = random_uuid();
  id.erase(std::remove(id.begin(), id.end(), '-'), id.end());
  cgroups.job_dir = own + "/spendcap-" + id.substr(0, 16);
  if (::mkdir(cgroups.job_dir.c_str(), 0755) != 0) {
    throw Error(kConfigWhat, "cannot create " + cgroups.job_dir + ": " + errno_text(errno));
  }
  cgroups.procs_fd = ::open((cgroups.job_dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  cgroups.kill_fd = ::open((cgroups.job_dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (cgroups.procs_fd < 0) {
    ::rmdir(cgroups.job_dir.c_str());
    throw Error(kConfigWhat,
                "cannot open " + cgroups.job_dir + "/cgroup.procs: " + errno_text(errno));
  }
  // Out of every user's cgroup: what the user freezes or kills there is not the supervisor.
  int self = ::open((runner_dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (self < 0) throw Error(kConfigWhat, "cannot open " + runner_dir + "/cgroup.procs");
  try {
    write_text(self, "0", "moving the runner to " + runner_dir);
  } catch (...) {
    ::close(self);
    throw;
  }
  ::close(self);
  return cgroups;
}

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

// The keeper: root, no input but one byte per relayed signal.
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

std::optional<int> privileged_run(const Identity& caller, const RunnerConfig& config, int& argc,
                                  char**& argv, Inherited inherited, int cwd_fd) {
  // A setuid exec leaves the real uid the caller's, and kill(2) lets a sender whose uid matches
  // the target's real uid signal it: the keeper (and what it forks) takes root as its real and
  // saved uid before anything else.
  uid_t r = 1, e = 1, s = 1;
  if (::setresuid(0, 0, 0) != 0 || ::getresuid(&r, &e, &s) != 0 || r != 0 || e != 0 || s != 0) {
    throw Error(kConfigWhat, "cannot take root as the real uid: " + errno_text(errno));
  }
  Service service = service_of(config, caller);
  std::string pair = argv[2];
  size_t comma = pair.find(',');
  int env_fd = parse_fd(pair.substr(0, comma));
  int control_fd = parse_fd(comma == std::string::npos ? "" : pair.substr(comma + 1));
  struct stat control_st {};
  if (!is_front_environment(env_fd) || ::fstat(control_fd, &control_st) != 0 ||
      !S_ISFIFO(control_st.st_mode)) {
    throw Error("--front-fds", "not the front's sealed environment memfd and control pipe",
                "run spendcap, not the runner");
  }
  // A forged call's subcommand would run as the service user: only the front's run is served.
  if (argc < 4 || std::string(argv[3]) != "run") {
    throw Error("--front-fds", "the runner serves the front's `run` only",
                "run spendcap, not the runner");
  }
  ::fcntl(env_fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(control_fd, F_SETFD, FD_CLOEXEC);
  auto environment = read_environment(env_fd);
  ::close(env_fd);
  // What the job inherits: the front's fds (make's jobserver, Slurm's PMI), none of the runner's;
  // its limits, signals and scheduling the caller's, captured before the reset.
  inherited.fds = Inherited::capture().fds;
  RunCgroups cgroups = make_cgroups();

  pid_t supervisor = ::fork();
  if (supervisor < 0) throw Error(kConfigWhat, "fork: " + errno_text(errno));
  if (supervisor > 0) {
    ::close(cgroups.procs_fd);
    if (cwd_fd >= 0) ::close(cwd_fd);
    keep(supervisor, control_fd, cgroups);
  }
  try {
    ::close(control_fd);
    // The caller's working directory, for the supervisor's relative paths and the job.
    if (cwd_fd >= 0 && ::fchdir(cwd_fd) != 0) {
      throw Error(kConfigWhat, "cannot enter the caller's working directory: " + errno_text(errno));
    }
    if (cwd_fd >= 0) ::close(cwd_fd);
    PreforkedGuard guard;
    guard.caller = caller;
    guard.service_uid = service.uid;
    guard.service_gid = service.gid;
    guard.cgroup_dir = cgroups.job_dir;
    guard.cgroup_procs_fd = cgroups.procs_fd;
    guard.cgroup_kill_fd = cgroups.kill_fd;
    guard.inherited = inherited;
    prefork_guard(guard);
    ::close(cgroups.procs_fd);
    switch_to_service(caller, service.uid, service.gid, cap_bit(CAP_KILL));
    for (const auto& [name, value] : environment) {
      if (!steers_the_supervisor(name)) ::setenv(name.c_str(), value.c_str(), 1);
    }
    the_run = new RunnerRun{std::move(environment), Cgroup(cgroups.job_dir, cgroups.kill_fd),
                            config.user};
  } catch (const Error& error) {
    say(error);
    ::_exit(to_int(ExitCode::internal));
  }
  argv[2] = argv[0];
  argv += 2;
  argc -= 2;
  return std::nullopt;
}

}  // namespace

std::optional<RunnerConfig> read_runner_config() {
  struct stat st {};
  if (::lstat(kRunnerConfigPath, &st) != 0) {
    if (errno == ENOENT) return std::nullopt;
    throw Error(kRunnerConfigPath, errno_text(errno), "check the runner's install");
  }
  struct stat dir {};
  if (!S_ISREG(st.st_mode) || !root_only(st) || ::stat("/etc/spendcap", &dir) != 0 ||
      !root_only(dir)) {
    throw Error(kRunnerConfigPath, "not root's alone (owner root, no group or other write)",
                "the runner's owner reinstalls it with scripts/install-shared-runner.sh");
  }
  std::ifstream file(kRunnerConfigPath);
  std::stringstream text;
  text << file.rdbuf();
  RunnerConfig config;
  try {
    nlohmann::json json = nlohmann::json::parse(text.str());
    config.runner = json.at("runner").get<std::string>();
    config.user = json.at("user").get<std::string>();
  } catch (const std::exception& error) {
    throw Error(kRunnerConfigPath, std::string("malformed: ") + error.what(),
                "it holds {\"runner\": PATH, \"user\": NAME}");
  }
  if (config.runner.empty() || config.runner[0] != '/' || config.user.empty()) {
    throw Error(kRunnerConfigPath, "\"runner\" must be an absolute path and \"user\" a name");
  }
  return config;
}

const RunnerRun* runner_run() {
  return the_run;
}

std::optional<int> enter_shared_runner(int& argc, char**& argv) {
  bool setuid_root = ::geteuid() == 0 && ::getuid() != 0;
  try {
    if (!setuid_root) {
      // Root is trusted with the ledger and runs as a plain spendcap.
      if (::getuid() == 0) return std::nullopt;
      std::optional<RunnerConfig> config = read_runner_config();
      if (!config) return std::nullopt;
      if (argc >= 2 && std::string(argv[1]) == "run") return run_front(*config, argc, argv);
      ::execv(config->runner.c_str(), argv);
      throw Error(config->runner, "cannot run the runner: " + errno_text(errno),
                  "the runner's owner reinstalls it with scripts/install-shared-runner.sh");
    }
    // Nothing of the caller's process state either: limits, signals, umask, scheduling, cwd are
    // reset before the first privileged step; the job gets the caller's back (process_state.hpp).
    Inherited user_state = Inherited::capture();
    int cwd_fd = reset_process_state();
    Identity caller = caller_identity();
    // Nothing of the caller's environment steers the privileged steps. (Another subcommand gets
    // it back once reduced to the setgid ids, as with the setgid install.)
    char** caller_environ = environ;
    environ = nullptr;
    std::optional<RunnerConfig> config = read_runner_config();
    if (!config) {
      throw Error(kRunnerConfigPath, "missing: this setuid runner is not configured",
                  "the runner's owner installs it with scripts/install-shared-runner.sh");
    }
    if (argc >= 4 && std::string(argv[1]) == "--front-fds") {
      return privileged_run(caller, *config, argc, argv, std::move(user_state), cwd_fd);
    }
    if (argc >= 2 && std::string(argv[1]) == "run") {
      throw Error("run", "the runner runs jobs only for the front", "run spendcap run ...");
    }
    reduce_to_setgid(caller, service_of(*config, caller).gid);
    if (cwd_fd >= 0 && ::fchdir(cwd_fd) != 0) {
      throw Error(kConfigWhat, "cannot enter the working directory: " + errno_text(errno));
    }
    environ = caller_environ;
    return std::nullopt;
  } catch (const Error& error) {
    say(error);
    return to_int(ExitCode::internal);
  }
}

}  // namespace spendcap
