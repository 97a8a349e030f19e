// The one way a verb opens the ledger its --ledger / --policy choose, and the one write a verb may
// owe the host besides its own.
//
// open_ledger_session reads the policy (while setgid, the locked policy must be in force and
// --ledger is checked against it like any flag) and opens the ledger it names. It writes nothing
// of its own: what the ledger does at open or at a read (migrating an old schema; BudgetLedger
// charging due lost runs their ceilings, ledger.hpp) is the ledger's rule, the same for every
// caller. A reading verb (budgets, runs, show, report, estimate, outbox list, stop --list) stops
// there.
//
// settle_host_debts is the named write: it replays this host's spooled final rows (spool.hpp, as
// the ledger group while setgid) and queues lost runs' webhook events (run/lost_runs.hpp). The
// verbs that write (stop, accept, budgets apply, outbox flush) take it, and `ps`, the operator's
// look at running and lost runs, which the guide names as the command that settles them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/ledger/ledger.hpp"

namespace spendcap {

// Which ledger a command talks to: --ledger, else the policy's, else the default.
struct LedgerChoice {
  std::optional<std::string> policy;  // --policy
  std::optional<std::string> ledger;  // --ledger
  // A verb that only reads (for_reading): a broken ./spendcap.json is warned about and skipped
  // (load_policy_for_reading), not refused.
  bool reading = false;
};

// The choice of a reading verb (runs, show, report, budgets, outbox list, stop --list): a broken
// ./spendcap.json must not hide the history (issue 40). `run`, `estimate` (its answer is the
// project's terms) and the writing verbs still refuse it.
inline LedgerChoice for_reading(LedgerChoice choice) {
  choice.reading = true;
  return choice;
}

struct LedgerSession {
  std::unique_ptr<Ledger> ledger;
  // The policy's currency; "USD" when --ledger names the ledger and no policy is read.
  std::string currency = "USD";
  // The budgets `run` would apply to a personal ledger: the locked policy's, else the loaded
  // policy's (--policy is read for them even with --ledger). Filled only when asked for.
  std::vector<BudgetRule> owner_rules;
};

enum class OwnerRules { skip, read };

LedgerSession open_ledger_session(const LedgerChoice& choice,
                                  OwnerRules owner_rules = OwnerRules::skip);

// Replays this host's spool into the session's ledger and queues lost runs' events; a failure to
// queue them is printed (the verb goes on).
void settle_host_debts(LedgerSession& session);

}  // namespace spendcap
