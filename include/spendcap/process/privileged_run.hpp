// The shared runner's privileged mode (README "Installing a shared runner", "Threat model"): the
// supervisor and the guard of a run under an identity the user does not hold, in a cgroup the
// user cannot write; the job as the user, in its own PID namespace, in a cgroup under the user's.
//
// Three programs (issue 29, item 6; bubblewrap is the model):
//   the front, the ordinary spendcap (/usr/local/bin/spendcap, plain 0755), what users run. When
//     the root-owned /etc/spendcap/runner.json names the runner and a service user, the front of
//     `spendcap run` starts the runner as its child and stays the shell's child (terminal,
//     session, job control, inherited fds): it passes its own environment in a sealed memfd (a
//     setuid exec puts glibc in secure mode, which strips LD_LIBRARY_PATH, TMPDIR and more; the
//     job must get the environment the user had), relays SIGINT, SIGTERM, SIGHUP and SIGQUIT sent
//     to it (the terminal's reach the run's processes directly: they share the front's process
//     group) over a control pipe, mirrors a stop of the run (Ctrl-Z) and exits as the run did.
//     Every other subcommand the front execs the runner for.
//   spendcap-runner (src/runner/main.cpp), setuid root, small: for the front's run it resets the
//     process it inherited (process_state.hpp), makes the run's cgroup, forks the keeper (root's
//     ids, CAP_KILL and CAP_DAC_OVERRIDE only) and the supervisor, which forks the guard into the
//     run's namespaces and execs the ordinary spendcap as the service user (below); for any other
//     subcommand it takes the setgid install's ids (caller's uids, the ledger's group as the
//     effective gid: run/ledger_group.hpp) and execs the ordinary spendcap.
//   the supervisor, the ordinary spendcap exec'd by the runner as `spendcap --runner-supervisor
//     ... run ...` (runner_channel.hpp): the service user, no_new_privs, a bounding set of CAP_KILL
//     and CAP_SETUID, those two ambient; enter_shared_runner sets its filesystem uid to the
//     caller's (every user-named path is opened with the caller's rights) and keeps CAP_KILL
//     alone, adopts the preforked guard, reads the job's environment from the front's memfd, and
//     runs `spendcap run` as usual. Its own environment is the caller's less the variables that
//     would steer its network code (proxies, CA files, key logs, PG*).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "spendcap/process/cgroup.hpp"
#include "spendcap/process/runner_channel.hpp"

namespace spendcap {

// main's first step. An exit status when this process's part is over (the front after the run),
// nullopt to go on with main: a plain spendcap; the runner's supervisor (argv rewritten to the
// user's); the runner's exec for another subcommand, with the setgid install's ids. Refuses a
// spendcap that is itself setuid root (the older layout put the whole program there).
std::optional<int> enter_shared_runner(int& argc, char**& argv);

// In the runner's supervisor: what the runner set up for the run, else nullptr.
struct RunnerRun {
  std::map<std::string, std::string> environment;  // the front's, as the job gets it
  Cgroup cgroup{""};                               // the run's cgroup, its kill fd open
  std::string service_user;
  std::string spool;  // runner.json's spool: the runner's own, root:GROUP 2770
};
const RunnerRun* runner_run();

// In the runner's exec for any other subcommand (`--runner-call`, issue 29 item 1): the service
// user's process, CAP_SETUID held until settle_runner_call; else nullptr.
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
