// A real ledger behind a seam the test holds: every call goes to `inner`, except that a test may
// make the final row fail (the ledger gone at the run's end: the row is spooled instead, issue 38
// item 8). FakeRunHost::ledger_fault hands one to the run it drives.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/ledger.hpp"

namespace spendcap::testing {

class ForwardingLedger final : public Ledger {
 public:
  // `finish_fails`, when set, is thrown as the final row's failure (what the ledger said).
  ForwardingLedger(std::shared_ptr<Ledger> inner, std::function<std::string()> finish_fails)
      : inner_(std::move(inner)), finish_fails_(std::move(finish_fails)) {}

  std::string url() const override { return inner_->url(); }
  bool caller_is_owner() override { return inner_->caller_is_owner(); }
  bool is_personal() override { return inner_->is_personal(); }
  void apply_budgets(const std::vector<BudgetRule>& rules, bool remove_others) override {
    inner_->apply_budgets(rules, remove_others);
  }
  std::vector<BudgetRule> budget_rules() override { return inner_->budget_rules(); }
  std::vector<BudgetView> budgets() override { return inner_->budgets(); }
  Admission begin_run(const RunStart& run) override { return inner_->begin_run(run); }
  Grant heartbeat(const std::string& run_id, Money spend, Money want,
                  const std::optional<HeartbeatProgress>& progress) override {
    return inner_->heartbeat(run_id, spend, want, progress);
  }
  void record_would_stop(const std::string& run_id, const std::string& reason) override {
    inner_->record_would_stop(run_id, reason);
  }
  bool finish_run(const RunFinal& final) override {
    if (finish_fails_) {
      if (std::string why = finish_fails_(); !why.empty()) {
        ++finishes_failed;
        throw Error("ledger " + url(), why);
      }
    }
    return inner_->finish_run(final);
  }
  std::vector<RunView> active_runs() override { return inner_->active_runs(); }
  std::vector<RunView> overrun_runs(int days) override { return inner_->overrun_runs(days); }
  std::optional<RunView> find_run(const std::string& run_id) override {
    return inner_->find_run(run_id);
  }
  std::vector<ListedRun> list_runs(const RunQuery& query) override {
    return inner_->list_runs(query);
  }
  std::vector<std::string> run_ids_with_prefix(const std::string& prefix, int limit) override {
    return inner_->run_ids_with_prefix(prefix, limit);
  }
  int reconcile_lost_runs() override { return inner_->reconcile_lost_runs(); }
  std::vector<RunView> lost_runs(int days) override { return inner_->lost_runs(days); }
  std::vector<LostRun> untold_lost_runs() override { return inner_->untold_lost_runs(); }
  bool tell_lost_run(const std::string& run_id, const std::vector<OutboxEntry>& entries) override {
    return inner_->tell_lost_run(run_id, entries);
  }
  StopOrder place_stop_order(const Scope& scope, const std::string& reason,
                             const std::string& placed_by) override {
    return inner_->place_stop_order(scope, reason, placed_by);
  }
  int clear_stop_orders(const Scope& scope) override { return inner_->clear_stop_orders(scope); }
  std::vector<StopOrder> active_stop_orders() override { return inner_->active_stop_orders(); }
  bool claim_warning(const Scope& scope, Period period, const std::vector<int>& percents,
                     const std::string& run_id) override {
    return inner_->claim_warning(scope, period, percents, run_id);
  }
  std::int64_t add_outbox(const OutboxEntry& entry) override { return inner_->add_outbox(entry); }
  std::vector<OutboxEntry> outbox(const std::string& user) override { return inner_->outbox(user); }
  void remove_outbox(std::int64_t id) override { inner_->remove_outbox(id); }
  void note_outbox_failure(std::int64_t id, const std::string& error) override {
    inner_->note_outbox_failure(id, error);
  }
  std::vector<std::int64_t> claim_outbox(const std::vector<std::int64_t>& ids,
                                         const std::string& claimer, Nanos hold) override {
    return inner_->claim_outbox(ids, claimer, hold);
  }
  void for_each_run_started(double since, double until,
                            const std::function<void(const RunRecord&)>& each) override {
    inner_->for_each_run_started(since, until, each);
  }
  bool read_rollups(const RollupRead& read, const RollupVisitor& visit) override {
    return inner_->read_rollups(read, visit);
  }
  AcceptedResult accept_run(const std::string& run_id, const std::string& note,
                            const std::string& accepted_by) override {
    return inner_->accept_run(run_id, note, accepted_by);
  }
  std::vector<AcceptedResult> accepted_results() override { return inner_->accepted_results(); }
  CommandHistory command_history(const std::string& fingerprint, double window_seconds) override {
    return inner_->command_history(fingerprint, window_seconds);
  }
  RefusalCount record_refused(const RunStart& run, const std::string& reason) override {
    return inner_->record_refused(run, reason);
  }

  std::atomic<int> finishes_failed{0};

 private:
  std::shared_ptr<Ledger> inner_;
  std::function<std::string()> finish_fails_;
};

}  // namespace spendcap::testing
