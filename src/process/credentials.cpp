#include "spendcap/process/credentials.hpp"

#include <grp.h>
#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "spendcap/base/error.hpp"

namespace spendcap {

namespace {

[[noreturn]] void fail(const std::string& install, const std::string& what) {
  throw Error(install, what + ": " + errno_text(errno),
              "check the install (scripts/install-shared-runner.sh)");
}

bool set_capabilities(std::uint64_t permitted, std::uint64_t effective) noexcept {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  data[0].permitted = static_cast<std::uint32_t>(permitted);
  data[1].permitted = static_cast<std::uint32_t>(permitted >> 32);
  data[0].effective = static_cast<std::uint32_t>(effective);
  data[1].effective = static_cast<std::uint32_t>(effective >> 32);
  return ::syscall(SYS_capset, &header, data) == 0;
}

bool get_capabilities(std::uint64_t* permitted, std::uint64_t* effective,
                      std::uint64_t* inheritable) noexcept {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  *permitted = data[0].permitted | (std::uint64_t{data[1].permitted} << 32);
  *effective = data[0].effective | (std::uint64_t{data[1].effective} << 32);
  *inheritable = data[0].inheritable | (std::uint64_t{data[1].inheritable} << 32);
  return true;
}

bool ids_are(uid_t ruid, uid_t euid, uid_t suid, gid_t rgid, gid_t egid, gid_t sgid) noexcept {
  uid_t r = 0, e = 0, s = 0;
  gid_t gr = 0, ge = 0, gs = 0;
  return ::getresuid(&r, &e, &s) == 0 && ::getresgid(&gr, &ge, &gs) == 0 && r == ruid &&
         e == euid && s == suid && gr == rgid && ge == egid && gs == sgid;
}

}  // namespace

// ---- the runner and the guard ----

Identity caller_identity() {
  Identity caller;
  caller.uid = ::getuid();
  caller.gid = ::getgid();
  int count = ::getgroups(0, nullptr);
  if (count > 0) {
    caller.groups.resize(static_cast<size_t>(count));
    count = ::getgroups(count, caller.groups.data());
    caller.groups.resize(count > 0 ? static_cast<size_t>(count) : 0);
  }
  return caller;
}

std::uint64_t effective_capabilities() noexcept {
  std::uint64_t permitted = 0, effective = 0, inheritable = 0;
  if (!get_capabilities(&permitted, &effective, &inheritable)) return ~std::uint64_t{0};
  return effective;
}

bool lower_capabilities(std::uint64_t keep) noexcept {
  if (!set_capabilities(keep, keep)) return false;
  std::uint64_t permitted = 0, effective = 0, inheritable = 0;
  if (!get_capabilities(&permitted, &effective, &inheritable) || permitted != keep ||
      effective != keep || inheritable != 0) {
    errno = EPERM;
    return false;
  }
  return true;
}

std::uint64_t hold_only(const Identity& caller, std::uint64_t keep) {
  const char* what = "privileged runner";
  std::uint64_t permitted = 0, effective = 0, inheritable = 0;
  if (!get_capabilities(&permitted, &effective, &inheritable)) fail(what, "capget");
  keep &= permitted;
  ::setfsgid(caller.gid);
  ::setfsuid(caller.uid);
  std::uint64_t on_files = caller.uid == 0 ? keep : keep & ~kFilesystemCapabilities;
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    fail(what, "clearing the ambient capabilities");
  }
  if (!set_capabilities(keep, on_files)) fail(what, "capset");
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail(what, "PR_SET_DUMPABLE");
  errno = EPERM;
  if (!get_capabilities(&permitted, &effective, &inheritable) || permitted != keep ||
      effective != on_files || inheritable != 0) {
    fail(what, "the capabilities are not as asked after the cut");
  }
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != caller.uid ||
      static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) != caller.gid) {
    fail(what, "the filesystem ids are not the caller's");
  }
  return keep;
}

void set_filesystem_uid(uid_t uid) {
  ::setfsuid(uid);
  errno = EPERM;
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != uid) {
    fail("privileged runner", "cannot take the filesystem uid " + std::to_string(uid));
  }
}

void switch_to_service(const Identity& caller, uid_t service_uid, gid_t service_gid,
                       std::uint64_t keep) {
  const char* what = "privileged runner";
  if (::geteuid() != 0) {
    errno = EPERM;
    fail(what, "the runner is not running as root (is it installed setuid root?)");
  }
  if (service_uid == 0 || service_uid == caller.uid) {
    errno = EINVAL;
    fail(what, "the service user must be neither root nor the caller");
  }
  // KEEPCAPS: the permitted set survives the uid change below; it is cleared again by exec.
  if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) fail(what, "PR_SET_KEEPCAPS");
  if (::setgroups(caller.groups.size(), caller.groups.data()) != 0) fail(what, "setgroups");
  if (::setresgid(caller.gid, service_gid, service_gid) != 0) fail(what, "setresgid");
  if (::setresuid(service_uid, service_uid, service_uid) != 0) fail(what, "setresuid");
  // The filesystem uid needs CAP_SETUID once more, then only `keep` is left.
  std::uint64_t with_setuid = keep | cap_bit(CAP_SETUID);
  if (!set_capabilities(with_setuid, with_setuid)) fail(what, "capset");
  ::setfsuid(caller.uid);
  if (::prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) fail(what, "PR_SET_KEEPCAPS");
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    fail(what, "clearing the ambient capabilities");
  }
  if (!lower_capabilities(keep)) fail(what, "lowering the capabilities");
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail(what, "PR_SET_DUMPABLE");

  // Re-read everything; any difference fails closed.
  errno = EPERM;
  if (!ids_are(service_uid, service_uid, service_uid, caller.gid, service_gid, service_gid)) {
    fail(what, "the ids are not the service user's after the switch");
  }
  if (static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != caller.uid) {
    fail(what, "the filesystem uid is not the caller's");
  }
  if (::getgroups(0, nullptr) != static_cast<int>(caller.groups.size())) {
    fail(what, "the supplementary groups are not the caller's");
  }
  if (!(keep & cap_bit(CAP_SETUID)) && ::setuid(0) == 0) {
    fail(what, "root could be regained after the switch");
  }
}

// ---- the keeper and the supervisor ----

namespace {

constexpr int kHighestCapability = 63;

bool bounding_set_is(std::uint64_t keep) {
  for (int cap = 0; cap <= kHighestCapability; ++cap) {
    int held = ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (held < 0) break;  // past the kernel's last capability
    if ((held == 1) != ((keep & cap_bit(cap)) != 0)) return false;
  }
  return true;
}

}  // namespace

void limit_bounding_set(std::uint64_t keep) {
  const char* what = "privileged runner";
  for (int cap = 0; cap <= kHighestCapability; ++cap) {
    if (cap == CAP_SETPCAP || (keep & cap_bit(cap))) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      fail(what, "dropping capability " + std::to_string(cap) + " from the bounding set");
    }
  }
  if (!(keep & cap_bit(CAP_SETPCAP)) && ::prctl(PR_CAPBSET_DROP, CAP_SETPCAP, 0, 0, 0) != 0) {
    fail(what, "dropping CAP_SETPCAP from the bounding set");
  }
  errno = EPERM;
  if (!bounding_set_is(keep)) fail(what, "the bounding set is not as asked");
}

void reduce_keeper(std::uint64_t keep) {
  const char* what = "privileged runner (keeper)";
  if (::setgroups(0, nullptr) != 0 || ::setresgid(0, 0, 0) != 0) fail(what, "root's groups");
  // The runner's filesystem uid was the caller's: the keeper removes the run's cgroup as root.
  set_filesystem_uid(0);
  limit_bounding_set(keep);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(what, "PR_SET_NO_NEW_PRIVS");
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    fail(what, "clearing the ambient capabilities");
  }
  if (!lower_capabilities(keep)) fail(what, "lowering the capabilities");
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail(what, "PR_SET_DUMPABLE");
  errno = EPERM;
  if (!ids_are(0, 0, 0, 0, 0, 0) || ::getgroups(0, nullptr) != 0) {
    fail(what, "the keeper's uids are not root's");
  }
}

void switch_to_service_for_exec(const Identity& caller, uid_t service_uid, gid_t service_gid,
                                std::uint64_t ambient) {
  const char* what = "privileged runner (supervisor)";
  if (service_uid == 0 || service_uid == caller.uid) {
    errno = EINVAL;
    fail(what, "the service user must be neither root nor the caller");
  }
  limit_bounding_set(ambient);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(what, "PR_SET_NO_NEW_PRIVS");
  if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) fail(what, "PR_SET_KEEPCAPS");
  if (::setgroups(caller.groups.size(), caller.groups.data()) != 0) fail(what, "setgroups");
  if (::setresgid(caller.gid, service_gid, service_gid) != 0) fail(what, "setresgid");
  if (::setresuid(service_uid, service_uid, service_uid) != 0) fail(what, "setresuid");
  if (::prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0) fail(what, "PR_SET_KEEPCAPS");
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int i = 0; i < 2; ++i) {
    auto word = static_cast<std::uint32_t>(ambient >> (32 * i));
    data[i].permitted = data[i].effective = data[i].inheritable = word;
  }
  if (::syscall(SYS_capset, &header, data) != 0) fail(what, "capset");
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) fail(what, "ambient");
  for (int cap = 0; cap <= kHighestCapability; ++cap) {
    if ((ambient & cap_bit(cap)) && ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) {
      fail(what, "raising an ambient capability");
    }
  }
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail(what, "PR_SET_DUMPABLE");
  errno = EPERM;
  std::uint64_t permitted = 0, effective = 0, inheritable = 0;
  if (!ids_are(service_uid, service_uid, service_uid, caller.gid, service_gid, service_gid) ||
      !get_capabilities(&permitted, &effective, &inheritable) || permitted != ambient ||
      effective != ambient || inheritable != ambient ||
      ::getgroups(0, nullptr) != static_cast<int>(caller.groups.size())) {
    fail(what, "the ids or capabilities are not as asked after the switch");
  }
}

bool become_caller(const Identity& caller) noexcept {
  if (::setgroups(caller.groups.size(), caller.groups.data()) != 0) return false;
  if (::setresgid(caller.gid, caller.gid, caller.gid) != 0) return false;
  if (::setresuid(caller.uid, caller.uid, caller.uid) != 0) return false;
  // A change between two non-root uids keeps the capabilities: drop them all explicitly.
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (!set_capabilities(0, 0)) return false;
  std::uint64_t permitted = 0, effective = 0, inheritable = 0;
  if (!get_capabilities(&permitted, &effective, &inheritable) || permitted || effective ||
      !ids_are(caller.uid, caller.uid, caller.uid, caller.gid, caller.gid, caller.gid) ||
      static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) != caller.uid) {
    errno = EPERM;
    return false;
  }
  return true;
}

}  // namespace spendcap
