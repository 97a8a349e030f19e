// `budgets` and `budgets apply` (admin.hpp).
#include "admin_parts.hpp"

#include <CLI/CLI.hpp>
#include <memory>

#include "spendcap/cli/admin.hpp"
#include "spendcap/cli/command_tree.hpp"
#include "spendcap/cli/verbs.hpp"

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

using namespace admin_parts;  // NOLINT: the shared helpers of the admin verbs

namespace {
bool same_rule(const BudgetRule& a, const BudgetRule& b) {
  return a.scope == b.scope && a.period == b.period && a.amount == b.amount &&
         a.max_run == b.max_run && a.member_groups == b.member_groups;
}
bool changed_rules(const std::vector<BudgetRule>& before, const std::vector<BudgetRule>& after) {
  return !std::is_permutation(before.begin(), before.end(), after.begin(), after.end(), same_rule);
}
}  // namespace

// What running and lost runs hold beyond what they spent so far: their ceilings less their spend
// (USED counts that), so that USED + HELD + AVAILABLE is the budget.
static Money held_ahead(const BudgetView& view) {
  return view.held - view.live;
}

// Spend above ceilings is never hidden: it is in `spent`, and named.
static TableCell used_text(const BudgetView& view, const std::string& currency) {
  TableCell text = TableCell::money(used(view), currency);
  if (view.overrun > Money{}) {
    text += " (overrun " + TableCell::money(view.overrun, currency) + ")";
  }
  return text;
}

int budgets_command(const LedgerChoice& choice, bool json) {
  LedgerSession session = open_ledger_session(for_reading(choice), OwnerRules::read);
  std::unique_ptr<Ledger>& ledger = session.ledger;
  const std::string& currency = session.currency;
  const std::vector<BudgetRule>& policy_rules = session.owner_rules;
  // As `run` does: loading the owner's policy applies its budgets to a personal ledger, so that
  // `budgets --policy FILE` shows what that file applies. A shared ledger's budgets change only
  // by `budgets apply`; those of the policy it lacks are named below the table.
  bool personal = !policy_rules.empty() && ledger->is_personal();
  if (personal) {
    std::vector<BudgetRule> before = ledger->budget_rules();
    ledger->apply_budgets(policy_rules, false);
    // Never silent: a command that shows also wrote. Said on stderr, so that --json stays JSON.
    if (changed_rules(before, ledger->budget_rules())) {
      std::cerr << "spendcap: applied the policy's " << policy_rules.size() << " budget"
                << (policy_rules.size() == 1 ? "" : "s") << " to your own ledger " << ledger->url()
                << " (as `spendcap run` would; `spendcap budgets apply POLICY` also removes "
                   "budgets the policy lacks)\n";
    }
  }
  std::vector<BudgetView> views = ledger->budgets();
  std::vector<std::string> not_applied;
  for (const BudgetRule& rule : personal ? std::vector<BudgetRule>{} : policy_rules) {
    bool in_ledger = std::any_of(views.begin(), views.end(), [&](const BudgetView& view) {
      return view.rule.scope == rule.scope;
    });
    if (!in_ledger) not_applied.push_back(to_string(rule.scope));
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const BudgetView& view : views) {
      out.push_back(
          {{"scope", to_string(view.rule.scope)},
           {"period", to_string(view.rule.period)},
           {"period_start", view.period_start},
           {"budget", money_to_json(view.rule.amount)},
           {"max_run", view.rule.max_run ? nlohmann::json(money_to_json(*view.rule.max_run))
                                         : nlohmann::json(nullptr)},
           {"spent", money_to_json(view.spent)},
           {"used", money_to_json(used(view))},
           {"available", money_to_json(view.remaining())},
           {"running", money_to_json(view.live)},
           {"held", money_to_json(held_ahead(view))},
           {"ceilings", money_to_json(view.held)},
           {"overrun", money_to_json(view.overrun)},
           {"remaining", money_to_json(view.remaining())},
           {"members", view.rule.member_groups}});
    }
    std::cout << plain_json_numbers(dump_json(out, 2)) << "\n";
    return 0;
  }
  auto say_not_applied = [&] {
    if (not_applied.empty()) return;
    std::cout << "not in " << ledger->url() << ": " << escape_for_terminal(join(not_applied, ", "))
              << " (a shared ledger's owner applies the policy with `spendcap budgets apply "
                 "POLICY`)\n";
  };
  if (views.empty()) {
    std::cout << "no budgets in " << ledger->url()
              << " (define them in the policy; the ledger's owner applies them with `spendcap "
                 "budgets apply POLICY`)\n";
    say_not_applied();
    return 0;
  }
  // As sreport: USED is what was spent (running runs: so far); HELD is what running runs may
  // still spend up to their ceilings; AVAILABLE is what new runs can be granted. USED + HELD +
  // AVAILABLE = BUDGET.
  std::vector<std::vector<TableCell>> rows = {
      {"SCOPE", "PERIOD", "SINCE", "BUDGET", "USED", "USED%", "HELD", "AVAILABLE", "MEMBERS"}};
  for (const BudgetView& view : views) {
    rows.push_back(
        {to_string(view.rule.scope), to_string(view.rule.period), utc_date(view.period_start),
         TableCell::money(view.rule.amount, currency), used_text(view, currency),
         percent_used(view), TableCell::money(held_ahead(view), currency),
         TableCell::money(view.remaining(), currency),
         view.rule.member_groups.empty() ? "anyone" : join(view.rule.member_groups, ",")});
  }
  print_table(rows);
  say_not_applied();
  return 0;
}

int budgets_apply_command(const LedgerChoice& choice, const std::string& policy_file) {
  Policy policy = parse_policy(read_policy_file(policy_file), policy_file);
  LedgerChoice target = choice;
  if (!target.ledger && policy.ledger) target.ledger = policy.ledger;
  LedgerSession session = open_ledger_session(target);
  // The write a writing verb owes the host first (ledger_session.hpp).
  settle_host_debts(session);
  std::unique_ptr<Ledger>& ledger = session.ledger;
  std::vector<BudgetRule> rules = budget_rules_of(policy);
  ledger->apply_budgets(rules, true);
  std::cout << "applied " << rules.size() << " budgets from " << policy_file << " to "
            << ledger->url() << "\n";
  return 0;
}

namespace {

struct BudgetsArgs {
  LedgerChoice choice;
  bool json = false;
  std::string apply_file;
};

VerbRun add_budgets(CLI::App& command, CLI::App&, VerbContext&) {
  auto args = std::make_shared<BudgetsArgs>();
  CLI::App* budgets = &command;
  add_ledger_options(*budgets, args->choice);
  budgets->add_flag("--json", args->json, "print JSON");
  CLI::App* apply = budgets->add_subcommand("apply", "set the ledger's budgets from a policy");
  apply->add_option("policy_file", args->apply_file, "the policy")->required();
  apply->fallthrough();  // `budgets apply --ledger X FILE` as well as `budgets --ledger X apply
                         // FILE`
  return [args, apply] {
    if (*apply) return budgets_apply_command(args->choice, args->apply_file);
    return budgets_command(args->choice, args->json);
  };
}

}  // namespace

const Verb kBudgetsVerb = {"budgets", "each budget: spent, running, remaining", add_budgets};

}  // namespace spendcap
