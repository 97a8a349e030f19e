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

AcceptedResult BudgetLedger::accept_run(const std::string& run_id, const std::string& note,
                                        const std::string& accepted_by) {
  AcceptedResult accepted;
  store().transact(Access::write, [&](StoreTxn& txn) {
    std::optional<RunRecord> run = txn.find_run(run_id);
    if (!run) {
      throw Error("spendcap accept " + run_id, "no such run in the ledger " + url(),
                  "the run ids are in `spendcap report --format json` and the run's status file");
    }
    if (run->status == RunStatus::running) {
      throw Error("spendcap accept " + run_id, "the run is still running",
                  "accept its result once it has finished");
    }
    if (run->status == RunStatus::refused) {
      throw Error("spendcap accept " + run_id, "the run was refused and has no result");
    }
    accepted = AcceptedResult{run_id, note, accepted_by, txn.now()};
    txn.put_accepted_result(accepted);
  });
  return accepted;
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
