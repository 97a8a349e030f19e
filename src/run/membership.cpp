#include "spendcap/run/membership.hpp"

#include <algorithm>

#include "spendcap/base/error.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/ledger/stop_rule.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

std::vector<std::string> missing_membership(Ledger& ledger, const Scope& scope) {
  std::vector<BudgetRule> rules = ledger.budget_rules();
  auto rule = std::find_if(rules.begin(), rules.end(),
                           [&](const BudgetRule& candidate) { return candidate.scope == scope; });
  if (rule == rules.end() || rule->member_groups.empty()) return {};
  if (ledger.caller_is_owner()) return {};
  Caller caller = current_caller();
  for (const std::string& name : rule->member_groups) {
    if (caller.in_group(name)) return {};
  }
  return rule->member_groups;
}

void require_membership(Ledger& ledger, const std::vector<Scope>& scopes,
                        const std::string& action) {
  for (const Scope& scope : scopes) {
    std::vector<std::string> groups = missing_membership(ledger, scope);
    if (groups.empty()) continue;
    std::string which = groups.size() == 1 ? "the group " + groups.front()
                                           : "any of the groups " + join(groups, ", ");
    throw Error("--" + to_string(scope.kind) + " " + scope.name,
                user_name() + " is not in " + which + ": only the members of " + to_string(scope) +
                    " (and the ledger's owner) may " + action,
                "ask the ledger's owner to add you to " +
                    (groups.size() == 1 ? groups.front() : "one of them") + ", or give a " +
                    to_string(scope.kind) + " you belong to");
  }
}

}  // namespace spendcap
