// The helpers several verbs share: wall-clock time, dates and ages as they print them, what a
// budget has used, the policy a verb's --policy chooses. Private to the cli library.
#pragma once

#include <string>

#include "spendcap/cli/admin.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/policy/layers.hpp"

namespace spendcap::admin_parts {

double wall_now();
std::string utc_date(double unix_seconds);
std::string age(double seconds);
// What a budget has spent: finished runs, and running runs so far (their last heartbeats).
Money used(const BudgetView& view);
std::string percent_used(const BudgetView& view);
// The policy --policy (else the search order) chooses, with no flags layered over it; for a
// reading choice (for_reading) a broken ./spendcap.json is warned about and skipped.
LoadedPolicy load_chosen_policy(const LedgerChoice& choice);
// Whole seconds since the epoch.
double utc_now();

}  // namespace spendcap::admin_parts
