// The backend-independent names of the ledger: scopes, statuses, staleness.
#include "spendcap/ledger/ledger.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "spendcap/base/error.hpp"

namespace spendcap {

std::vector<BudgetRule> budget_rules_of(const Policy& policy) {
  std::vector<BudgetRule> rules;
  for (const auto& [kind, budgets] : policy.budgets) {
    for (const auto& [name, spec] : budgets) {
      rules.push_back(BudgetRule{Scope{kind, name}, spec.amount, spec.period, spec.max_run,
                                 spec.member_groups});
    }
  }
  return rules;
}

std::string to_string(const Scope& scope) {
  return to_string(scope.kind) + ":" + scope.name;
}

std::string budget_source_text(const std::optional<Money>& flag_budget,
                               const std::optional<Scope>& lowered_by, const std::string& job_key,
                               const std::vector<Scope>& budgeted_scopes) {
  if (lowered_by) return "max_run of " + to_string(*lowered_by);
  if (flag_budget) return job_key.empty() ? "flag --budget" : "flag --budget of job " + job_key;
  std::string scopes;
  for (const Scope& scope : budgeted_scopes) {
    scopes += (scopes.empty() ? "" : ", ") + to_string(scope);
  }
  return scopes.empty() ? "none" : "budgets of " + scopes;
}

namespace {
constexpr RunStatus kRunStatuses[] = {RunStatus::running,  RunStatus::succeeded, RunStatus::failed,
                                      RunStatus::killed,   RunStatus::refused,   RunStatus::lost,
                                      RunStatus::preempted};
}  // namespace

std::string to_string(RunStatus status) {
  switch (status) {
    case RunStatus::running:
      return "running";
    case RunStatus::succeeded:
      return "succeeded";
    case RunStatus::failed:
      return "failed";
    case RunStatus::killed:
      return "killed";
    case RunStatus::refused:
      return "refused";
    case RunStatus::lost:
      return "lost";
    case RunStatus::preempted:
      return "preempted";
  }
  return "?";
}

std::optional<RunStatus> parse_run_status(std::string_view text) {
  for (RunStatus status : kRunStatuses) {
    if (text == to_string(status)) return status;
  }
  return std::nullopt;
}

Nanos stale_after(Nanos sync) {
  return std::max(3 * sync, sync + Nanos(std::chrono::seconds(2)));
}

}  // namespace spendcap
