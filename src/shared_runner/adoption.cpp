#include "spendcap/shared_runner/adoption.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/process/credentials.hpp"
#include "spendcap/process/runner_channel.hpp"
#include "spendcap/process/tree_guard.hpp"

extern char** environ;

namespace spendcap {

namespace {

RunnerRun* the_run = nullptr;
RunnerCall* the_call = nullptr;

// The first thing in the exec'd supervisor or runner call: the filesystem uid `caller_uid` (the one
// use of CAP_SETUID), then permitted and effective capabilities exactly `keep`, none inheritable
// or ambient; not dumpable. Checked (root cannot be regained). Throws Error.
void settle_supervisor(uid_t caller_uid, std::uint64_t keep) {
  const char* what = "runner's supervisor";
  auto fail = [what](const char* step) {
    throw Error(what, std::string(step) + ": " + errno_text(errno),
                "check the install (scripts/install-shared-runner.sh)");
  };
  ::setfsuid(caller_uid);
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) fail("ambient");
  if (!lower_capabilities(keep)) fail("lowering the capabilities");
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail("PR_SET_DUMPABLE");
  errno = EPERM;
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != caller_uid) {
    fail("the filesystem uid is not the caller's");
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_SETUID, 0, 0) != 0 || ::setuid(0) == 0) {
    fail("root could be regained");
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

}  // namespace

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

}  // namespace spendcap
