// What one run may add to the shared ledger and to the owner's webhook receiver: every run,
// refused ones too, keeps its tags, names and command in the ledger and sends them in its events,
// so one user's `--tag` text must not fill the ledger's disk (issue 38: 40 refused runs with
// 1.4 MB of tags each filled a 40 MB filesystem). The flags over a limit are refused (125) with
// the limit named; tags from the scheduler's environment (SLURM_JOB_NAME...) are cut to the value
// limit with a mark instead, since the user did not write them as flags. The command is kept up
// to kMaxStoredCommandBytes (base/command_redaction.hpp), the job itself gets it whole.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "spendcap/run/request.hpp"

namespace spendcap {

inline constexpr std::size_t kMaxTags = 32;            // --tag flags of one run
inline constexpr std::size_t kMaxTagKeyBytes = 64;     // a tag's KEY
inline constexpr std::size_t kMaxTagValueBytes = 256;  // a tag's VALUE
inline constexpr std::size_t kMaxNameBytes = 128;      // --team, --experiment, --project, --job

// Throws Error (usage, 125) naming the flag, its size and the limit, for the first flag over one.
void require_within_input_limits(const RunRequest& request);

// The scheduler's tags with each value over kMaxTagValueBytes cut there (at a UTF-8 boundary),
// ending in "...".
std::map<std::string, std::string> bounded_tags(std::map<std::string, std::string> tags);

}  // namespace spendcap
