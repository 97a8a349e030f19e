// The guard on paper, for driving the supervisor (supervise/guard_link.hpp): the test emits the
// guard's reports on the supervisor's own loop and reads back the orders it was given, the
// last-resort kills and the reaping. A script given to `on_listen` runs when the supervisor starts
// listening; `when` runs a step once a condition holds, polling with a bound. Its clock is the
// test's FakeClock when given one (the FakeRunHost's), else the real monotonic clock; either way
// the supervisor's timers are Asio steady_timers on the real clock: tests keep their budgets in
// milliseconds.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "fakes/fake_clock.hpp"
#include "spendcap/supervise/guard_link.hpp"

namespace spendcap::testing {

class FakeGuardLink : public GuardLink {
 public:
  // No process has this pid (pid_max is at most 2^22): the reaper never mistakes a child for it.
  static constexpr pid_t kPid = 0x7ffffff0;
  static constexpr pid_t kMainPid = 2;

  FakeGuardLink() = default;
  explicit FakeGuardLink(const FakeClock* clock) : clock_(clock) {}

  TimePoint now() const override { return clock_ ? clock_->now() : spendcap::now(); }
  pid_t pid() const override { return kPid; }
  bool isolated() const override { return isolated_; }
  void listen(boost::asio::io_context& io, std::function<void(const GuardEvent&)> on_event,
              std::function<void()> on_lost) override {
    io_ = &io;
    on_event_ = std::move(on_event);
    on_lost_ = std::move(on_lost);
    if (on_listen) boost::asio::post(io, [this] { on_listen(*this); });
  }
  void order(GuardOrderKind kind, std::int64_t value) override {
    orders.push_back(GuardOrder{kind, 0, value});
  }
  void kill() override { ++kills; }
  bool exited(bool) override { return true; }
  void reap() override { ++reaps; }

  // ---- the test's side ----

  void emit(GuardEventKind kind, int value = 0, bool tree_empty = false) {
    on_event_(GuardEvent{kind, kMainPid, value, tree_empty ? 1 : 0, to_ns(now())});
  }
  void launch() { emit(GuardEventKind::launched); }
  // The main process exited with `code`; `tree_empty`: nothing else was left, and the guard
  // reports the tree empty next, as the real one does.
  void exit(int code, bool tree_empty) {
    emit(GuardEventKind::main_exited, code << 8, tree_empty);
    if (tree_empty) empty();
  }
  void empty() { emit(GuardEventKind::tree_empty); }
  // The guard's pipe ended: it died.
  void lose() { on_lost_(); }

  // Runs `then` on the loop once `done()` holds, checking every millisecond. Past `bound` the
  // test fails and the tree is reported empty, so the run ends.
  void when(std::function<bool()> done, std::function<void()> then,
            Nanos bound = std::chrono::seconds(5)) {
    poll(std::make_shared<boost::asio::steady_timer>(*io_), spendcap::now() + bound,
         std::move(done), std::move(then));
  }

  int count(GuardOrderKind kind) const {
    int n = 0;
    for (const GuardOrder& o : orders) n += o.kind == kind;
    return n;
  }

  std::function<void(FakeGuardLink&)> on_listen;
  std::vector<GuardOrder> orders;
  int kills = 0;
  int reaps = 0;
  bool isolated_ = false;

 private:
  void poll(std::shared_ptr<boost::asio::steady_timer> timer, TimePoint give_up,
            std::function<bool()> done, std::function<void()> then) {
    if (done()) {
      then();
      return;
    }
    if (spendcap::now() > give_up) {
      FAIL_CHECK("the awaited condition did not come within its bound");
      empty();
      return;
    }
    timer->expires_after(std::chrono::milliseconds(1));
    timer->async_wait(
        [this, timer, give_up, done = std::move(done), then = std::move(then)](auto error) mutable {
          if (!error) poll(timer, give_up, std::move(done), std::move(then));
        });
  }

  const FakeClock* clock_ = nullptr;
  boost::asio::io_context* io_ = nullptr;
  std::function<void(const GuardEvent&)> on_event_;
  std::function<void()> on_lost_;
};

}  // namespace spendcap::testing
