// Where the policy comes from, and the rule that a locked system policy can only be tightened.
//
// The policy in effect is the first found of: --policy, $SPENDCAP_POLICY, ./spendcap.json,
// $XDG_CONFIG_HOME/spendcap/policy.json (~/.config/...), /etc/spendcap/policy.json. A system policy
// (/etc/spendcap/policy.json) with "locked": true always loads first; then the user's policy and
// the command-line flags are layered over it and may only tighten it: every value they set is
// checked against the locked one by its key's rule in keys.hpp (a shorter grace, a lower budget, a
// higher GPU count are fine; another rate, another ledger, warn mode, no checkpoint signal are
// refused with an error that names the flag or file and the locked value). A locked policy refuses
// to load when it or its directory can be written by anyone but its owner.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spendcap/policy/policy.hpp"

namespace spendcap {

// Where to look; tests and callers fill it from the environment with from_environment().
struct PolicySearch {
  std::optional<std::string> flag_path;  // --policy
  std::optional<std::string> env_path;   // $SPENDCAP_POLICY
  std::string cwd_path = "spendcap.json";
  std::optional<std::string> xdg_path;  // $XDG_CONFIG_HOME/spendcap/policy.json or ~/.config/...
  std::string system_path = "/etc/spendcap/policy.json";

  static PolicySearch from_environment(std::optional<std::string> flag_path);
};

// Settings given on the command line, as a policy document fragment (e.g.
// {"defaults": {"grace": "1s"}, "mode": "warn"}), so that one rule set checks files and flags.
struct PolicyLayer {
  std::string source;  // "/home/a/spendcap.json", "$SPENDCAP_POLICY=/x.json", "command line"
  nlohmann::json document;
};

struct LoadedPolicy {
  Policy policy;
  nlohmann::json document;           // the merged document the policy was parsed from
  std::vector<std::string> sources;  // the layers, in order ("/etc/spendcap/policy.json (locked)")
  bool locked = false;               // a locked system policy is in force
  std::string locked_source;         // its path, for messages
  std::optional<Policy> locked_policy;  // the locked policy alone, without the layers above it
};

// load_policy for the verbs that only read the ledger (`runs`, `report`, ...): a project's
// ./spendcap.json that is broken is warned about on stderr (once per process: `report` reads the
// policy twice) and skipped, so that history stays readable while it is fixed; `run` and every verb
// that writes still refuse it. --policy, $SPENDCAP_POLICY and a locked policy are never skipped.
LoadedPolicy load_policy_for_reading(const PolicySearch& search, const PolicyLayer& flags);

// Finds and layers the policy files, then `flags` (source "command line"). Throws PolicyError for
// an invalid file and spendcap::Error for a layer that would loosen a locked policy (naming the
// flag or file, the value and the locked value). With no file anywhere, the policy is the defaults.
LoadedPolicy load_policy(const PolicySearch& search, const PolicyLayer& flags);

// The check behind load_policy, exposed for tests: every value `upper` sets must tighten `locked`.
// Returns one message per violation, e.g. "/defaults/grace: 120s is longer than the locked 60s".
std::vector<std::string> loosening_violations(const nlohmann::json& locked,
                                              const nlohmann::json& upper);

// The file permission rule for locked policies: an error message when `path` or its directory is
// writable by someone other than its owner (group or other write bit), else nullopt.
std::optional<std::string> unsafe_permissions(const std::string& path);

}  // namespace spendcap
