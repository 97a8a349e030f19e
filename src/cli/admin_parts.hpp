// The helpers the admin verbs (budgets, ps, stop, show) share: wall-clock time, dates and ages as
// they print them, and what a budget has used. Private to the cli library.
#pragma once

#include <string>

#include "spendcap/ledger/ledger.hpp"

namespace spendcap::admin_parts {

double wall_now();
std::string utc_date(double unix_seconds);
std::string age(double seconds);
// What a budget has spent: finished runs, and running runs so far (their last heartbeats).
Money used(const BudgetView& view);
std::string percent_used(const BudgetView& view);

}  // namespace spendcap::admin_parts
