// What passes between the shared runner's three programs (shared_runner/entry.hpp): the root-owned
// /etc/spendcap/runner.json; the front's call of the setuid spendcap-runner (`--front-fds ENV,CTL
// run ...`, the environment in a sealed memfd); and the runner's exec of the unprivileged spendcap
// as the run's supervisor (`--runner-supervisor ...`). Every parser here is pure (no I/O but the
// checks of an fd named as such), total over any input, and fuzzed (tests/fuzz/fuzz_runner.cpp):
// the setuid runner reads its argv and the environment memfd before it trusts anything.
#pragma once

#include <sys/types.h>

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spendcap {

inline constexpr const char* kRunnerConfigPath = "/etc/spendcap/runner.json";

// /etc/spendcap/runner.json: {"runner": "/usr/local/lib/spendcap/spendcap-runner", "user":
// "spendcap", "spendcap": "/usr/local/bin/spendcap", "spool": "/var/lib/spendcap/spool"}: the
// setuid runner, the service user, the unprivileged binary the runner execs as the supervisor
// (and for every other subcommand), and the runner's own spool of final rows (optional; that
// default when absent).
struct RunnerConfig {
  std::string runner;
  std::string user;
  std::string spendcap;
  std::string spool = "/var/lib/spendcap/spool";
};

// The config from its text: a flat JSON object of strings (no nesting; \" \\ \/ \n \t \uXXXX
// below 0x80 escapes). Throws Error naming the file when it is not one, or when "runner" or
// "spendcap" is not an absolute path or "user" is empty.
RunnerConfig parse_runner_config(const std::string& text);

// nullopt when the file does not exist; Error when it exists but is not root's alone (owner root,
// no group or other write, nor on its directory) or is malformed.
std::optional<RunnerConfig> read_runner_config();

// Variables a privileged process of the runner must not follow: the loader's and the C library's
// (LD_*, GCONV_PATH, MALLOC_*, GLIBC_TUNABLES, NLSPATH, LOCPATH, HOSTALIASES, LOCALDOMAIN,
// RES_OPTIONS, TZDIR), read at exec or start-up, so the runner drops them before its exec; and
// the network code's (libpq's PG*, OpenSSL's SSL*/OPENSSL_*, libcurl's CURL* and *_proxy), which
// the supervisor and a runner call that stays the service user's drop themselves. The job gets them
// all.
bool steers_the_loader(const std::string& name);
bool steers_network_code(const std::string& name);

// The front's environment block: NUL-separated KEY=VALUE entries (an entry without '=' or with
// an empty key is dropped; the first of two equal keys wins). Throws Error over 16 MiB.
std::map<std::string, std::string> parse_environment_block(const std::string& block);
inline constexpr size_t kMaxEnvironmentBytes = size_t{16} << 20;

// "ENV,CTL[,CLOSED]" of --front-fds: two fds above 2, then which of fds 0-2 the caller had
// closed (digits, e.g. "0" or "12"; the front fills them with /dev/null so that its memfd and
// pipe do not take their numbers, and the job gets them closed again). Throws Error when it is
// anything else.
struct FrontFds {
  int environment = -1;
  int control = -1;
  std::array<bool, 3> closed_standard{};
};
// The CLOSED part for `closed` ("" when none was).
std::string closed_standard_text(const std::array<bool, 3>& closed);
FrontFds parse_front_fds(const std::string& text);

// The seals the front puts on its environment memfd; is_front_environment: `fd` is a memfd
// (F_GET_SEALS works on shmem files only, and only a memfd made with MFD_ALLOW_SEALING can carry
// these) with all of them, so its content is what the front wrote and stays so.
int front_seals();
bool is_front_environment(int fd);

// Reads a sealed environment memfd whole (pread from 0). Throws Error.
std::map<std::string, std::string> read_environment_fd(int fd);

// The runner's exec of the supervisor: `spendcap --runner-supervisor CALLER_UID GUARD_PID SPEC
// EVENTS CONTROL KILL ENV CGROUP_DIR run ...` (kSupervisorArgs words after argv[0], then the
// front's argv from "run" on).
struct SupervisorCall {
  uid_t caller_uid = 0;
  pid_t guard_pid = -1;
  int spec_fd = -1;     // the preforked guard's spec pipe (write end)
  int events_fd = -1;   // its events pipe (read end)
  int control_fd = -1;  // its control pipe (write end)
  int kill_fd = -1;     // the run's cgroup.kill, opened by root
  int env_fd = -1;      // the front's sealed environment
  std::string cgroup_dir;
};
inline constexpr int kSupervisorArgs = 9;
// The runner's exec for every other subcommand: `spendcap --runner-call CALLER_UID SUBCOMMAND ...`
// as the service user (the ids of the supervisor, CAP_SETUID alone, once, for the filesystem uid).
inline constexpr const char* kCallFlag = "--runner-call";
inline constexpr const char* kSupervisorFlag = "--runner-supervisor";
std::vector<std::string> supervisor_args(const SupervisorCall& call);
// From argv[1..kSupervisorArgs]; Error when a word is not as supervisor_args writes it.
SupervisorCall parse_supervisor_args(const std::vector<std::string>& words);
// A uid or pid the runner wrote: decimal digits, at most 0x7fffffff. Throws Error naming `what`.
long parse_runner_id(const std::string& text, const char* what);

}  // namespace spendcap
