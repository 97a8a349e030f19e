// Process credentials: every step where spendcap changes who it is, each a named function that
// re-reads the ids afterwards and fails closed (bubblewrap's acquire_privs / drop_privs /
// switch_to_user_with_privs are the model). Two installs use them:
//
//   the setgid install (run/ledger_group.hpp): the ledger's group is held in the saved gid while
//     the user's files are opened, raised for the ledger's open only, then dropped for good;
//   the privileged runner (process/privileged_run.hpp): the supervisor and the guard become the
//     runner's service user with a few capabilities, the job's child becomes the caller.
//
// Process-wide: call from the main thread while single-threaded (or, for become_caller, in a
// child between fork and exec).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace spendcap {

// ---- the setgid ledger group ----

// The gids spendcap was started with, captured at the first call: the real one and the one the
// binary's setgid bit gave (equal when not installed setgid).
struct StartGroups {
  gid_t real = 0;
  gid_t ledger = 0;
};
const StartGroups& start_groups();

// Effective gid the caller's; the saved gid keeps the ledger's group. Throws Error.
void set_aside_group();
// Effective gid the ledger's group again (for one open). Throws Error.
void raise_group();
// Real, effective and saved gid the caller's, checked, and (for anyone but root) checked that the
// group cannot be regained. Throws Error.
void drop_group_for_good();

// ---- the privileged runner ----

// Who called: the real ids and the supplementary groups, as the caller's shell gave them.
struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};
Identity caller_identity();

// A set of capabilities as a bit mask: cap_bit(CAP_KILL) | ...
constexpr std::uint64_t cap_bit(int capability) {
  return std::uint64_t{1} << capability;
}

// From root (the setuid runner): uids all `service_uid`; gids real = the caller's, effective and
// saved = `service_gid` (the ledger's group, then set aside as with the setgid install);
// supplementary groups the caller's; the filesystem uid the caller's, so that every path the
// user names is opened with the caller's rights and a user can aim no step at a file they could
// not write; permitted and effective capabilities exactly `keep`, none inheritable or ambient;
// not dumpable. Re-reads every id and capability after and throws Error if one is not as asked.
void switch_to_service(const Identity& caller, uid_t service_uid, gid_t service_gid,
                       std::uint64_t keep);

// From root (the setuid runner, for every subcommand but run): the setgid install's ids, so that
// run/ledger_group.hpp works as there: uids all the caller's (no capability left), real gid the
// caller's, effective and saved gid `ledger_gid`; not dumpable. Checked; throws Error.
void reduce_to_setgid(const Identity& caller, gid_t ledger_gid);

// Permitted and effective capabilities lowered to `keep` (a subset of what is held); checked.
// Returns false on failure (errno set). Async-signal-safe.
bool lower_capabilities(std::uint64_t keep) noexcept;

// In the job's child, between fork and exec: supplementary groups, gids and uids all the
// caller's, no capability left (the bounding set stays full and no_new_privs unset, so setuid
// programs such as sudo work in the job as without spendcap), each re-read. Returns false on
// failure (errno set); the caller then _exits. Async-signal-safe: no allocation.
bool become_caller(const Identity& caller) noexcept;

// ---- the split runner (issue 29, item 6) ----

// As root: the bounding set cut to `keep` (every other capability dropped; CAP_SETPCAP is needed
// for that, so it is dropped last). Checked against /proc's view. Throws Error.
void limit_bounding_set(std::uint64_t keep);

// The keeper: its uids and gids root, no supplementary group (no process of the service user or the
// caller may signal it), its permitted and effective capabilities and its bounding set exactly
// `keep`, none inheritable or ambient, no_new_privs, not dumpable. Checked. Throws Error.
void reduce_keeper(std::uint64_t keep);

// From root, before the exec of the unprivileged spendcap as the run's supervisor: the bounding
// set `ambient`, no_new_privs; supplementary groups the caller's, gids real = the caller's,
// effective and saved = `service_gid`, uids all `service_uid`; permitted, effective, inheritable
// and ambient capabilities exactly `ambient` (the exec keeps the ambient ones, nothing else); not
// dumpable. Checked. Throws Error.
void switch_to_service_for_exec(const Identity& caller, uid_t service_uid, gid_t service_gid,
                                std::uint64_t ambient);

// First thing in the exec'd supervisor: the filesystem uid `caller_uid` (the one use of
// CAP_SETUID), then permitted and effective capabilities exactly `keep`, none inheritable or
// ambient; not dumpable. Checked (root cannot be regained). Throws Error.
void settle_supervisor(uid_t caller_uid, std::uint64_t keep);

// The capabilities held now (effective set), as a bit mask.
std::uint64_t effective_capabilities() noexcept;

}  // namespace spendcap
