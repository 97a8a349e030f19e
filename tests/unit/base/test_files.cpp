#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "spendcap/base/files.hpp"
#include "test_support.hpp"

using namespace spendcap;

TEST_CASE(
    "as_effective_user runs the body in place where the filesystem uid is the effective one") {
  pid_t caller = ::getpid();
  pid_t ran_in = 0;
  CHECK(as_effective_user([&] {
    ran_in = ::getpid();
    return true;
  }));
  CHECK(ran_in == caller);
  CHECK_FALSE(as_effective_user([] { return false; }));
  CHECK_FALSE(as_effective_user([]() -> bool { throw 1; }));
}

// The runner's supervisor: another filesystem uid than its effective one. Root can set one here.
TEST_CASE("as_effective_user makes the effective user's file where the filesystem uid differs") {
  if (::geteuid() != 0) SPENDCAP_SKIP("needs root to set another filesystem uid");
  char dir_template[] = "/tmp/spendcap-fsuid-XXXXXX";
  std::string dir = ::mkdtemp(dir_template);
  ::chmod(dir.c_str(), 0777);
  constexpr uid_t kNobody = 65534;
  ::setfsuid(kNobody);
  std::string plain = dir + "/plain", made = dir + "/made";
  ::close(::open(plain.c_str(), O_CREAT | O_WRONLY, 0600));  // the negative control
  bool ok = as_effective_user([&] {
    int fd = ::open(made.c_str(), O_CREAT | O_WRONLY, 0600);
    return fd >= 0 && ::close(fd) == 0;
  });
  ::setfsuid(0);
  CHECK(ok);
  struct stat plain_status {
  }, made_status{};
  REQUIRE(::stat(plain.c_str(), &plain_status) == 0);
  REQUIRE(::stat(made.c_str(), &made_status) == 0);
  CHECK(plain_status.st_uid == kNobody);
  CHECK(made_status.st_uid == 0);
  ::unlink(plain.c_str());
  ::unlink(made.c_str());
  ::rmdir(dir.c_str());
}
