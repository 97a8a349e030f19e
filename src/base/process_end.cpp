// Ending the process under an abandoned thread. Contract in process_end.hpp.
#include "spendcap/base/process_end.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>

namespace spendcap {

namespace {
std::atomic<bool> abandoned{false};
}  // namespace

void note_abandoned_thread() {
  abandoned.store(true);
}

bool thread_abandoned() {
  return abandoned.load();
}

int end_of_main(int status) {
  if (!abandoned.load()) return status;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(status);
}

}  // namespace spendcap
