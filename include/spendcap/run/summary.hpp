// What a run says at its end, and how spendcap ends with it: the summary line ("run 1a2b3c4d
// succeeded after 1.20s: spent $0.01 of $5.00; exit 0") and the GPU report, the --status-file
// (also for a run that failed before its job ran), and dying by the signal that stopped the run.
#pragma once

#include <optional>
#include <string>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/ledger.hpp"
#include "spendcap/process/exit_status.hpp"
#include "spendcap/supervise/outcome.hpp"
#include "spendcap/supervise/reporter.hpp"

namespace spendcap {

// The ledger's status and reason, as the status file and `spendcap runs` give them, the spend,
// and the exit status.
std::string summary_line(const RunOutcome& outcome);

// The summary line (with a job key's total across its runs) and the GPU report, one reporter line
// each.
void say_summary(const RunOutcome& outcome, const Admission& admission, const std::string& job_key,
                 const Reporter& reporter);

// --status-file (`path`), when given; a file it cannot write is said, not thrown.
void write_status(const std::optional<std::string>& path, const RunOutcome& outcome,
                  const Reporter& reporter);

// --status-file for a run that failed before its job ran (125, 126, 127; `error` says why); what is
// not known is null. A file it cannot write is said on stderr.
void write_error_status(const std::string& path, const Error& error);

// Dies by `signal`, as the run did or as spendcap was told to (process/exit_status.hpp).
[[noreturn]] inline void reraise(int signal) {
  die_by_signal(signal);
}

}  // namespace spendcap
