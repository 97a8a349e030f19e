// `spendcap ledger copy FROM TO`: copies budgets, runs and active stop orders from one ledger into
// another, empty one (ledger_copy.hpp), e.g. from SQLite on one host to PostgreSQL for many.
#pragma once

#include <string>

namespace spendcap {

// Prints what it copied; errors are thrown as spendcap::Error (refused while FROM has
// unfinished runs, or TO has runs already).
int ledger_copy_command(const std::string& from_url, const std::string& to_url);

}  // namespace spendcap
