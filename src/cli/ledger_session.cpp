// Opening the ledger a verb's --ledger / --policy choose (admin.hpp).
#include "spendcap/cli/admin.hpp"

#include <sys/time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "spendcap/base/json_numbers.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/runs.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/notify/runner_files.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/lost_runs.hpp"
#include "spendcap/run/membership.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

// The ledger `--ledger`, or else the policy's, names. While setgid the locked policy must be in
// force, and --ledger is checked against it like any flag (it may not name another ledger).
// `owner_rules`, when given, receives the budgets `run` would apply to a personal ledger: the
// locked policy's, else the loaded policy's (--policy is read for them even with --ledger).
std::unique_ptr<Ledger> open_chosen_ledger(const LedgerChoice& choice, std::string* currency,
                                           std::vector<BudgetRule>* owner_rules) {
  refuse_redirecting_environment(current_environment());
  LedgerOptions options;
  std::string url;
  std::string lost_currency = "USD";
  auto keep_rules = [owner_rules](const LoadedPolicy& loaded) {
    if (owner_rules) {
      *owner_rules = budget_rules_of(loaded.locked_policy ? *loaded.locked_policy : loaded.policy);
    }
  };
  if (choice.ledger && !installed_setgid()) {
    url = *choice.ledger;
    if (owner_rules && choice.policy) {
      keep_rules(load_policy(PolicySearch::from_environment(choice.policy), PolicyLayer{}));
    }
  } else {
    nlohmann::json flags = nlohmann::json::object();
    if (choice.ledger) flags["ledger"] = *choice.ledger;
    LoadedPolicy loaded =
        load_policy(PolicySearch::from_environment(choice.policy), PolicyLayer{"--ledger", flags});
    require_locked_policy_when_setgid(loaded.locked, choice.ledger.value_or(""));
    url = loaded.policy.ledger ? *loaded.policy.ledger : default_ledger_url();
    if (currency) *currency = loaded.policy.currency;
    lost_currency = loaded.policy.currency;
    if (loaded.locked_policy) options.budget_caps = budget_rules_of(*loaded.locked_policy);
    options.postgres_password = ledger_password_as_installed(loaded.policy, loaded.locked_policy);
    keep_rules(loaded);
  }
  std::unique_ptr<Ledger> ledger = open_ledger_as_installed(url, options);
  with_ledger_group([&] { replay_spool(*ledger); });
  // Whoever opens the ledger reconciles what is due and queues lost runs' events (lost_runs.hpp).
  std::string why_not_told;
  tell_lost_runs(*ledger, lost_currency, &why_not_told);
  if (!why_not_told.empty()) {
    std::cerr << "spendcap: lost runs' events: " << escape_for_terminal(why_not_told) << "\n";
  }
  return ledger;
}

std::unique_ptr<Ledger> open_ledger_for(const LedgerChoice& choice) {
  return open_chosen_ledger(choice, nullptr);
}

}  // namespace spendcap
