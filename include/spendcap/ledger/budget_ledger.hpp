// BudgetLedger: the Ledger (ledger.hpp) written once over a LedgerStore (ledger_store.hpp). It owns
// every rule a backend would otherwise copy: admission and its refusal messages, the grant rule
// applied to a run's scopes (decide_grant, grant_rule.hpp), heartbeat and final deltas of the
// usage rows, reconciliation of lost runs, warn mode's would-stop, stop orders, budgets and who
// may change them, and who may stop and accept whose runs (stop_rule.hpp). Each Ledger call is one
// store transaction that reconciles due lost runs first.
//
// Used by one thread at a time, like its store.
#pragma once

#include <memory>

#include "spendcap/ledger/ledger.hpp"
#include "spendcap/ledger/ledger_store.hpp"
#include "spendcap/ledger/stop_rule.hpp"

namespace spendcap {

class BudgetLedger : public Ledger {
 public:
  // `options.ignore_other_runs` is the test-only negative control; `options.budget_caps` lower the
  // budget rows wherever they are read; the clock is the store's.
  BudgetLedger(std::unique_ptr<LedgerStore> store, const LedgerOptions& options);
  BudgetLedger(const BudgetLedger&) = delete;
  BudgetLedger& operator=(const BudgetLedger&) = delete;

  std::string url() const override;
  bool caller_is_owner() override;
  bool is_personal() override;
  void apply_budgets(const std::vector<BudgetRule>& rules, bool remove_others) override;
  std::vector<BudgetRule> budget_rules() override;
  std::vector<BudgetView> budgets() override;
  Admission begin_run(const RunStart& run) override;
  Grant heartbeat(const std::string& run_id, Money spend, Money want,
                  const std::optional<HeartbeatProgress>& progress = std::nullopt) override;
  void record_would_stop(const std::string& run_id, const std::string& reason) override;
  bool finish_run(const RunFinal& final) override;
  std::vector<RunView> active_runs() override;
  std::vector<RunView> overrun_runs(int days) override;
  std::optional<RunView> find_run(const std::string& run_id) override;
  std::vector<ListedRun> list_runs(const RunQuery& query) override;
  std::vector<std::string> run_ids_with_prefix(const std::string& prefix, int limit) override;
  int reconcile_lost_runs() override;
  std::vector<RunView> lost_runs(int days) override;
  std::vector<LostRun> untold_lost_runs() override;
  bool tell_lost_run(const std::string& run_id, const std::vector<OutboxEntry>& entries) override;
  // Stop orders, accepted results and lost runs' events: budget_ledger_access.cpp.
  StopOrder place_stop_order(const Scope& scope, const std::string& reason,
                             const std::string& placed_by) override;
  int clear_stop_orders(const Scope& scope) override;
  std::vector<StopOrder> active_stop_orders() override;
  bool claim_warning(const Scope& scope, Period period, const std::vector<int>& percents,
                     const std::string& run_id) override;
  std::int64_t add_outbox(const OutboxEntry& entry) override;
  std::vector<OutboxEntry> outbox(const std::string& user) override;
  void remove_outbox(std::int64_t id) override;
  void note_outbox_failure(std::int64_t id, const std::string& error) override;
  std::vector<std::int64_t> claim_outbox(const std::vector<std::int64_t>& ids,
                                         const std::string& claimer, Nanos hold) override;
  // Reports (budget_ledger_reports.cpp).
  void for_each_run_started(double since, double until,
                            const std::function<void(const RunRecord&)>& each) override;
  bool read_rollups(const RollupRead& read, const RollupVisitor& visit) override;
  AcceptedResult accept_run(const std::string& run_id, const std::string& note,
                            const std::string& accepted_by) override;
  std::vector<AcceptedResult> accepted_results() override;
  CommandHistory command_history(const std::string& fingerprint, double window_seconds) override;
  RefusalCount record_refused(const RunStart& run, const std::string& reason) override;

 protected:
  LedgerStore& store() { return *store_; }

 private:
  // Runs `body(txn)` in one transaction and returns what it returned (the last attempt's).
  template <class Body>
  auto transact(Access access, Body&& body);
  void reconcile_if_due();
  // The budgets in force in `txn` (rows capped by budget_caps_), for ledger/stop_rule.hpp.
  std::function<std::optional<BudgetRule>(const Scope&)> rules_in(StoreTxn& txn) const;
  // The caller, and whether it owns the ledger (asked of the store outside any transaction).
  Asker asker();
  // begin_run's answer from a store that ran the grant rule in its server.
  Admission admission_from_server(const RunRecord& run, ServerGrant server);

  std::unique_ptr<LedgerStore> store_;
  bool ignore_other_runs_ = false;
  std::vector<BudgetRule> budget_caps_;  // LedgerOptions::budget_caps
  Caller caller_;                        // LedgerOptions::caller, else the calling process
};

}  // namespace spendcap
