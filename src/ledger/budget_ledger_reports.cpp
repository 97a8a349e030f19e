// BudgetLedger's reports: the runs of a period streamed to a report, and accepted results.
#include "spendcap/base/error.hpp"
#include "spendcap/ledger/budget_ledger.hpp"
#include "spendcap/ledger/rollup.hpp"

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

bool BudgetLedger::read_rollups(const RollupRead& read, const RollupVisitor& visit) {
  reconcile_if_due();
  store().settle_rollups();
  bool kept = false;
  // One read transaction: a run that finishes meanwhile is either in its cell or read as a row,
  // never both. A store retries a read only before its first row is read.
  store().transact(Access::read, [&](StoreTxn& txn) {
    kept = txn.has_rollups();
    if (!kept) return;
    for (const RollupSpan& span : read.spans) {
      txn.for_each_rollup_cell(span, read.team, read.experiment, visit.cell);
    }
    for (const RollupSpan& span : read.spans) {
      txn.for_each_rollup_metric(span, read.team, read.experiment, visit.metric);
    }
    for (const auto& [since, until] : read.run_ranges) {
      txn.for_each_run_started(since, until, visit.run);
    }
    auto wanted = [&read](const RunRecord& run) {
      return read.covers_day(run.day) && (!read.team || run.team == *read.team) &&
             (!read.experiment || run.experiment == *read.experiment);
    };
    for (const RunRecord& run : txn.unfinished_runs()) {
      if (wanted(run)) visit.run(run);
    }
    for (const AcceptedResult& accepted : txn.accepted_results()) {
      std::optional<RunRecord> run = txn.find_run(accepted.run_id);
      if (run && run->status != RunStatus::running && wanted(*run)) visit.accepted(*run);
    }
  });
  return kept;
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

void StoreTxn::for_each_rollup_cell(const RollupSpan&, const std::optional<std::string>&,
                                    const std::optional<std::string>&,
                                    const std::function<void(const RollupCell&)>&) {
  throw Error("report", "this ledger backend keeps no rollups", "read its runs");
}

void StoreTxn::for_each_rollup_metric(const RollupSpan&, const std::optional<std::string>&,
                                      const std::optional<std::string>&,
                                      const std::function<void(const RollupMetric&)>&) {
  throw Error("report", "this ledger backend keeps no rollups", "read its runs");
}

void StoreTxn::put_accepted_result(const AcceptedResult&) {
  throw Error("spendcap accept", "this ledger backend has no accepted results yet",
              "use a sqlite: ledger");
}

std::vector<AcceptedResult> StoreTxn::accepted_results() {
  throw Error("report", "this ledger backend has no accepted results yet", "use a sqlite: ledger");
}

}  // namespace spendcap
