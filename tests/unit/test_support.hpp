// Helpers shared by the unit tests: a temporary directory, a scoped environment variable, and the
// visible skip.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <doctest/doctest.h>

namespace spendcap::testing {

// A directory under /tmp, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "spendcap-test", mode_t mode = 0700) {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    const char* made = mkdtemp(pattern.data());
    REQUIRE(made != nullptr);
    path_ = made;
    REQUIRE(chmod(path_.c_str(), mode) == 0);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Says that the running case cannot run here, and why, with the marker that CTest's
// SKIP_REGULAR_EXPRESSION turns into "Skipped" (tests/CMakeLists.txt): doctest 2.4 has no runtime
// skip, and a case that returns early would otherwise be reported passed.
inline void report_skipped(const std::string& why) {
  std::printf("SPENDCAP_SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  MESSAGE("skipped: " << why);
}

}  // namespace spendcap::testing

// Skips the rest of the running case: SPENDCAP_SKIP("no writable cgroup v2 here").
#define SPENDCAP_SKIP(why)                  \
  do {                                      \
    spendcap::testing::report_skipped(why); \
    return;                                 \
  } while (0)
