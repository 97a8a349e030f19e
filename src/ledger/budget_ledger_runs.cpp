// BudgetLedger: the runs read back (views, lists, prefixes), lost runs (reconciling them, telling
// them) and stop orders. Contract in ledger.hpp and budget_ledger.hpp.
#include "budget_ledger_parts.hpp"

#include <algorithm>
#include <set>

#include "spendcap/base/error.hpp"

namespace spendcap {

using budget_ledger_parts::reconcile;
using budget_ledger_parts::view_of;

namespace budget_ledger_parts {
// Adds the deltas to the run's usage rows (nothing to do for a zero delta).
void add_usage(StoreTxn& txn, const RunRecord& run, const Usage& delta) {
  if (delta.spent == Money{} && delta.held == Money{} && delta.live == Money{}) return;
  txn.add_usage(named_scopes(run), run.day, delta);
}

RunView view_of(const RunRecord& r, double now) {
  RunView view;
  static_cast<RunIdentity&>(view) = r;  // the identity whole (run_identity.hpp)
  view.pid = r.pid;
  view.mode = r.mode;
  view.status = r.status;
  if (r.status == RunStatus::running && is_stale(r.heartbeat_at, r.sync, now)) {
    view.status = RunStatus::lost;
  }
  view.reconciled = r.reconciled;
  view.overrun = r.overrun;
  view.uid = r.uid;
  view.reported_spend = r.reported_spend;
  view.reason = r.reason;
  view.exit_code = r.exit_code;
  view.spendcap_exit_code = r.spendcap_exit_code;
  view.spend = r.spend;
  view.ceiling = r.ceiling;
  view.rate_per_hour = r.rate_per_hour;
  view.pricing = r.pricing;
  view.budget = r.budget;
  view.started_at = r.started_at;
  view.heartbeat_at = r.heartbeat_at;
  view.finished_at = r.finished_at;
  view.would_stop_at = r.would_stop_at;
  view.would_stop_reason = r.would_stop_reason;
  view.gpu = r.gpu;
  view.fingerprint = r.fingerprint;
  view.cwd = r.cwd;
  view.run_budget = r.run_budget;
  view.budget_source = r.budget_source;
  view.metric_name = r.metric_name;
  view.metric_value = r.metric_value;
  view.last_progress = r.last_progress;
  view.checkpoint = r.checkpoint;
  view.progress_eta_at = r.progress_eta_at;
  return view;
}

// ---- lost runs ----

// Charges every lost run that is due its ceiling; returns how many.
int reconcile(StoreTxn& txn, double now) {
  std::vector<RunRecord> due = txn.runs_due(now);
  std::erase_if(due,
                [&](const RunRecord& run) { return !is_stale(run.heartbeat_at, run.sync, now); });
  if (due.empty()) return 0;
  std::set<Scope> scopes;
  for (const RunRecord& run : due) {
    for (const Scope& scope : named_scopes(run)) scopes.insert(scope);
  }
  txn.lock_scopes(std::vector<Scope>(scopes.begin(), scopes.end()));
  int reconciled = 0;
  for (const RunRecord& listed : due) {
    // Read again under the scopes' locks. The list was read before them: on PostgreSQL (read
    // committed) a final row written meanwhile (a spooled row replayed, a late finish) would be
    // overwritten by the stale copy, the run charged its ceiling again and its real spend lost
    // (issue 33, found by the fleet test). Whoever writes a run's spend takes these locks first.
    std::optional<RunRecord> fresh = txn.find_run(listed.id);
    if (!fresh || fresh->status != RunStatus::running || fresh->reconcile_at > now ||
        !is_stale(fresh->heartbeat_at, fresh->sync, now)) {
      continue;
    }
    RunRecord& run = *fresh;
    ++reconciled;
    Money live = run.spend;
    run.status = RunStatus::lost;
    run.reconciled = true;
    run.reason = "lost: no heartbeat";
    run.spend = run.ceiling;
    // finished_at: when it could last have been spending, not when someone noticed.
    run.finished_at = run.reconcile_at;
    txn.update_run(run);
    add_usage(txn, run, {run.ceiling, Money{} - run.ceiling, Money{} - live});
  }
  return reconciled;
}

}  // namespace budget_ledger_parts

std::vector<RunView> BudgetLedger::active_runs() {
  reconcile_if_due();
  return transact(Access::read, [](StoreTxn& txn) {
    double now = txn.now();
    std::vector<RunView> views;
    for (const RunRecord& run : txn.unfinished_runs()) views.push_back(view_of(run, now));
    return views;
  });
}

std::vector<RunView> BudgetLedger::overrun_runs(int days) {
  reconcile_if_due();
  return transact(Access::read, [&](StoreTxn& txn) {
    double now = txn.now();
    std::vector<RunView> views;
    for (const RunRecord& run : txn.overrun_runs(utc_day(now) - days + 1)) {
      views.push_back(view_of(run, now));
    }
    return views;
  });
}

std::optional<RunView> BudgetLedger::find_run(const std::string& run_id) {
  reconcile_if_due();
  return transact(Access::read, [&](StoreTxn& txn) -> std::optional<RunView> {
    auto run = txn.find_run(run_id);
    if (!run) return std::nullopt;
    return view_of(*run, txn.now());
  });
}

std::vector<RunView> BudgetLedger::lost_runs(int days) {
  reconcile_if_due();
  return transact(Access::read, [&](StoreTxn& txn) {
    double now = txn.now();
    std::vector<RunView> views;
    for (const RunRecord& run : txn.reconciled_runs(utc_day(now) - days + 1)) {
      views.push_back(view_of(run, now));
    }
    return views;
  });
}

std::vector<LostRun> BudgetLedger::untold_lost_runs() {
  reconcile_if_due();
  return transact(Access::read, [](StoreTxn& txn) {
    double now = txn.now();
    std::vector<LostRun> lost;
    for (auto& [run, hooks] : txn.untold_lost_runs()) lost.push_back({view_of(run, now), hooks});
    return lost;
  });
}

bool BudgetLedger::tell_lost_run(const std::string& run_id,
                                 const std::vector<OutboxEntry>& entries) {
  return transact(Access::write, [&](StoreTxn& txn) {
    double now = txn.now();
    std::vector<OutboxEntry> stored = entries;
    for (OutboxEntry& entry : stored) entry.created_at = now;
    return txn.claim_lost_run(run_id, now, stored);
  });
}

std::vector<ListedRun> BudgetLedger::list_runs(const RunQuery& query) {
  reconcile_if_due();
  return transact(Access::read, [&](StoreTxn& txn) {
    // `lost` is not stored: it is a running row whose heartbeat is stale (view_of).
    RunQuery stored = query;
    if (query.status == RunStatus::lost) stored.status = RunStatus::running;
    std::vector<ListedRun> listed;
    double now = txn.now();
    for (const RunRecord& record : txn.list_runs(stored)) {
      RunView view = view_of(record, now);
      if (query.status && view.status != *query.status) continue;
      auto [below, above] = txn.neighbour_run_ids(record.id);
      std::size_t common = 0;
      for (const std::string& other : {below, above}) {
        std::size_t n = 0;
        while (n < other.size() && n < record.id.size() && other[n] == record.id[n]) ++n;
        common = std::max(common, n);
      }
      listed.push_back(
          {std::move(view), std::min(record.id.size(), std::max(kShortRunIdChars, common + 1))});
    }
    return listed;
  });
}

std::vector<std::string> BudgetLedger::run_ids_with_prefix(const std::string& prefix, int limit) {
  return transact(Access::read,
                  [&](StoreTxn& txn) { return txn.run_ids_with_prefix(prefix, limit); });
}

int BudgetLedger::reconcile_lost_runs() {
  return transact(Access::write, [](StoreTxn& txn) { return reconcile(txn, txn.now()); });
}

std::vector<StopOrder> BudgetLedger::active_stop_orders() {
  return transact(Access::read, [](StoreTxn& txn) { return txn.active_stop_orders(); });
}

}  // namespace spendcap
