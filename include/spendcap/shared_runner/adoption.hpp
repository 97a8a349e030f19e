// The ordinary spendcap as the shared runner exec'd it (shared_runner/entry.hpp has the
// protocol): what this process takes over from the runner, and its own last drops.
//
//   the supervisor (`spendcap --runner-supervisor ... run ...`, runner_channel.hpp): the service
//     user, no_new_privs, a bounding set of CAP_KILL and CAP_SETUID, those two ambient. It sets
//     its filesystem uid to the caller's (every user-named path is opened with the caller's
//     rights) and keeps CAP_KILL alone, adopts the preforked guard (process/tree_guard.hpp),
//     reads the job's environment from the front's sealed memfd, and runs `spendcap run` as
//     usual. Its own environment is the caller's less what would steer its network code.
//   a runner call (`spendcap --runner-call CALLER_UID SUBCOMMAND ...`, issue 29 item 1): the
//     service user with CAP_SETUID alone, until settle_runner_call.
//
// Each refuses a process the runner did not make (ids and capabilities checked): anyone else who
// calls spendcap so runs as themselves, and is refused. Process-wide, main thread only.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>

#include "spendcap/process/cgroup.hpp"

namespace spendcap {

// argv[1] is kSupervisorFlag / kCallFlag: take over, and rewrite argc/argv to the user's. nullopt
// to go on with main. Throws Error.
std::optional<int> become_supervisor(int& argc, char**& argv);
std::optional<int> become_runner_call(int& argc, char**& argv);

// In the runner's supervisor: what the runner set up for the run, else nullptr.
struct RunnerRun {
  std::map<std::string, std::string> environment;  // the front's, as the job gets it
  Cgroup cgroup{""};                               // the run's cgroup, its kill fd open
  std::string service_user;
  std::string spool;  // runner.json's spool: the runner's own, root:GROUP 2770
};
const RunnerRun* runner_run();

// In a runner call: the service user's process, CAP_SETUID held until settle_runner_call; else
// nullptr.
struct RunnerCall {
  uid_t caller_uid = 0;
  uid_t service_uid = 0;
  gid_t service_gid = 0;
  std::string spool;
  bool settled = false;
};
const RunnerCall* runner_call();

// The runner's spool directory in a process of the runner (its supervisor or a runner call).
std::optional<std::string> runner_spool();

// The runner call's last step, before anything the caller names is read. A SQLite ledger: stays
// the service user's process (the caller can neither signal, trace, limit nor stop it: no ledger
// lock is ever held by a process of the caller's), with the caller's filesystem uid and no
// capability. `as_the_caller` (a PostgreSQL ledger, whose server checks each connection's own
// role): the caller's uids, the ledger's group kept as the setgid install's. Throws Error.
void settle_runner_call(bool as_the_caller);

}  // namespace spendcap
