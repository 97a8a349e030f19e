#include "spendcap/run/dry_run.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/exit_code.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/run/admission.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/spend/trip.hpp"

namespace spendcap {

namespace {

// A SQLite ledger that does not exist yet holds no history: opening it would create it.
bool ledger_exists(const std::string& url) {
  if (url.starts_with("postgresql:") || url.starts_with("postgres:")) return true;
  std::string path = url.starts_with("sqlite:") ? url.substr(7) : url;
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

struct Verdict {
  bool admitted = true;
  std::string why;
};

// What a named scope has left for this run's first grant, from the ledger's view of the budget;
// on a personal ledger the policy's amounts (a run applies them when it opens the ledger).
Verdict budgets_verdict(const RunSettings& settings, const RunStart& start, Ledger* ledger,
                        std::optional<Money>& run_budget, std::vector<std::string>& lines) {
  const std::string& currency = settings.loaded.policy.currency;
  const Policy& owner =
      settings.loaded.locked_policy ? *settings.loaded.locked_policy : settings.loaded.policy;
  std::vector<BudgetRule> rules = budget_rules_of(owner);
  std::vector<BudgetView> views;
  if (ledger) views = ledger->budgets();
  bool personal = !ledger || ledger->is_personal();
  for (const Scope& scope : named_scopes(start)) {
    auto view = std::find_if(views.begin(), views.end(),
                             [&](const BudgetView& v) { return v.rule.scope == scope; });
    auto rule = std::find_if(rules.begin(), rules.end(),
                             [&](const BudgetRule& r) { return r.scope == scope; });
    std::optional<BudgetView> use;
    if (view != views.end()) use = *view;
    if (personal && rule != rules.end()) {
      if (!use) use = BudgetView{};
      use->rule = *rule;
    }
    if (!use) continue;
    Money remaining = use->remaining();
    lines.push_back("  " + to_string(scope) + ": " + format_money(use->rule.amount, currency) +
                    " a " + to_string(use->rule.period) + ", " + format_money(remaining, currency) +
                    " left");
    if (use->rule.max_run && (!run_budget || *use->rule.max_run < *run_budget)) {
      run_budget = use->rule.max_run;
      lines.push_back("  run budget: " + format_money(*run_budget, currency) + " (the max_run of " +
                      to_string(scope) + ")");
    }
    if (remaining < start.reserve && settings.mode == Mode::enforce) {
      return {false, to_string(scope) + " has " + format_money(remaining, currency) +
                         " left, less than the shutdown reserve " +
                         format_money(start.reserve, currency)};
    }
  }
  return {};
}

std::string term(const RunSettings& settings, const std::string& name) {
  auto it = settings.term_sources.find(name);
  return it == settings.term_sources.end() ? "built-in default" : it->second;
}

}  // namespace

int dry_run(const RunSettings& settings, const std::string& executable) {
  const std::string& currency = settings.loaded.policy.currency;
  const RunIdentity& id = settings.identity;
  RunStart start = make_run_start(settings);
  std::vector<std::string> out;
  auto row = [&](const std::string& name, const std::string& value, const std::string& from) {
    std::string line =
        "  " + name + std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') + value;
    if (!from.empty()) line += "  (" + from + ")";
    out.push_back(line);
  };
  out.push_back("dry run: nothing is started and nothing is written to the ledger");
  out.push_back("terms:");
  auto named = [&](const char* name, const std::string& value) {
    row(name, value.empty() ? "-" : value, value.empty() ? "" : term(settings, name));
  };
  named("team", id.team);
  named("experiment", id.experiment);
  named("project", id.project);
  row("rate", format_money(settings.rate_per_hour, currency) + "/h", settings.rate_source);
  row("budget", settings.budget ? format_money(*settings.budget, currency) : "none",
      settings.budget ? term(settings, "budget") : "");
  row("grace", format_duration(settings.on_trip.grace), term(settings, "grace"));
  row("kill-after", format_duration(settings.on_trip.kill_after), "");
  row("mode", to_string(settings.mode), "");
  row("policy",
      settings.loaded.sources.empty() ? "none (built-in defaults)"
                                      : join(settings.loaded.sources, " + "),
      "");
  row("ledger", redact_password(settings.ledger_url), "");
  row("command", join(id.command, " "), executable);

  out.push_back("estimate:");
  out.push_back("  shutdown reserve " + format_money(start.reserve, currency) + ", first claim " +
                format_money(start.want, currency));
  std::optional<Money> run_budget = settings.budget;

  std::unique_ptr<Ledger> ledger;
  if (ledger_exists(settings.ledger_url)) {
    LedgerOptions options;
    if (settings.loaded.locked_policy) {
      options.budget_caps = budget_rules_of(*settings.loaded.locked_policy);
    }
    options.postgres_password =
        ledger_password_as_installed(settings.loaded.policy, settings.loaded.locked_policy);
    ledger = open_ledger_as_installed(settings.ledger_url, options);
  }
  std::vector<std::string> budget_lines;
  Verdict verdict = budgets_verdict(settings, start, ledger.get(), run_budget, budget_lines);
  if (run_budget) {
    double hours = static_cast<double>(run_budget->micros) / settings.rate_per_hour.micros;
    out.push_back("  the run budget " + format_money(*run_budget, currency) + " lasts " +
                  format_duration(std::chrono::duration_cast<Nanos>(
                      std::chrono::duration<double, std::ratio<3600>>(hours))) +
                  " at " + format_money(settings.rate_per_hour, currency) + "/h");
  }
  out.insert(out.end(), budget_lines.begin(), budget_lines.end());
  if (verdict.admitted && run_budget && *run_budget <= start.reserve) {
    verdict = {false, "the shutdown reserve " + format_money(start.reserve, currency) +
                          " does not fit in the run budget " + format_money(*run_budget, currency) +
                          " (lower --grace or raise --budget)"};
  }
  if (verdict.admitted && ledger) {
    for (const StopOrder& order : ledger->active_stop_orders()) {
      if (in_scope(start, order.scope)) {
        verdict = {false, "a stop order for " + to_string(order.scope) + " by " + order.placed_by +
                              ": " + order.reason};
        break;
      }
    }
  }
  if (verdict.admitted && ledger && !settings.clear_crash_loop) {
    CrashLoopVerdict loop = crash_loop_verdict(settings, start, *ledger, settings.retry_backoff);
    if (loop.refuse) verdict = {false, loop.message};
  }
  if (!ledger) out.push_back("  the ledger does not exist yet: no history, nothing spent");
  out.push_back(verdict.admitted ? "verdict: would be admitted"
                                 : "verdict: would be refused (120): " + verdict.why);
  for (const std::string& line : out) std::cout << escape_for_terminal(line) << "\n";
  std::cout.flush();
  return verdict.admitted ? 0 : to_int(ExitCode::refused);
}

}  // namespace spendcap
