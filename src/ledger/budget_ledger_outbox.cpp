// BudgetLedger: the webhook outbox. Contract in ledger.hpp and budget_ledger.hpp.
#include "budget_ledger_parts.hpp"

#include <string>
#include <vector>

namespace spendcap {

std::int64_t BudgetLedger::add_outbox(const OutboxEntry& entry) {
  return transact(Access::write, [&entry](StoreTxn& txn) {
    OutboxEntry stored = entry;
    stored.created_at = txn.now();
    return txn.insert_outbox(stored);
  });
}

std::vector<OutboxEntry> BudgetLedger::outbox(const std::string& user) {
  return transact(Access::read, [&user](StoreTxn& txn) { return txn.outbox_entries(user); });
}

void BudgetLedger::remove_outbox(std::int64_t id) {
  transact(Access::write, [id](StoreTxn& txn) { txn.delete_outbox(id); });
}

void BudgetLedger::note_outbox_failure(std::int64_t id, const std::string& error) {
  transact(Access::write, [id, &error](StoreTxn& txn) { txn.update_outbox_failure(id, error); });
}

std::vector<std::int64_t> BudgetLedger::claim_outbox(const std::vector<std::int64_t>& ids,
                                                     const std::string& claimer, Nanos hold) {
  if (ids.empty()) return {};
  return transact(Access::write, [&](StoreTxn& txn) {
    double now = txn.now();
    std::vector<std::int64_t> claimed;
    for (std::int64_t id : ids) {
      std::optional<OutboxClaim> claim = txn.outbox_claim(id);
      if (!claim) continue;  // delivered and removed meanwhile
      if (claim->claimed_until > now) continue;
      // A run that claimed it holds it while it runs with a fresh heartbeat (its delivery may
      // still be in flight); a run that died lets it go once its heartbeat is stale.
      if (!claim->claimed_by.empty() && claim->claimed_by != claimer) {
        std::optional<RunRecord> holder = txn.find_run(claim->claimed_by);
        if (holder && holder->status == RunStatus::running &&
            !is_stale(holder->heartbeat_at, holder->sync, now)) {
          continue;
        }
      }
      txn.set_outbox_claim(id, OutboxClaim{claimer, now + to_seconds(hold)});
      claimed.push_back(id);
    }
    return claimed;
  });
}

}  // namespace spendcap
