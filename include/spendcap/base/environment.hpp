// A process environment as a map: what spendcap reads its settings from and what the command gets
// (supervise/run_env.hpp builds the job's from it). Snapshots only: nothing here writes environ.
#pragma once

#include <map>
#include <string>

namespace spendcap {

using Environment = std::map<std::string, std::string>;

// The process environment as a map (snapshot).
Environment current_environment();

}  // namespace spendcap
