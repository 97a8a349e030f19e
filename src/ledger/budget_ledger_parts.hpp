// BudgetLedger's own helpers, shared by its files (budget_ledger.cpp: admission, heartbeats,
// finishing; budget_ledger_budgets.cpp; budget_ledger_runs.cpp: the runs read back, lost runs,
// stop orders; budget_ledger_outbox.cpp; budget_ledger_access.cpp; budget_ledger_reports.cpp).
// Private to the ledger library: not under include/.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "spendcap/ledger/budget_ledger.hpp"

namespace spendcap {

namespace budget_ledger_parts {

// Adds the deltas to the run's usage rows (nothing to do for a zero delta).
void add_usage(StoreTxn& txn, const RunRecord& run, const Usage& delta);

// The run as a Ledger caller sees it: a running run whose heartbeat is stale is `lost`.
RunView view_of(const RunRecord& r, double now);

// Charges every lost run that is due its ceiling; returns how many.
int reconcile(StoreTxn& txn, double now);

// The budget in force for `scope`: its ledger row, lowered by a locked policy's cap (ledger.hpp,
// LedgerOptions::budget_caps).
std::optional<BudgetRule> rule_in_force(std::optional<BudgetRule> row, const Scope& scope,
                                        const std::vector<BudgetRule>& caps);

}  // namespace budget_ledger_parts

template <class Body>
auto BudgetLedger::transact(Access access, Body&& body) {
  using Result = std::invoke_result_t<Body&, StoreTxn&>;
  if constexpr (std::is_void_v<Result>) {
    store_->transact(access, [&](StoreTxn& txn) { body(txn); });
  } else {
    std::optional<Result> result;
    store_->transact(access, [&](StoreTxn& txn) { result.emplace(body(txn)); });
    return std::move(*result);
  }
}

}  // namespace spendcap
