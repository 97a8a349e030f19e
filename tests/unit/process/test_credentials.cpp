// process/credentials: the privileged runner's drops, done for real in a forked child as root
// (the suite runs as root in CI; elsewhere the cases are skipped). Each child reports the first
// check that failed, by name, over a pipe.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>

#include "spendcap/base/error.hpp"
#include "spendcap/process/credentials.hpp"
#include "test_support.hpp"

namespace {

using spendcap::cap_bit;

constexpr uid_t kCaller = 42421;
constexpr gid_t kCallerGroup = 42421;
constexpr gid_t kOtherGroup = 42422;
constexpr uid_t kService = 42431;
constexpr gid_t kServiceGroup = 42431;

spendcap::Identity caller() {
  return spendcap::Identity{kCaller, kCallerGroup, {kCallerGroup, kOtherGroup}};
}

// Runs `body` in a child; "" when every check held, else the first failed check's name.
std::string in_child(const std::function<const char*()>& body) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    const char* failed = "an exception";
    try {
      failed = body();
    } catch (const spendcap::Error& error) {
      failed = "threw";
    }
    if (failed) [[maybe_unused]]
      ssize_t n = ::write(pipe_fds[1], failed, std::strlen(failed));
    ::_exit(failed ? 1 : 0);
  }
  ::close(pipe_fds[1]);
  std::string report;
  char buffer[256];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0) report.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (report.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) report = "died";
  return report;
}

bool ids(uid_t ruid, uid_t euid, uid_t suid, gid_t rgid, gid_t egid, gid_t sgid) {
  uid_t r, e, s;
  gid_t gr, ge, gs;
  ::getresuid(&r, &e, &s);
  ::getresgid(&gr, &ge, &gs);
  return r == ruid && e == euid && s == suid && gr == rgid && ge == egid && gs == sgid;
}

const bool not_root = ::geteuid() != 0;

}  // namespace

TEST_CASE("the supervisor's drop: service uids, the caller's files and groups, CAP_KILL only") {
  if (not_root) SPENDCAP_SKIP("needs root: the drops setresuid to other users");
  CHECK(in_child([]() -> const char* {
          spendcap::switch_to_service(caller(), kService, kServiceGroup, cap_bit(CAP_KILL));
          if (!ids(kService, kService, kService, kCallerGroup, kServiceGroup, kServiceGroup)) {
            return "ids";
          }
          if (static_cast<uid_t>(::setfsuid(-1)) != kCaller) return "filesystem uid";
          gid_t groups[8];
          if (::getgroups(8, groups) != 2 || groups[0] != kCallerGroup) return "groups";
          if (spendcap::effective_capabilities() != cap_bit(CAP_KILL)) return "capabilities";
          if (::prctl(PR_GET_DUMPABLE) != 0) return "dumpable";
          if (::setuid(0) == 0 || ::setresuid(kCaller, kCaller, kCaller) == 0) return "regained";
          if (::setegid(kServiceGroup) != 0 || ::setegid(kCallerGroup) != 0) {
            return "the ledger group cannot be set aside and raised";
          }
          return nullptr;
        }) == "");
}

TEST_CASE("the job's child: the caller's ids, no capability, full bounding set") {
  if (not_root) SPENDCAP_SKIP("needs root: the drops setresuid to other users");
  CHECK(in_child([]() -> const char* {
          int bounding_before = ::prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN);
          spendcap::switch_to_service(
              caller(), kService, kServiceGroup,
              cap_bit(CAP_KILL) | cap_bit(CAP_SETUID) | cap_bit(CAP_SETGID));
          if (!spendcap::become_caller(caller())) return "become_caller";
          if (!ids(kCaller, kCaller, kCaller, kCallerGroup, kCallerGroup, kCallerGroup)) {
            return "ids";
          }
          if (spendcap::effective_capabilities() != 0) return "capabilities";
          if (::prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN) != bounding_before) return "bounding set";
          if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 0) return "no_new_privs";
          if (::setuid(kService) == 0) return "regained the service user";
          return nullptr;
        }) == "");
}

TEST_CASE("the guard keeps CAP_KILL after the launch, nothing more") {
  if (not_root) SPENDCAP_SKIP("needs root: the drops setresuid to other users");
  CHECK(in_child([]() -> const char* {
          spendcap::switch_to_service(
              caller(), kService, kServiceGroup,
              cap_bit(CAP_KILL) | cap_bit(CAP_SETUID) | cap_bit(CAP_SETGID));
          if (!spendcap::lower_capabilities(cap_bit(CAP_KILL))) return "lower";
          if (::setresuid(kCaller, kCaller, kCaller) == 0) return "CAP_SETUID left";
          return nullptr;
        }) == "");
}

TEST_CASE("the drop refuses root or the caller as the service user") {
  if (not_root) SPENDCAP_SKIP("needs root: the drops setresuid to other users");
  CHECK(in_child([]() -> const char* {
          spendcap::switch_to_service(caller(), kCaller, kServiceGroup, cap_bit(CAP_KILL));
          return "took the caller as the service user";
        }) == "threw");
  CHECK(in_child([]() -> const char* {
          spendcap::switch_to_service(caller(), 0, kServiceGroup, cap_bit(CAP_KILL));
          return "took root as the service user";
        }) == "threw");
}

TEST_CASE("the runner's first step: the caller's filesystem ids, only the capabilities kept") {
  if (not_root) SPENDCAP_SKIP("needs root: the cut starts from root's capabilities");
  // A file of the service user's that only CAP_DAC_OVERRIDE (or its owner) may read.
  std::string path = "/tmp/spendcap-hold-only-" + std::to_string(::getpid());
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  REQUIRE(::chown(path.c_str(), kService, kServiceGroup) == 0);
  CHECK(in_child([&path]() -> const char* {
          int bounding_before = ::prctl(PR_CAPBSET_READ, CAP_SYS_MODULE);
          std::uint64_t keep = cap_bit(CAP_SETUID) | cap_bit(CAP_KILL) | cap_bit(CAP_DAC_OVERRIDE);
          if (spendcap::hold_only(caller(), keep) != keep) return "permitted";
          if (spendcap::effective_capabilities() != (keep & ~spendcap::kFilesystemCapabilities)) {
            return "effective";
          }
          if (static_cast<uid_t>(::setfsuid(-1)) != kCaller) return "filesystem uid";
          if (static_cast<gid_t>(::setfsgid(-1)) != kCallerGroup) return "filesystem gid";
          if (!ids(0, 0, 0, 0, 0, 0)) return "the uids and gids are root's no more";
          if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_KILL, 0, 0) != 0) return "ambient";
          if (::prctl(PR_CAPBSET_READ, CAP_SYS_MODULE) != bounding_before) return "bounding set";
          if (::open(path.c_str(), O_RDONLY | O_CLOEXEC) >= 0) return "read as root on files";
          // A root-on-files step: the kernel puts CAP_DAC_OVERRIDE back while the fsuid is 0.
          spendcap::set_filesystem_uid(0);
          int opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
          if (opened < 0) return "not read with the filesystem uid 0";
          ::close(opened);
          spendcap::set_filesystem_uid(kCaller);
          if (::open(path.c_str(), O_RDONLY | O_CLOEXEC) >= 0) return "read after the step";
          // Cut again with less: CAP_DAC_OVERRIDE is then gone for the root-on-files steps too.
          spendcap::hold_only(caller(), cap_bit(CAP_KILL));
          spendcap::set_filesystem_uid(0);
          if (spendcap::effective_capabilities() != cap_bit(CAP_KILL)) return "second cut";
          if (::setuid(kService) == 0) return "CAP_SETUID left";
          return nullptr;
        }) == "");
  ::unlink(path.c_str());
}
