// A run's identity: which run it is (its ids), whose (team, experiment, project, user), where
// (host), its tags and its command. Made once, by the run's settings (run/settings.hpp), and taken
// whole by every record of the run: the ledger's start, row and view (RunStart, RunRecord,
// RunView), the webhooks' facts (notify/payload.hpp's RunFacts); each copies it in one assignment
// of the base (`static_cast<RunIdentity&>(to) = from`), never field by field, so a new field
// reaches every record. The supervisor's plan, the job's environment and the metrics read theirs
// from it (run/execution.cpp).
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
