// Copying a ledger. Contract in ledger_copy.hpp.
#include "spendcap/ledger/ledger_copy.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "spendcap/base/error.hpp"

namespace spendcap {

CopiedLedger copy_ledger(LedgerStore& from, LedgerStore& to) {
  std::vector<RunRecord> runs;
  std::vector<BudgetRule> rules;
  std::vector<StopOrder> orders;
  std::vector<RefusedCountRow> counts;
  from.transact(Access::read, [&](StoreTxn& txn) {
    runs = txn.all_runs();
    rules = txn.budget_rules();
    orders = txn.active_stop_orders();
    counts = txn.refused_counts();
  });
  // One row per user and minute: a PostgreSQL ledger's login roles counted different refusals.
  std::map<std::pair<std::string, std::int64_t>, RefusedCountRow> merged;
  for (const RefusedCountRow& row : counts) {
    auto [at, fresh] = merged.try_emplace({row.user, row.minute}, row);
    if (fresh) continue;
    at->second.refused += row.refused;
    at->second.recorded += row.recorded;
    at->second.last_at = std::max(at->second.last_at, row.last_at);
  }
  int unfinished = 0;
  for (const RunRecord& run : runs) unfinished += run.status == RunStatus::running ? 1 : 0;
  if (unfinished > 0) {
    throw Error("ledger " + from.url(),
                std::to_string(unfinished) + " runs are still unfinished (running or lost)",
                "copy once `spendcap ps --ledger " + from.url() +
                    "` lists none: stop new runs first (spendcap stop)");
  }
  if (!to.caller_is_owner()) {
    throw Error("ledger " + to.url(), "only its owner (" + to.owner_name() + ") may copy into it",
                "run the copy as the ledger's owner");
  }
  CopiedLedger copied;
  to.transact(Access::write, [&](StoreTxn& txn) {
    if (!txn.all_runs().empty()) {
      throw Error("ledger " + to.url(), "already holds runs",
                  "copy into a new, empty ledger so that no run is counted twice");
    }
    copied = {};
    for (const BudgetRule& rule : rules) {
      txn.put_budget_rule(rule);
      ++copied.budgets;
    }
    for (const RunRecord& run : runs) {
      txn.insert_run(run);
      // Every run is final here: it adds its spend to its scopes' rows for its day.
      txn.add_usage(named_scopes(run), run.day, Usage{run.spend, Money{}, Money{}});
      ++copied.runs;
    }
    for (const StopOrder& order : orders) {
      txn.insert_stop_order(order.scope, order.reason, order.placed_by, order.placed_at);
      // Every run is finished here: an order on one run can stop nothing more, and `stop --list`
      // does not count it as active (it is copied: it still refuses that id).
      if (order.scope.kind == ScopeKind::run) {
        ++copied.finished_run_orders;
      } else {
        ++copied.stop_orders;
      }
    }
    for (const auto& [key, row] : merged) {
      txn.merge_refused_count(row);
      ++copied.refused_counts;
      copied.refused_runs += row.refused;
    }
  });
  return copied;
}

}  // namespace spendcap
