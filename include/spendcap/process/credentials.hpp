// Process credentials: every step where the setuid runner (src/runner/main.cpp) and the guard it
// forks change who they are, each a named function that re-reads the ids afterwards and fails
// closed (bubblewrap's acquire_privs / drop_privs / switch_to_user_with_privs are the model):
//
//   hold_only                    the runner's first step: the caller's filesystem ids, only the
//                                capabilities its later steps need;
//   reduce_keeper                the keeper: root's ids, CAP_KILL and CAP_DAC_OVERRIDE;
//   switch_to_service_for_exec   the supervisor, before its exec: the service user, ambient
//                                capabilities;
//   switch_to_service            the guard: the service user, a few capabilities kept;
//   become_caller                the job's child: the caller, no capability.
//
// What the ordinary spendcap does with what the runner handed it (the supervisor's and a runner
// call's last drops, the setgid install's ledger group) is shared_runner/'s, which the runner does
// not link.
//
// Process-wide: call from the main thread while single-threaded (or, for become_caller, in a
// child between fork and exec).
#pragma once

#include <linux/capability.h>
#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace spendcap {

// ---- the runner and the guard ----

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

// The capabilities the kernel takes out of the effective set when the filesystem uid leaves 0, and
// puts back from the permitted set when it returns to 0 (capabilities(7), "Effect of user ID
// changes on capabilities").
inline constexpr std::uint64_t kFilesystemCapabilities =
    cap_bit(CAP_CHOWN) | cap_bit(CAP_DAC_OVERRIDE) | cap_bit(CAP_DAC_READ_SEARCH) |
    cap_bit(CAP_FOWNER) | cap_bit(CAP_FSETID) | cap_bit(CAP_LINUX_IMMUTABLE) |
    cap_bit(CAP_MAC_OVERRIDE) | cap_bit(CAP_MKNOD);

// The setuid runner's first step, its uids all root's (bubblewrap's acquire_privs): the filesystem
// uid and gid the caller's, so that every path a later step opens is opened with the caller's
// rights (the supplementary groups are the caller's already); the permitted set `keep`, less what
// this process does not hold (a container's root may lack CAP_SYS_RESOURCE); the effective set
// the same less kFilesystemCapabilities, which come back only while a step takes the filesystem
// uid 0 (set_filesystem_uid); none inheritable or ambient; not dumpable. Called again with less,
// it lowers the sets further. Returns the permitted set. Checked. Throws Error.
//
// The bounding set is left whole on purpose: the guard is forked from this process and the job
// from the guard, and the job keeps the caller's full bounding set (sudo in a job works as without
// spendcap). The runner execs nothing but the supervisor, and that exec cuts it
// (switch_to_service_for_exec).
std::uint64_t hold_only(const Identity& caller, std::uint64_t keep);

// The filesystem uid `uid`, checked. With the real, effective and saved uid root's this needs no
// capability (setfsuid(2) allows any of the process's own uids), so taking 0 back for a step that
// makes root's files is the runner's own rule, not the kernel's. Throws Error.
void set_filesystem_uid(uid_t uid);

// From root (the setuid runner): uids all `service_uid`; gids real = the caller's, effective and
// saved = `service_gid` (the ledger's group, then set aside as with the setgid install);
// supplementary groups the caller's; the filesystem uid the caller's, so that every path the
// user names is opened with the caller's rights and a user can aim no step at a file they could
// not write; permitted and effective capabilities exactly `keep`, none inheritable or ambient;
// not dumpable. Re-reads every id and capability after and throws Error if one is not as asked.
void switch_to_service(const Identity& caller, uid_t service_uid, gid_t service_gid,
                       std::uint64_t keep);

// Permitted and effective capabilities lowered to `keep` (a subset of what is held); checked.
// Returns false on failure (errno set). Async-signal-safe.
bool lower_capabilities(std::uint64_t keep) noexcept;

// In the job's child, between fork and exec: supplementary groups, gids and uids all the
// caller's, no capability left (the bounding set stays full and no_new_privs unset, so setuid
// programs such as sudo work in the job as without spendcap), each re-read. Returns false on
// failure (errno set); the caller then _exits. Async-signal-safe: no allocation.
bool become_caller(const Identity& caller) noexcept;

// ---- the keeper and the supervisor (the runner's fork) ----

// As root: the bounding set cut to `keep` (every other capability dropped; CAP_SETPCAP is needed
// for that, so it is dropped last). Checked against /proc's view. Throws Error.
void limit_bounding_set(std::uint64_t keep);

// The keeper: its uids and gids root (the filesystem uid too), no supplementary group (no process
// of the service user or the caller may signal it), its permitted and effective capabilities and
// its bounding set exactly `keep`, none inheritable or ambient, no_new_privs, not dumpable.
// Checked. Throws Error.
void reduce_keeper(std::uint64_t keep);

// From root, before the exec of the unprivileged spendcap as the run's supervisor: the bounding
// set `ambient`, no_new_privs; supplementary groups the caller's, gids real = the caller's,
// effective and saved = `service_gid`, uids all `service_uid`; permitted, effective, inheritable
// and ambient capabilities exactly `ambient` (the exec keeps the ambient ones, nothing else); not
// dumpable. Checked. Throws Error.
void switch_to_service_for_exec(const Identity& caller, uid_t service_uid, gid_t service_gid,
                                std::uint64_t ambient);

// The capabilities held now (effective set), as a bit mask.
std::uint64_t effective_capabilities() noexcept;

}  // namespace spendcap
