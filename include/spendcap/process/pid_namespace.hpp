// A fork whose child is the init (pid 1) of a new PID namespace, with a private mount namespace and
// a fresh /proc, so that getpid() and /proc/PID agree inside. As root it takes CLONE_NEWPID |
// CLONE_NEWNS; without CAP_SYS_ADMIN it adds CLONE_NEWUSER with a user namespace that maps only the
// caller's own uid and gid (setgroups denied), written by the parent before the child goes on.
// The child ends non-dumpable (no ptrace from the tree it will start).
//
// What changes for the processes started in it (the job):
//   - pids: its own are namespace-local (the guard is 1); /proc shows only the tree; the PPid chain
//     ends at the guard; spendcap and every process outside cannot be named or signalled;
//   - mounts: the same mounts, made private (mounts the job makes do not propagate out, and the
//     host's later mounts do not propagate in); /proc is the namespace's own;
//   - with a user namespace: the same uid and gid, but files and processes of other users show as
//     the overflow ids (nobody / nogroup), supplementary groups show as nogroup (access checks
//     still use them), setgroups() is refused, and setuid/setgid programs (sudo) do not gain
//     privileges.
//   Files, network, devices and GPUs, the environment, the cgroup and limits are unchanged.
// Must be called while the caller is single-threaded (it forks like fork()).
#pragma once

#include <sys/types.h>

#include <string>

namespace spendcap {

// Returns 0 in the child (already inside its namespaces, /proc mounted), the child's host pid in
// the parent, or -1 with *why_not set when the kernel allows no PID namespace here (no child is
// left behind then).
pid_t fork_into_pid_namespace(std::string* why_not);

// In the child (the guard): its own /proc/self/io and its thread's, opened before it stops being
// dumpable (then its /proc files are root's, mode 0400, and even it cannot open them; an open file
// still reads). -1 where not opened (no namespace, or the open failed). Close-on-exec.
extern int guard_own_io_fd;
extern int guard_thread_io_fd;

}  // namespace spendcap
