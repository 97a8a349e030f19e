// The run's link to the ledger as a part of the run (run_part.hpp): a heartbeat every `sync` that
// reports the spend and asks for a raise when the ceiling runs short; the grant it holds (ceiling,
// allowed, the binding scope); warnings as the run's shared scopes cross their thresholds; the
// stop order on a multi-node run, placed when this node trips; and the few other writes of a
// running run (would-stop in warn mode, the final row). Every ledger call runs on AsyncLedger's
// worker thread and answers on the event loop: the loop, and so the kill path, never waits on it.
// What a grant means for the trip (the trip timer, the guard's deadline, a stop order) is the
// supervisor's, told through Hooks. Called from the event loop only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/notify/notifier.hpp"
#include "spendcap/spend/trip.hpp"
#include "spendcap/supervise/guard_part.hpp"
#include "spendcap/supervise/metrics_part.hpp"
#include "spendcap/supervise/run_part.hpp"
#include "spendcap/supervise/run_terms.hpp"

namespace spendcap {

class AsyncLedger;
class Meter;
class Reporter;

struct HeartbeatPlan {
  Grant grant;  // the first grant, from admission
  Nanos sync = std::chrono::seconds(5);
  Nanos claim_horizon = std::chrono::minutes(5);
  // A multi-node run (--run-id): the id its nodes share (their job key) and this node's name.
  // Any trip of this node (budget, guard, spot notice, signal) places a stop order on job:ID, and
  // the other nodes take it at their next heartbeat: the run stops as one.
  std::string multi_node_run_id, node;
};

class HeartbeatPart final : public RunPart {
 public:
  struct Hooks {
    std::function<bool()> warning;              // the run neither tripped nor shuts down: it warns
    std::function<bool()> tripped;              // it tripped: it asks for no more than it holds
    std::function<void()> ceiling_moved;        // a grant was applied
    std::function<void(const Grant&)> granted;  // ... and its warnings said
    // The progress channel's last line, metric and expected end so far (none: nothing yet):
    // sent with the next heartbeat when it changed, so that `show` and `ps` of a running run have
    // them (the time left as of that heartbeat: LiveProgress::at).
    std::function<std::optional<LiveProgress>()> progress;
  };

  // `ledger` null: no heartbeats; the run holds the first grant.
  HeartbeatPart(boost::asio::io_context& io, const Reporter& reporter, const Meter& meter,
                const RunTerms& terms, const HeartbeatPlan& plan, Money reserve,
                std::shared_ptr<Ledger> ledger, Notifier& notifier, Hooks hooks);
  ~HeartbeatPart() override;

  void on_launched(TimePoint) override { arm(); }
  void on_finish() override;

  Money ceiling() const { return ceiling_; }
  Money allowed() const { return allowed_; }
  const std::optional<Scope>& binding() const { return binding_; }
  bool fair_share() const { return fair_share_; }

  // After a stop (job control), the grant is stale: ask at once rather than a sync later.
  void heartbeat_now();
  // This node tripped: the run's other nodes are told through a stop order on the run. Returns the
  // run's first trip for the outcome ("node-a (budget:run)"); "" for a single-node run or a stop
  // order (it reached every node already).
  std::string tell_other_nodes(const Trip& trip);
  // The node named by a stop order another node of the run placed ("node-a (runaway:stall)"),
  // else "".
  std::string first_trip_of(const StopOrder& order) const;
  // Warn mode: the ledger records that `reason` would have stopped the run.
  void record_would_stop(const std::string& reason);
  // The run's team budgets for the metrics summary: a bounded wait on the ledger's worker. Their
  // `spent` leaves out this run's spend as last reported (the caller adds its final spend).
  std::vector<TeamBudget> team_budgets(const std::string& team);
  // The team's budgets among a grant's scopes (a heartbeat's answer, the admission's), for the
  // metrics' team gauges; empty when the team has none.
  static std::vector<TeamBudget> team_usage(const Grant& grant, const std::string& team);
  // Writes the final row, waiting at most `timeout`. "" when written, else why not. The outbox
  // entries `outbox_delivered` (delivered by this run, still in the outbox) are removed first.
  std::string record_final(const RunFinal& final, Nanos timeout,
                           const std::vector<std::int64_t>& outbox_delivered = {});

 private:
  void arm();
  void heartbeat();
  void on_heartbeat(const std::string& error, const Grant& grant);
  void apply(const Grant& grant);
  // Sends `event` when the ledger says this run is the first to cross `crossed` of `use`.
  void announce(const ScopeUse& use, const std::vector<double>& crossed, RunEvent event);

  boost::asio::steady_timer timer_;
  const Reporter& reporter_;
  const Meter& meter_;
  const RunTerms& terms_;
  const HeartbeatPlan& plan_;
  Money reserve_;
  std::unique_ptr<AsyncLedger> ledger_;
  Notifier& notifier_;
  Hooks hooks_;
  Money ceiling_, allowed_;
  std::optional<Scope> binding_;
  bool fair_share_ = false;
  bool in_flight_ = false;
  bool failing_ = false;
  bool finished_ = false;
  std::map<std::string, ThresholdTracker> scope_thresholds_;
  std::optional<LiveProgress> progress_sent_;  // what the ledger has of it
  // The spend of the last heartbeat the ledger took, set on the worker (so a later call there
  // reads it after any heartbeat before it); shared: a late worker may outlive the part.
  std::shared_ptr<std::atomic<std::int64_t>> reported_micros_ =
      std::make_shared<std::atomic<std::int64_t>>(0);
};

}  // namespace spendcap
