// How a spendcap process ends as what it waited for ended: by the same signal, re-raised on
// itself, so that a calling shell loop stops as it would for the bare command (DESIGN.md "The kill
// path", step 6). The run's end (run/summary.hpp) and the privileged runner's front and keeper
// (shared_runner/entry.hpp) end this way.
#pragma once

namespace spendcap {

// Dies by `signal`: its default disposition restored, unblocked, raised. Where that does not end
// the process (the signal's default is to ignore it, or spendcap is PID 1 in a container), exits
// with the status a shell reports for it (128 + N).
[[noreturn]] void die_by_signal(int signal);

// Ends as a child's wait status says: by its signal (die_by_signal), else with its exit code
// (125 for a status that is neither).
[[noreturn]] void exit_as(int wait_status);

}  // namespace spendcap
