// A run's identity: which run it is (its ids), whose (team, experiment, project, user), where
// (host), its tags and its command. Made once, by the run's settings (run/settings.hpp), and taken
// whole by every record of the run: the ledger's start and row (RunStart, RunRecord), the webhooks'
// facts (notify/payload.hpp's RunFacts); the supervisor's plan, the job's environment and the
// metrics read theirs from it (run/execution.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace spendcap {

struct RunIdentity {
  std::string id;       // UUID v4
  std::string job_key;  // "" when none; a multi-node run's shared id (run/multi_node.hpp)
  std::string team, experiment, project, user, host;
  std::map<std::string, std::string> tags;
  std::vector<std::string> command;
};

}  // namespace spendcap
