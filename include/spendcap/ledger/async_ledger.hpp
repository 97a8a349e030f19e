// The supervisor's ledger calls run on one worker thread, so that a slow or locked ledger never
// blocks the event loop (the trip is computed on the supervisor's clock whatever the ledger does).
// Results come back through `post`, which runs them on the event loop's thread. The worker starts
// in the constructor, which the supervisor runs before it lets the guard launch the job: a job
// that takes the user's last process slot (RLIMIT_NPROC counts threads) cannot stop the ledger's
// thread from starting mid-run. Throws std::system_error when the thread cannot start.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "spendcap/base/duration.hpp"
#include "spendcap/ledger/ledger.hpp"

namespace spendcap {

class AsyncLedger {
 public:
  using Post = std::function<void(std::function<void()>)>;

  AsyncLedger(std::shared_ptr<Ledger> ledger, Post post);
  // Waits for the queued calls, unless call_and_wait() timed out and abandoned the worker; either
  // way no result is delivered afterwards.
  ~AsyncLedger();

  // Runs `work` on the worker; then `done(error)` on the event loop ("" when it succeeded).
  void call(std::function<void(Ledger&)> work, std::function<void(const std::string&)> done);

  // Runs `work` on the worker and waits at most `timeout`. Returns "" on success, the error, or a
  // timeout message; after a timeout the worker is abandoned (it may finish later; the caller
  // spools what it could not write, and the ledger's idempotent finish makes a late write
  // harmless).
  std::string call_and_wait(std::function<void(Ledger&)> work, Nanos timeout);

 private:
  struct Shared;

  std::shared_ptr<Shared> shared_;
  std::thread worker_;
};

}  // namespace spendcap
