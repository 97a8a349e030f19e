#include <doctest/doctest.h>

#include <unistd.h>

#include "spendcap/gpu/input_hint.hpp"

using namespace spendcap;

TEST_CASE("input hint: none for a busy GPU, else CPU-bound, I/O-bound or neither") {
  InputActivity a;
  a.seconds = 10;
  a.cores = 4;
  CHECK_FALSE(input_hint(0.95, a));
  CHECK_FALSE(input_hint(0.8, a));
  // The CPUs saturated by CPU time, or by runnable processes on a shared machine.
  a.cpu_seconds = 35;
  auto hint = input_hint(0.1, a);
  REQUIRE(hint);
  CHECK(hint->kind == "cpu-bound");
  CHECK(hint->text.find("preprocessing / augmentation") != std::string::npos);
  a.cpu_seconds = 5;
  a.running = 4;
  CHECK(input_hint(0.1, a)->kind == "cpu-bound");
  // Little CPU, processes blocked reading.
  a.running = 0.2;
  a.reading = 1;
  hint = input_hint(0.1, a);
  CHECK(hint->kind == "io-bound");
  CHECK(hint->text.find("disk or network feed") != std::string::npos);
  CHECK(hint->text.find("I/O wait time itself cannot be seen") != std::string::npos);
  // Neither: idle CPUs, no reads.
  a.reading = 0;
  hint = input_hint(0.5, a);
  CHECK(hint->kind == "neither");
  CHECK(hint->text.find("synchronisation or small batches") != std::string::npos);
  // Nothing sampled: no hint.
  CHECK_FALSE(input_hint(0.1, InputActivity{}));
}

TEST_CASE("input watch: counts the CPU time of a busy process of the tree") {
  InputWatch watch;
  std::vector<pid_t> self = {::getpid()};
  watch.sample(0, self);
  volatile double x = 0;
  for (int i = 0; i < 30000000; ++i) x = x + i * 0.5;
  watch.sample(1, self);
  CHECK(watch.activity().seconds == doctest::Approx(1));
  CHECK(watch.activity().cpu_seconds > 0);
  CHECK(watch.activity().running == doctest::Approx(1));  // itself, reading its own stat
}
