// A ledger on paper for the supervisor's tests: heartbeats answer from a script (the test's
// `grant` function) and are recorded with what they asked; stop orders and would-stop records
// are recorded; the final row is kept. Anything else a running run never calls throws. Called on
// AsyncLedger's worker thread: every field is behind one mutex.
#pragma once

#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "spendcap/ledger/ledger.hpp"

namespace spendcap::testing {

class FakeLedger : public Ledger {
 public:
  struct Beat {
    Money spend, want;
    std::optional<HeartbeatProgress> progress;
  };

  // The answer to a heartbeat: by default every raise is granted in full.
  std::function<Grant(const Beat&, const Grant& held)> grant = [](const Beat& beat,
                                                                  const Grant& held) {
    Grant g = held;
    g.ceiling = std::max(held.ceiling, beat.want);
    g.allowed = g.ceiling;
    return g;
  };
  // Set before the run: what the run holds from admission.
  Grant held;

  std::vector<Beat> beats() {
    std::lock_guard lock(mutex_);
    return beats_;
  }
  std::vector<StopOrder> stop_orders() {
    std::lock_guard lock(mutex_);
    return stop_orders_;
  }
  std::vector<std::string> would_stop() {
    std::lock_guard lock(mutex_);
    return would_stop_;
  }

  std::string url() const override { return "fake:"; }
  Grant heartbeat(const std::string&, Money spend, Money want,
                  const std::optional<HeartbeatProgress>& progress = std::nullopt) override {
    std::lock_guard lock(mutex_);
    beats_.push_back(Beat{spend, want, progress});
    held = grant(beats_.back(), held);
    return held;
  }
  void record_would_stop(const std::string&, const std::string& reason) override {
    std::lock_guard lock(mutex_);
    would_stop_.push_back(reason);
  }
  StopOrder place_stop_order(const Scope& scope, const std::string& reason,
                             const std::string& placed_by) override {
    std::lock_guard lock(mutex_);
    StopOrder order;
    order.scope = scope;
    order.reason = reason;
    order.placed_by = placed_by;
    stop_orders_.push_back(order);
    return order;
  }
  // Kept, as the stores keep it (the tracker id of a final is the run's tag `tracker`).
  bool finish_run(const RunFinal& final) override {
    std::lock_guard lock(mutex_);
    finals_.push_back(final);
    return true;
  }
  std::vector<RunFinal> finals() {
    std::lock_guard lock(mutex_);
    return finals_;
  }
  std::vector<BudgetView> budgets() override { return {}; }

  bool caller_is_owner() override { return none<bool>(); }
  bool is_personal() override { return none<bool>(); }
  void apply_budgets(const std::vector<BudgetRule>&, bool) override { none<void>(); }
  std::vector<BudgetRule> budget_rules() override { return none<std::vector<BudgetRule>>(); }
  Admission begin_run(const RunStart&) override { return none<Admission>(); }
  std::vector<RunView> active_runs() override { return none<std::vector<RunView>>(); }
  std::vector<RunView> overrun_runs(int) override { return none<std::vector<RunView>>(); }
  std::optional<RunView> find_run(const std::string&) override {
    return none<std::optional<RunView>>();
  }
  std::vector<ListedRun> list_runs(const RunQuery&) override {
    return none<std::vector<ListedRun>>();
  }
  std::vector<std::string> run_ids_with_prefix(const std::string&, int) override {
    return none<std::vector<std::string>>();
  }
  int reconcile_lost_runs() override { return none<int>(); }
  std::vector<RunView> lost_runs(int) override { return none<std::vector<RunView>>(); }
  std::vector<LostRun> untold_lost_runs() override { return none<std::vector<LostRun>>(); }
  bool tell_lost_run(const std::string&, const std::vector<OutboxEntry>&) override {
    return none<bool>();
  }
  int clear_stop_orders(const Scope&) override { return none<int>(); }
  std::vector<StopOrder> active_stop_orders() override { return none<std::vector<StopOrder>>(); }
  std::int64_t add_outbox(const OutboxEntry&) override { return none<std::int64_t>(); }
  std::vector<OutboxEntry> outbox(const std::string&) override {
    return none<std::vector<OutboxEntry>>();
  }
  void remove_outbox(std::int64_t) override { none<void>(); }
  void note_outbox_failure(std::int64_t, const std::string&) override { none<void>(); }
  std::vector<std::int64_t> claim_outbox(const std::vector<std::int64_t>&, const std::string&,
                                         Nanos) override {
    return none<std::vector<std::int64_t>>();
  }
  void for_each_run_started(double, double, const std::function<void(const RunRecord&)>&) override {
    none<void>();
  }
  AcceptedResult accept_run(const std::string&, const std::string&, const std::string&) override {
    return none<AcceptedResult>();
  }
  std::vector<AcceptedResult> accepted_results() override {
    return none<std::vector<AcceptedResult>>();
  }
  CommandHistory command_history(const std::string&, double) override {
    return none<CommandHistory>();
  }
  RefusalCount record_refused(const RunStart&, const std::string&) override {
    return none<RefusalCount>();
  }

 private:
  template <class T>
  static T none() {
    throw std::logic_error("a running run does not call this");
  }

  std::mutex mutex_;
  std::vector<Beat> beats_;
  std::vector<RunFinal> finals_;
  std::vector<StopOrder> stop_orders_;
  std::vector<std::string> would_stop_;
};

}  // namespace spendcap::testing
