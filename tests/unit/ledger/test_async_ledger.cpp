// AsyncLedger: ledger calls off the event loop, with a bounded wait for the final row.
#include <doctest/doctest.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/async_ledger.hpp"
#include "spendcap/ledger/backends.hpp"
#include "test_support.hpp"

using namespace spendcap;

namespace {

// Stands in for the event loop: results are queued here and run by the test's thread.
struct FakeLoop {
  std::mutex mutex;
  std::deque<std::function<void()>> posted;
  AsyncLedger::Post post() {
    return [this](std::function<void()> done) {
      std::lock_guard lock(mutex);
      posted.push_back(std::move(done));
    };
  }
  // Runs what was posted; waits (bounded) until `count` results have come.
  bool run(size_t count) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard lock(mutex);
        if (posted.size() >= count) {
          for (auto& done : posted) done();
          posted.clear();
          return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
};

}  // namespace

TEST_CASE("AsyncLedger runs calls on its worker and delivers results through the loop") {
  testing::TempDir dir;
  FakeLoop loop;
  std::thread::id caller = std::this_thread::get_id(), worker;
  std::string error_seen = "not delivered";
  {
    AsyncLedger async(open_ledger("sqlite:" + dir.file("l.db")), loop.post());
    async.call(
        [&](Ledger& ledger) {
          worker = std::this_thread::get_id();
          ledger.budgets();
        },
        [&](const std::string& error) { error_seen = error; });
    REQUIRE(loop.run(1));
    CHECK(error_seen.empty());
    CHECK(worker != caller);
    // A failing call reports its error instead of throwing on the loop.
    async.call([](Ledger&) { throw Error("ledger x", "locked for more than 10s"); },
               [&](const std::string& error) { error_seen = error; });
    REQUIRE(loop.run(1));
    CHECK(error_seen == "ledger x: locked for more than 10s");
    CHECK(async.call_and_wait([](Ledger& ledger) { ledger.active_runs(); },
                              std::chrono::seconds(5)) == "");
  }
}

TEST_CASE("AsyncLedger gives up waiting on a stuck ledger, and never delivers afterwards") {
  testing::TempDir dir;
  FakeLoop loop;
  std::atomic<bool> release{false}, finished{false};
  std::shared_ptr<Ledger> ledger = open_ledger("sqlite:" + dir.file("l.db"));
  std::weak_ptr<Ledger> worker_done = ledger;  // expires when the worker has let go of everything
  {
    AsyncLedger async(std::move(ledger), loop.post());
    // A heartbeat stuck in the ledger, then the final row that must not wait for it forever.
    async.call(
        [&](Ledger&) {
          while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          finished = true;
        },
        [](const std::string&) { FAIL("delivered after the AsyncLedger was gone"); });
    std::string outcome = async.call_and_wait([](Ledger&) {}, std::chrono::milliseconds(100));
    CHECK(outcome == "the ledger did not answer within 100ms");
    // A second wait that times out (the metrics' team budgets, then the final row) reports the
    // same, and does not throw: the worker was abandoned once already (issue 38).
    std::string again = async.call_and_wait([](Ledger&) {}, std::chrono::milliseconds(100));
    CHECK(again == "the ledger did not answer within 100ms");
  }
  release = true;  // the abandoned worker finishes now, with nowhere to deliver
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!worker_done.expired() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(finished);
  CHECK(worker_done.expired());
  std::lock_guard lock(loop.mutex);
  CHECK(loop.posted.empty());
}
