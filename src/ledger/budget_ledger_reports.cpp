// BudgetLedger's reports: the runs of a period streamed to a report, and accepted results.
#include "spendcap/base/error.hpp"
#include "spendcap/ledger/budget_ledger.hpp"

namespace spendcap {

void BudgetLedger::for_each_run_started(double since, double until,
                                        const std::function<void(const RunRecord&)>& each) {
  // Lost runs due for reconciliation are charged first, so that the report shows their charge.
  reconcile_if_due();
  // A store retries a read only before its first row is read (SQLite takes its read lock at the
  // first step), so `each` never sees a row twice.
  store().transact(Access::read,
                   [&](StoreTxn& txn) { txn.for_each_run_started(since, until, each); });
}

std::vector<AcceptedResult> BudgetLedger::accepted_results() {
  std::vector<AcceptedResult> results;
  store().transact(Access::read, [&](StoreTxn& txn) { results = txn.accepted_results(); });
  return results;
}

std::vector<RunRecord> StoreTxn::list_runs(const RunQuery&) {
  throw Error("runs", "this ledger backend cannot list runs yet", "use a sqlite: ledger");
}
std::vector<std::string> StoreTxn::run_ids_with_prefix(const std::string&, int) {
  throw Error("runs", "this ledger backend cannot find runs by prefix yet", "use a sqlite: ledger");
}
std::pair<std::string, std::string> StoreTxn::neighbour_run_ids(const std::string&) {
  throw Error("runs", "this ledger backend cannot list runs yet", "use a sqlite: ledger");
}

// A store without reports yet (the seam's defaults) refuses rather than reporting nothing.
void StoreTxn::for_each_run_started(double, double, const std::function<void(const RunRecord&)>&) {
  throw Error("report", "this ledger backend has no reports yet", "use a sqlite: ledger");
}

void StoreTxn::put_accepted_result(const AcceptedResult&) {
  throw Error("spendcap accept", "this ledger backend has no accepted results yet",
              "use a sqlite: ledger");
}

std::vector<AcceptedResult> StoreTxn::accepted_results() {
  throw Error("report", "this ledger backend has no accepted results yet", "use a sqlite: ledger");
}

}  // namespace spendcap
