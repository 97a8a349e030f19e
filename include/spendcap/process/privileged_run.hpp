// The shared runner's privileged mode (README "Installing a shared runner", "Threat model"): the
// supervisor and the guard of a run under an identity the user does not hold, in a cgroup the
// user cannot write; the job as the user, in its own PID namespace, in a cgroup under the user's.
//
// Two installed copies of one binary. The front (/usr/local/bin/spendcap, plain 0755) is what
// users run; when the root-owned /etc/spendcap/runner.json names the runner (the same binary,
// setuid root) and a service user, the front of `spendcap run` starts the runner as its child and
// stays the shell's child (terminal, session, job control, inherited fds): it passes its own
// environment in a sealed memfd (a setuid exec puts glibc in secure mode, which strips
// LD_LIBRARY_PATH, TMPDIR and more; the job must get the environment the user had), relays
// SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to it (the terminal's reach the run's processes
// directly: they share the front's process group) over a control pipe, mirrors a stop of the
// run (Ctrl-Z) and exits as the run did. Every other subcommand the front execs the runner for,
// which becomes the setgid install's process (caller's uid, the ledger's group set aside:
// run/ledger_group.hpp).
//
// The runner of a run, root, in order, before reading anything of the user's but its
// environment memfd:
//   1. its own environment cleared; the caller's ids and groups read; the config re-read;
//   2. the run's cgroup made under the caller's (root-owned, so the job cannot leave or freeze
//      it; Slurm's and CI's limits still hold it), its cgroup.procs and cgroup.kill opened;
//      itself moved to <cgroup2>/spendcap-runner (root-owned, outside every user's cgroup: a
//      freeze of the user's own cgroup does not stop enforcement);
//   3. the keeper (this process, root, tiny) forks the supervisor and only relays the front's
//      control pipe as signals to it (EOF, the front died: SIGHUP), mirrors its stops, removes
//      the run's cgroup when it has exited, and exits as it did;
//   4. the supervisor forks the guard into a new PID and mount namespace (tree_guard.hpp,
//      prefork_guard), then becomes the service user keeping CAP_KILL only, the ledger's group
//      in its saved gid, the caller's groups and filesystem uid (every user-named path is
//      opened with the caller's rights), and runs `spendcap run` as usual with the caller's
//      environment (its own environ that environment, less the variables that would steer its
//      network code: proxies, CA files, key logs, PG*).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "spendcap/process/cgroup.hpp"

namespace spendcap {

inline constexpr const char* kRunnerConfigPath = "/etc/spendcap/runner.json";

// /etc/spendcap/runner.json: {"runner": "/usr/local/lib/spendcap/spendcap-runner",
// "user": "spendcap"}. nullopt when the file does not exist; Error when it exists but is not
// root's alone (owner root, no group or other write, nor on its directory) or is malformed.
struct RunnerConfig {
  std::string runner;
  std::string user;
};
std::optional<RunnerConfig> read_runner_config();

// main's first step. An exit status when this process's part is over (the front after the run,
// the keeper), nullopt to go on with main: a plain spendcap; the runner's supervisor (argv
// rewritten to the user's); the runner for another subcommand, reduced to the setgid ids.
std::optional<int> enter_shared_runner(int& argc, char**& argv);

// In the runner's supervisor: what the runner set up for the run, else nullptr.
struct RunnerRun {
  std::map<std::string, std::string> environment;  // the front's, as the job gets it
  Cgroup cgroup{""};                               // the run's cgroup, its kill fd open
  std::string service_user;
};
const RunnerRun* runner_run();

}  // namespace spendcap
