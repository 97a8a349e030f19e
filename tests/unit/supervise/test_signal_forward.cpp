// Which signals --forward accepts: catchable requests, never what spendcap acts on itself.
#include <doctest/doctest.h>

#include <signal.h>

#include "spendcap/base/error.hpp"
#include "spendcap/supervise/signal_forward.hpp"

using namespace spendcap;

TEST_CASE("--forward: signals a job may catch are accepted by name, short name or number") {
  CHECK(forwardable_signal_or_throw("SIGWINCH") == SIGWINCH);
  CHECK(forwardable_signal_or_throw("PWR") == SIGPWR);
  CHECK(forwardable_signal_or_throw("SIGUSR1") == SIGUSR1);
}

TEST_CASE("--forward: stop signals, job control, uncatchable signals and faults are refused") {
  for (const char* name : {"SIGTERM", "INT", "SIGHUP", "SIGQUIT", "SIGKILL", "SIGSTOP", "SIGTSTP",
                           "SIGCONT", "SIGCHLD", "SIGSEGV"}) {
    CAPTURE(name);
    CHECK_THROWS_AS(forwardable_signal_or_throw(name), Error);
  }
  CHECK_THROWS_AS(forwardable_signal_or_throw("SIGNOPE"), Error);
}
