// Secrets held by the runner (issue 19): a webhook's url_file and secret_file (and the PostgreSQL
// ledger's password_file) name files that only the runner's identity reads, e.g. root:spendcap
// 0640 on the setgid install, so that users of a locked policy need no secret in their
// environment and cannot read one. The file is opened once, at the point it is needed and before
// anything of the user's run starts; its content stays in spendcap's memory (a setgid process is
// not dumpable: the user cannot read it through /proc) and never reaches a message, the ledger
// (which names the file: "file:/etc/spendcap/hook.url"), argv or the job's environment.
#pragma once

#include <optional>
#include <string>

#include "spendcap/policy/policy.hpp"

namespace spendcap {

// The content of the file at `path` (an absolute path), without its trailing line breaks and
// spaces. `runner_held`: the locked policy names it, so it is opened with the runner's group
// (on the setgid install the group is set aside, run/ledger_group.hpp: it is raised for the
// open(2) alone); otherwise it is opened with the caller's own credentials, so that a user can aim
// no privileged read at a file. Refuses (Error, 125, naming `what` and the path, never the
// content) a missing or empty file, one that is not a regular file, one larger than 64 KiB, and
// one that everyone may read (a secret readable by all is not one).
std::string read_secret_file(const std::string& path, bool runner_held, const std::string& what);

// The PostgreSQL ledger's password from the policy's ledger_password_file ("" when it names none),
// runner-held when the locked policy names that same file. Call before the ledger is opened.
std::string ledger_password(const Policy& policy, const std::optional<Policy>& locked);

}  // namespace spendcap
