// The /proc layer and the launcher on real processes.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "spendcap/base/error.hpp"
#include "spendcap/process/cgroup.hpp"
#include "spendcap/process/launcher.hpp"
#include "spendcap/process/process_tree.hpp"
#include "test_support.hpp"

using namespace spendcap;

namespace {

// Polls with a bound; never a fixed sleep.
template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds bound = std::chrono::seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return predicate();
}

// A child that runs `body` and then pauses until killed.
template <typename Body>
pid_t fork_child(Body body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    body();
    while (true) ::pause();
  }
  return pid;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// Reads exactly `count` bytes (the children's "ready" bytes may arrive one write at a time).
bool read_exactly(int fd, char* buffer, size_t count) {
  size_t got = 0;
  while (got < count) {
    ssize_t n = ::read(fd, buffer + got, count - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// Kills, at the end of a test case whatever happened in it, every process the case forked: a
// child left alive would hold the test runner's stdout open and CTest would wait for it forever.
struct Forked {
  std::vector<pid_t> pids;
  ~Forked() {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    for (pid_t pid : pids) ::waitpid(pid, nullptr, WNOHANG);
  }
};

// A cgroup of the test's own, or nullopt and `why` where no cgroup v2 hierarchy is writable (the
// case then skips, visibly).
std::optional<Cgroup> test_cgroup(const std::string& prefix, std::string& why) {
  auto cgroup = Cgroup::create(prefix + std::to_string(::getpid()), &why);
  if (!cgroup) why = "no writable cgroup v2 here (" + why + "): the cgroup path is not tested";
  return cgroup;
}

}  // namespace

TEST_CASE("read_proc_stat parses this process, and a zombie is not alive") {
  auto self = read_proc_stat(::getpid());
  REQUIRE(self);
  CHECK(self->ppid == ::getppid());
  CHECK(self->start_time > 0);
  CHECK(self->alive());

  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  CHECK(eventually([&] { return read_proc_stat(child) && read_proc_stat(child)->state == 'Z'; }));
  CHECK_FALSE(is_alive(child));  // a zombie, not yet reaped
  ::waitpid(child, nullptr, 0);
  CHECK_FALSE(read_proc_stat(child).has_value());
}

TEST_CASE("live_descendants finds children and grandchildren, not zombies") {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = fork_child([&] {
    fork_child([&] { (void)!::write(ready[1], "g", 1); });
    (void)!::write(ready[1], "c", 1);
  });
  Forked forked{{child}};
  char buffer[2];
  REQUIRE(read_exactly(ready[0], buffer, 2));
  auto found = live_descendants(::getpid());
  std::vector<pid_t> pids;
  for (const auto& member : found) pids.push_back(member.pid);
  CHECK(std::find(pids.begin(), pids.end(), child) != pids.end());
  CHECK(found.size() >= 2);
  pid_t grandchild = 0;
  for (const auto& member : found) {
    if (member.ppid == child) grandchild = member.pid;
  }
  CHECK(grandchild > 0);
  forked.pids.push_back(grandchild);
  ::kill(grandchild, SIGKILL);
  kill_and_reap(child);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("catches_signal reads SigCgt: a handler counts, SIG_IGN and default do not") {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t catcher = fork_child([&] {
    ::signal(SIGTERM, SIG_DFL);  // doctest's crash handlers were inherited
    ::signal(SIGUSR1, [](int) {});
    ::signal(SIGUSR2, SIG_IGN);
    (void)!::write(ready[1], "x", 1);
  });
  Forked forked{{catcher}};
  char byte;
  REQUIRE(read_exactly(ready[0], &byte, 1));
  CHECK(catches_signal(catcher, SIGUSR1));
  CHECK_FALSE(catches_signal(catcher, SIGUSR2));
  CHECK_FALSE(catches_signal(catcher, SIGTERM));
  kill_and_reap(catcher);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("signal_process refuses a pid whose process is gone (no pid-reuse race)") {
  pid_t child = fork_child([] {});
  auto stat = read_proc_stat(child);
  REQUIRE(stat);
  CHECK(signal_process(*stat, 0));  // still the same process
  kill_and_reap(child);
  CHECK_FALSE(signal_process(*stat, SIGTERM));  // reaped: never signalled
  // Same pid, another start time: treated as another process.
  ProcStat impostor = *read_proc_stat(::getpid());
  impostor.start_time += 1;
  CHECK_FALSE(signal_process(impostor, 0));
}

TEST_CASE("LiveProcessTree signals only catchers, then everything, then kills") {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  // A root that stands in for the guard, with a catcher and a plain child under it.
  pid_t root = fork_child([&] {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    fork_child([&] {
      ::signal(SIGUSR1, [](int) {});
      (void)!::write(ready[1], "c", 1);
    });
    fork_child([&] { (void)!::write(ready[1], "p", 1); });
  });
  Forked forked{{root}};
  char buffer[2];
  REQUIRE(read_exactly(ready[0], buffer, 2));
  LiveProcessTree tree(root, nullptr);
  for (const auto& member : tree.members()) forked.pids.push_back(member.pid);
  CHECK(tree.members().size() == 2);
  CHECK(tree.signal_catchers(SIGUSR1) == 1);
  CHECK(tree.signal_all(0) == 2);
  CHECK(tree.kill_all() == 2);
  CHECK(eventually([&] { return tree.members().empty(); }));
  kill_and_reap(root);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("the run's cgroup holds a double-forked daemon, and cgroup.kill ends it") {
  std::string why;
  auto cgroup = test_cgroup("spendcap-unit-", why);
  if (!cgroup) SPENDCAP_SKIP(why);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  std::string procs = cgroup->procs_file();
  pid_t child = ::fork();
  if (child == 0) {
    FILE* f = std::fopen(procs.c_str(), "w");
    std::fputs("0", f);
    std::fclose(f);
    if (::fork() == 0) {  // double fork: the daemon leaves its parent and session
      ::setsid();
      (void)!::write(ready[1], "d", 1);
      while (true) ::pause();
    }
    ::_exit(0);
  }
  ::waitpid(child, nullptr, 0);
  char byte;
  REQUIRE(read_exactly(ready[0], &byte, 1));
  LiveProcessTree tree(::getpid(), &*cgroup);
  auto members = tree.members();
  Forked forked;
  for (const auto& member : members) forked.pids.push_back(member.pid);
  REQUIRE(members.size() == 1);  // the daemon, found although it is nobody's descendant here
  pid_t daemon = members[0].pid;
  CHECK(tree.kill_all() == 1);
  CHECK(eventually([&] { return !is_alive(daemon); }));
  CHECK(eventually([&] { return cgroup->procs().empty(); }));
  cgroup->remove();
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("the run's cgroup counts processes in its child cgroups as members") {
  std::string why;
  auto cgroup = test_cgroup("spendcap-unit-nested-", why);
  if (!cgroup) SPENDCAP_SKIP(why);
  std::string inner = cgroup->path() + "/inner";
  REQUIRE(::mkdir(inner.c_str(), 0755) == 0);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = fork_child([&] {
    FILE* f = std::fopen((inner + "/cgroup.procs").c_str(), "w");
    std::fputs("0", f);
    std::fclose(f);
    (void)!::write(ready[1], "x", 1);
  });
  Forked forked{{child}};
  char byte;
  REQUIRE(read_exactly(ready[0], &byte, 1));
  auto procs = cgroup->procs();
  CHECK(std::find(procs.begin(), procs.end(), child) != procs.end());
  LiveProcessTree tree(::getpid(), &*cgroup);
  CHECK(tree.members().size() == 1);
  CHECK(tree.kill_all() == 1);  // cgroup.kill reaches child cgroups too
  CHECK(eventually([&] { return !is_alive(child); }));
  ::waitpid(child, nullptr, 0);
  ::rmdir(inner.c_str());
  cgroup->remove();
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("resolve_executable searches PATH like execvp and reports 126/127") {
  CHECK(resolve_executable("sh", "/nonexistent:/bin:/usr/bin").find("/sh") != std::string::npos);
  CHECK(resolve_executable("/bin/sh", "") == "/bin/sh");
  try {
    resolve_executable("no-such-command-xyz", "/bin:/usr/bin");
    FAIL("no error");
  } catch (const Error& error) {
    CHECK(error.code() == ExitCode::not_found);
  }
  std::string plain = "/tmp/spendcap-unit-plain-" + std::to_string(::getpid());
  FILE* file = std::fopen(plain.c_str(), "w");
  std::fclose(file);
  ::chmod(plain.c_str(), 0644);
  try {
    resolve_executable(plain, "");
    FAIL("no error");
  } catch (const Error& error) {
    CHECK(error.code() == ExitCode::not_executable);
  }
  ::unlink(plain.c_str());
  try {
    resolve_executable("/tmp", "");
    FAIL("no error");
  } catch (const Error& error) {
    CHECK(error.code() == ExitCode::not_executable);
  }
}
