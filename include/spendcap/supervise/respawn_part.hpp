// The respawn-loop guard's detectors, as a part of the run (run_part.hpp); the decision is
// guards/respawn_loop.hpp's.
//
// exact: the netlink process connector, where permitted (root, in the initial PID namespace, so
//   that its pids are the ones /proc shows; self-tested at start with a PR_SET_NAME comm event).
//   It sees every fork, exec and exit with its status, so short-lived processes are seen (a
//   process gone before its exec event is read cannot be named, and is missed). Events are host
//   pids, also when the tree lives in its own PID namespace: /proc here is the host's. A process
//   is the tree's when its parent chain reaches the guard. After ENOBUFS (the kernel dropped
//   events) the names of processes that are gone are dropped; counting goes on.
// fallback: a walk of the tree's own children each interval (no scan of all /proc). Exit statuses
//   cannot be seen, so it only warns: a new pid of the same program and parent after one that
//   lived less than the minimum life.
// The start line says which detector is in use. Called from the event loop only.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>

#include <boost/asio/io_context.hpp>

#include "spendcap/base/duration.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/run_terms.hpp"

namespace spendcap {

class Reporter;
class RunPart;

struct RespawnPlan {
  int max_restarts = 10;
  Nanos window = std::chrono::minutes(5);
  Nanos min_life = std::chrono::seconds(10);  // the fallback's "too short to be healthy"
  bool connector_allowed = true;              // false: the fallback (a test switch)
};

std::unique_ptr<RunPart> make_respawn_part(boost::asio::io_context& io, const Reporter& reporter,
                                           const RunTerms& terms, const RespawnPlan& plan,
                                           pid_t root, std::function<void(const Trip&)> trip);

}  // namespace spendcap
