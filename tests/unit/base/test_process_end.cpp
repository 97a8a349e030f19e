#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "spendcap/base/process_end.hpp"

using namespace spendcap;

namespace {

// A library's state with a finaliser that, like libkrb5's, must not run while a thread is inside
// the library: it aborts then (libkrb5 destroys a mutex the thread holds; the thread's unlock
// then fails its assertion).
std::atomic<bool> inside_library{false};

void library_finaliser() {
  if (inside_library) std::abort();
}

// In a child: a thread enters the "library" and stays (a ledger call that timed out), then the
// process ends as main would, by `end` (exit() or end_of_main's way). Returns the wait status.
int child_status(bool abandon, void (*end)(int)) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::atexit(library_finaliser);
    std::thread([] {
      inside_library = true;
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }).detach();
    while (!inside_library) std::this_thread::yield();
    if (abandon) note_abandoned_thread();
    end(3);
    ::_exit(99);  // not reached
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("a process that abandoned a thread inside a library ends without its finalisers") {
  // The control: exit() under the thread runs the finaliser, which aborts (the fleet's SIGABRT).
  int plain = child_status(true, [](int status) { std::exit(status); });
  CHECK(WIFSIGNALED(plain));
  CHECK(WTERMSIG(plain) == SIGABRT);
  // end_of_main: the status, without the finaliser.
  int ended = child_status(true, [](int status) { std::exit(end_of_main(status)); });
  REQUIRE(WIFEXITED(ended));
  CHECK(WEXITSTATUS(ended) == 3);
  // No thread abandoned: end_of_main hands the status back and exit() runs as usual.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(end_of_main(4) == 4 && !thread_abandoned() ? 0 : 1);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}
