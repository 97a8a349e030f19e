// The setgid install (DESIGN.md "Ledger", whom a ledger trusts; scripts/install-shared-runner.sh):
// spendcap is installed setgid `spendcap`, the ledger directory is root:spendcap 2770, and users
// are not in the group. Only spendcap's code can then write the shared ledger, and it holds the
// group only while it opens it:
//
//   set_aside_ledger_group()   first thing in main: the effective gid becomes the caller's (the
//                              saved gid keeps spendcap's), so every file the user names (--policy,
//                              ./spendcap.json, the run directory, the status file, the spool) is
//                              read and written as the user;
//   open_ledger_as_installed() raises the group for the open only, then drops it for good (real,
//                              effective and saved gid the caller's; checked), before anything of
//                              the user's runs. The ledger's open descriptors (SQLite's, O_CLOEXEC)
//                              keep the access they were opened with; nothing else does.
//
// While setgid, nothing the user controls may redirect spendcap: refuse_redirecting_environment()
// refuses the test and redirect variables, and a locked /etc/spendcap/policy.json must name the
// ledger (a --ledger other than its ledger is refused by the policy layering).
//
// The syscalls themselves (setegid, setresgid, each checked) are ledger_group.cpp's own. Under the
// privileged runner (shared_runner/entry.hpp) the supervisor and a runner call start with the same
// gids (real the caller's, effective and saved the ledger's), so everything here works there
// unchanged.
// Process-wide credentials: call from the main thread before any thread is started.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "spendcap/base/environment.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

// First in main, in a process of the shared runner: a runner call's last step
// (shared_runner/adoption.hpp settle_runner_call, by the locked policy's ledger kind), and the
// runner's spool in place of the user's (ledger/spool.hpp use_runner_spool) wherever the process
// stays the runner's. A no-op elsewhere. Throws Error.
void settle_runner_process();

// `body` with the ledger's group raised, in a process of the runner that keeps it set aside (the
// runner's spool is root:GROUP 2770); `body` alone elsewhere.
void with_ledger_group(const std::function<void()>& body);

// Whether spendcap was started setgid (effective gid other than the real one at start).
bool installed_setgid();

// See above. A no-op when not setgid.
void set_aside_ledger_group();

// While setgid: throws Error (125) for SPENDCAP_TEST_SWITCHES and every other variable that would
// redirect spendcap (SPENDCAP_SPOOL_DIR, SPENDCAP_NVML_LIBRARY, SPENDCAP_TEST_*).
void refuse_redirecting_environment(const Environment& env);

// While setgid: throws Error unless a locked system policy is in force (`locked_source` empty).
void require_locked_policy_when_setgid(bool locked, const std::string& ledger_url);

// The PostgreSQL ledger's password for this process (notify/runner_files.hpp ledger_password), or
// "" for libpq's own sources (PGPASSWORD, ~/.pgpass, the service file). The locked policy's
// ledger_password_file is the password of the runner's service user's role, so on a privileged
// runner install (/etc/spendcap/runner.json) only the processes that connect as that role read it:
// the supervisor, and a runner call that stays the service user's. A user's own commands (ps,
// stop, budgets, report: the caller's process, logging in as the caller's role) and root's get ""
// (issue 38, item 1: they sent the service password for their own role). Elsewhere (a personal
// ledger, the setgid install) as ledger_password. Call before the ledger is opened.
std::string ledger_password_as_installed(const Policy& policy, const std::optional<Policy>& locked);

// open_ledger(url, options); while setgid, with the group raised for the open and dropped for good
// after it. The shared ledger must exist (the install creates it, owned by root) and must not be
// the caller's own file.
std::unique_ptr<Ledger> open_ledger_as_installed(const std::string& url, LedgerOptions options);

}  // namespace spendcap
