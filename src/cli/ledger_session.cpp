// Opening the ledger a verb's --ledger / --policy choose; settling the host's debts to it
// (ledger_session.hpp).
#include "spendcap/cli/ledger_session.hpp"

#include <iostream>
#include <nlohmann/json.hpp>

#include "spendcap/base/text.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/lost_runs.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

LedgerSession open_ledger_session(const LedgerChoice& choice, OwnerRules owner_rules) {
  refuse_redirecting_environment(current_environment());
  LedgerSession session;
  LedgerOptions options;
  std::string url;
  auto keep_rules = [&](const LoadedPolicy& loaded) {
    if (owner_rules == OwnerRules::read) {
      session.owner_rules =
          budget_rules_of(loaded.locked_policy ? *loaded.locked_policy : loaded.policy);
    }
  };
  if (choice.ledger && !installed_setgid()) {
    url = *choice.ledger;
    if (owner_rules == OwnerRules::read && choice.policy) {
      keep_rules(load_policy(PolicySearch::from_environment(choice.policy), PolicyLayer{}));
    }
  } else {
    nlohmann::json flags = nlohmann::json::object();
    if (choice.ledger) flags["ledger"] = *choice.ledger;
    LoadedPolicy loaded = (choice.reading ? load_policy_for_reading : load_policy)(
        PolicySearch::from_environment(choice.policy), PolicyLayer{"--ledger", flags});
    require_locked_policy_when_setgid(loaded.locked, choice.ledger.value_or(""));
    url = loaded.policy.ledger ? *loaded.policy.ledger : default_ledger_url();
    session.currency = loaded.policy.currency;
    if (loaded.locked_policy) options.budget_caps = budget_rules_of(*loaded.locked_policy);
    options.postgres_password = ledger_password_as_installed(loaded.policy, loaded.locked_policy);
    keep_rules(loaded);
  }
  session.ledger = open_ledger_as_installed(url, options);
  return session;
}

void settle_host_debts(LedgerSession& session) {
  Ledger& ledger = *session.ledger;
  with_ledger_group([&] { replay_spool(ledger); });
  // Whoever settles reconciles what is due and queues lost runs' events (lost_runs.hpp).
  std::string why_not_told;
  tell_lost_runs(ledger, session.currency, &why_not_told);
  if (!why_not_told.empty()) {
    std::cerr << "spendcap: lost runs' events: " << escape_for_terminal(why_not_told) << "\n";
  }
}

}  // namespace spendcap
