#include "spendcap/ledger/async_ledger.hpp"

#include <future>

#include "spendcap/base/error.hpp"
#include "spendcap/base/process_end.hpp"

namespace spendcap {

// Shared with the worker, which may outlive the AsyncLedger once abandoned.
struct AsyncLedger::Shared {
  std::shared_ptr<Ledger> ledger;
  Post post;  // cleared (under mutex) when the AsyncLedger goes: the event loop may be gone too
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> queue;
  bool stopping = false;

  void deliver(std::function<void()> done) {
    std::lock_guard lock(mutex);
    if (post) post(std::move(done));
  }
};

AsyncLedger::AsyncLedger(std::shared_ptr<Ledger> ledger, Post post)
    : shared_(std::make_shared<Shared>()) {
  shared_->ledger = std::move(ledger);
  shared_->post = std::move(post);
  worker_ = std::thread([shared = shared_] {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock lock(shared->mutex);
        shared->wake.wait(lock, [&] { return shared->stopping || !shared->queue.empty(); });
        if (shared->queue.empty()) return;
        job = std::move(shared->queue.front());
        shared->queue.pop_front();
      }
      job();
    }
  });
}

AsyncLedger::~AsyncLedger() {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stopping = true;
  }
  shared_->wake.notify_all();
  if (worker_.joinable()) worker_.join();
  // An abandoned worker may finish later: it must not post to an event loop that is gone.
  std::lock_guard lock(shared_->mutex);
  shared_->post = nullptr;
}

namespace {
std::string run_catching(const std::function<void(Ledger&)>& work, Ledger& ledger) {
  try {
    work(ledger);
    return "";
  } catch (const Error& error) {
    return format_error(error);
  } catch (const std::exception& error) {
    return error.what();
  }
}
}  // namespace

void AsyncLedger::call(std::function<void(Ledger&)> work,
                       std::function<void(const std::string&)> done) {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->queue.push_back([shared = shared_, work = std::move(work), done = std::move(done)] {
      std::string error = run_catching(work, *shared->ledger);
      shared->deliver([done, error] { done(error); });
    });
  }
  shared_->wake.notify_one();
}

std::string AsyncLedger::call_and_wait(std::function<void(Ledger&)> work, Nanos timeout) {
  auto result = std::make_shared<std::promise<std::string>>();
  std::future<std::string> future = result->get_future();
  {
    std::lock_guard lock(shared_->mutex);
    shared_->queue.push_back([shared = shared_, work = std::move(work), result] {
      result->set_value(run_catching(work, *shared->ledger));
    });
  }
  shared_->wake.notify_one();
  if (future.wait_for(timeout) == std::future_status::ready) return future.get();
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stopping = true;
  }
  // Stuck in the ledger: let the process exit without it, and without the libraries' finalisers
  // (base/process_end.hpp). A second call that times out finds it abandoned already: the team
  // budgets' read for the metrics, then the final row (a second detach threw EINVAL, issue 38).
  if (worker_.joinable()) {
    worker_.detach();
    note_abandoned_thread();
  }
  return "the ledger did not answer within " + format_duration(timeout);
}

}  // namespace spendcap
