// How the supervisor talks to its guard (process/tree_guard.hpp), and nothing more: the guard's
// reports come in as events, the supervisor's orders (the watchdog's tick, the kill deadline) go
// out, and both sides read one clock. The guard process itself is behind it too: its pid (the
// tree's root), the last-resort SIGKILL, and its reaping at the end. The real link is the guard's
// two pipes on the event loop (guard_link(handle)); unit tests drive the supervisor through a fake
// (tests/unit/fakes/fake_guard_link.hpp), as ninja's FakeCommandRunner drives its builder.
// Called from the event loop only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "spendcap/base/duration.hpp"
#include "spendcap/process/tree_guard.hpp"

namespace boost::asio {
class io_context;
}

namespace spendcap {

class GuardLink {
 public:
  virtual ~GuardLink() = default;

  // The monotonic clock the guard stamps its events with.
  virtual TimePoint now() const = 0;
  // The guard's host pid: the root of the tree.
  virtual pid_t pid() const = 0;
  // The guard is the init of its own PID namespace: killing it kills the whole tree.
  virtual bool isolated() const = 0;

  // From now on each report reaches `on_event`, on `io`'s loop; when the guard's pipe ends or
  // fails (the guard died, or exited after its last report), `on_lost` is called once.
  virtual void listen(boost::asio::io_context& io, std::function<void(const GuardEvent&)> on_event,
                      std::function<void()> on_lost) = 0;
  // An order to the guard (GuardOrderKind): never blocks; a guard gone ignores it.
  virtual void order(GuardOrderKind kind, std::int64_t value) = 0;

  // The last resort: SIGKILL the guard (an isolated guard takes its PID namespace with it).
  virtual void kill() = 0;
  // Whether the guard has exited and is not yet reaped; `wait`: block until it has.
  virtual bool exited(bool wait) = 0;
  // Reaps the guard, which exits right after reporting the tree empty (blocks until it has).
  virtual void reap() = 0;
};

// The real link over the guard's pipes; it owns (and closes) both fds of `guard`.
std::unique_ptr<GuardLink> guard_link(const GuardHandle& guard);

}  // namespace spendcap
