// `spendcap run --dry-run`: the run's resolved terms (and where each came from: a flag, a
// $SPENDCAP_* variable, the project's spendcap.json, a built-in default), its estimate and the
// admission verdict, printed on stdout; nothing is started and nothing is written to the ledger
// (a ledger file that does not exist yet is not created). The verdict is what admission would
// decide now: the run's own budget against its shutdown reserve, the budgets of its team,
// experiment, project and user against the reserve, stop orders in its scope, the crash-loop guard.
// Another run may change it before a real start.
#pragma once

#include <string>

#include "spendcap/run/settings.hpp"

namespace spendcap {

// Prints the terms, the estimate and the verdict; returns 0 when the run would be admitted, else
// the refusal's exit status (120).
int dry_run(const RunSettings& settings, const std::string& executable);

}  // namespace spendcap
