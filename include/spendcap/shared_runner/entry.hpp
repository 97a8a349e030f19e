// The ordinary spendcap's side of the shared runner (README "Installing a shared runner", "Threat
// model"): main's first step decides which of its roles this process is. The shared runner runs
// the supervisor and the guard of a run under an identity the user does not hold, in a cgroup the
// user cannot write; the job as the user, in its own PID namespace, in a cgroup under the user's.
//
// Three programs (issue 29, item 6; bubblewrap is the model):
//   the front, the ordinary spendcap (/usr/local/bin/spendcap, plain 0755), what users run
//     (shared_runner/front.hpp): for `spendcap run` it starts the runner as its child, hands it
//     its environment in a sealed memfd, relays signals and stops, and exits as the run did; for
//     every other subcommand it execs the runner.
//   spendcap-runner (src/runner/main.cpp), setuid root, small, linking only process/ and base/:
//     its first step takes the caller's filesystem uid and drops every capability its later
//     steps do not need (process/credentials.hpp hold_only), before it reads anything the caller
//     wrote. For the front's run it makes the run's cgroup, forks the keeper (root's ids,
//     CAP_KILL and CAP_DAC_OVERRIDE only) and the supervisor, which forks the guard into the
//     run's namespaces and execs the ordinary spendcap as the service user
//     (`--runner-supervisor`); for any other subcommand it moves out of the caller's cgroup and
//     execs the ordinary spendcap as the service user with CAP_SETUID alone (`--runner-call`).
//   the ordinary spendcap exec'd by the runner (shared_runner/adoption.hpp): the supervisor
//     takes the caller's filesystem uid, keeps CAP_KILL alone, adopts the preforked guard and
//     reads the job's environment from the front's memfd; a runner call takes its last step once
//     main knows the ledger's kind (settle_runner_call).
//
// The setuid-root image links none of this (scripts/check_layering.py, test_runner_binary.py).
#pragma once

#include <optional>

namespace spendcap {

// main's first step. An exit status when this process's part is over (the front after the run),
// nullopt to go on with main: a plain spendcap; the runner's supervisor (argv rewritten to the
// user's); a runner call (argv rewritten likewise); the setgid-only install. Refuses a spendcap
// that is itself setuid root (the older layout put the whole program there).
std::optional<int> enter_shared_runner(int& argc, char**& argv);

}  // namespace spendcap
