#include "spendcap/cli/admin.hpp"

#include <sys/time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>

#include "spendcap/base/json_text.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/cli/ledger_group.hpp"
#include "spendcap/ledger/backends.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/policy/keys.hpp"
#include "spendcap/policy/layers.hpp"
#include "spendcap/supervise/run_env.hpp"

namespace spendcap {

namespace {

// How long `ps` keeps listing a finished run that overran its ceiling.
constexpr int kOverrunsShownDays = 7;

}  // namespace

// The ledger `--ledger`, or else the policy's, names. While setgid the locked policy must be in
// force, and --ledger is checked against it like any flag (it may not name another ledger).
std::unique_ptr<Ledger> open_chosen_ledger(const LedgerChoice& choice, std::string* currency) {
  refuse_redirecting_environment(current_environment());
  LedgerOptions options;
  std::string url;
  if (choice.ledger && !installed_setgid()) {
    url = *choice.ledger;
  } else {
    nlohmann::json flags = nlohmann::json::object();
    if (choice.ledger) flags["ledger"] = *choice.ledger;
    LoadedPolicy loaded =
        load_policy(PolicySearch::from_environment(choice.policy), PolicyLayer{"--ledger", flags});
    require_locked_policy_when_setgid(loaded.locked, choice.ledger.value_or(""));
    url = loaded.policy.ledger ? *loaded.policy.ledger : default_ledger_url();
    if (currency) *currency = loaded.policy.currency;
    if (loaded.locked_policy) options.budget_caps = budget_rules_of(*loaded.locked_policy);
  }
  std::unique_ptr<Ledger> ledger = open_ledger_as_installed(url, options);
  replay_spool(*ledger);
  return ledger;
}

namespace {

double wall_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

std::string utc_date(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
}

std::string age(double seconds) {
  if (seconds < 0) seconds = 0;
  return format_duration(std::chrono::seconds(static_cast<std::int64_t>(seconds)));
}

// Prints rows as left-aligned columns, each cell escaped: names come from other users' rows.
void print_table(std::vector<std::vector<std::string>> rows) {
  for (auto& row : rows) {
    for (std::string& cell : row) cell = escape_for_terminal(cell);
  }
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string percent_used(const BudgetView& view) {
  if (view.rule.amount.micros <= 0) return "-";
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%",
                100.0 * static_cast<double>((view.spent + view.held).micros) /
                    static_cast<double>(view.rule.amount.micros));
  return text;
}

std::optional<Scope> requested_scope(const StopRequest& request) {
  std::vector<Scope> scopes;
  if (request.team) scopes.push_back({ScopeKind::team, *request.team});
  if (request.experiment) scopes.push_back({ScopeKind::experiment, *request.experiment});
  if (request.project) scopes.push_back({ScopeKind::project, *request.project});
  if (request.user) scopes.push_back({ScopeKind::user, *request.user});
  if (request.run) scopes.push_back({ScopeKind::run, *request.run});
  if (scopes.size() != 1) return std::nullopt;
  return scopes.front();
}

}  // namespace

int policy_check_command(const std::vector<std::string>& files) {
  int status = 0;
  for (const std::string& file : files) {
    try {
      nlohmann::json document = read_policy_file(file);
      Policy policy = parse_policy(document, file);
      size_t budgets = 0;
      for (const auto& [kind, named] : policy.budgets) budgets += named.size();
      std::cout << file << ": ok (" << policy.gpu_rates.size() << " GPU types, "
                << policy.instance_rates.size() << " instance types, " << budgets << " budgets"
                << (policy.locked ? ", locked" : "") << ")\n";
      for (const std::string& key : keys_without_effect(document)) {
        std::cout << file << ": warning: " << escape_for_terminal(key) << "\n";
      }
    } catch (const Error& error) {
      std::cerr << "spendcap: " << escape_for_terminal(format_error(error)) << "\n";
      for (const std::string& detail : error.details) {
        std::cerr << "  " << escape_for_terminal(detail) << "\n";
      }
      status = to_int(ExitCode::internal);
    }
  }
  return status;
}

// Spend above ceilings is never hidden: it is in `spent`, and named.
static std::string spent_text(const BudgetView& view, const std::string& currency) {
  std::string text = format_money(view.spent, currency);
  if (view.overrun > Money{}) text += " (overrun " + format_money(view.overrun, currency) + ")";
  return text;
}

int budgets_command(const LedgerChoice& choice, bool json) {
  std::string currency = "USD";
  auto ledger = open_chosen_ledger(choice, &currency);
  std::vector<BudgetView> views = ledger->budgets();
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
           {"running", money_to_json(view.live)},
           {"held", money_to_json(view.held)},
           {"overrun", money_to_json(view.overrun)},
           {"remaining", money_to_json(view.remaining())}});
    }
    std::cout << dump_json(out, 2) << "\n";
    return 0;
  }
  if (views.empty()) {
    std::cout << "no budgets in " << ledger->url()
              << " (define them in the policy; the ledger's owner applies them with `spendcap "
                 "budgets apply POLICY`)\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"SCOPE", "PERIOD", "SINCE", "BUDGET", "SPENT", "RUNNING", "HELD", "REMAINING", "USED"}};
  for (const BudgetView& view : views) {
    rows.push_back({to_string(view.rule.scope), to_string(view.rule.period),
                    utc_date(view.period_start), format_money(view.rule.amount, currency),
                    spent_text(view, currency), format_money(view.live, currency),
                    format_money(view.held, currency), format_money(view.remaining(), currency),
                    percent_used(view)});
  }
  print_table(rows);
  return 0;
}

int budgets_apply_command(const LedgerChoice& choice, const std::string& policy_file) {
  Policy policy = parse_policy(read_policy_file(policy_file), policy_file);
  LedgerChoice target = choice;
  if (!target.ledger && policy.ledger) target.ledger = policy.ledger;
  auto ledger = open_chosen_ledger(target, nullptr);
  std::vector<BudgetRule> rules = budget_rules_of(policy);
  ledger->apply_budgets(rules, true);
  std::cout << "applied " << rules.size() << " budgets from " << policy_file << " to "
            << ledger->url() << "\n";
  return 0;
}

int ps_command(const LedgerChoice& choice, bool json) {
  std::string currency = "USD";
  auto ledger = open_chosen_ledger(choice, &currency);
  std::vector<RunView> runs = ledger->active_runs();
  // Overruns are never hidden: finished, but listed here for a week after they started.
  std::vector<RunView> overruns = ledger->overrun_runs(kOverrunsShownDays);
  double now = wall_now();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    std::vector<RunView> listed = runs;
    listed.insert(listed.end(), overruns.begin(), overruns.end());
    for (const RunView& run : listed) {
      out.push_back({{"id", run.id},
                     {"host", run.host},
                     {"pid", run.pid},
                     {"team", run.team},
                     {"experiment", run.experiment},
                     {"project", run.project},
                     {"user", run.user},
                     {"job_key", run.job_key},
                     {"status", to_string(run.status)},
                     {"overrun", run.overrun},
                     {"mode", to_string(run.mode)},
                     {"spend", money_to_json(run.spend)},
                     {"ceiling", money_to_json(run.ceiling)},
                     {"rate_per_hour", money_to_json(run.rate_per_hour)},
                     {"started_at", run.started_at},
                     {"heartbeat_at", run.heartbeat_at},
                     {"age_seconds", now - run.started_at}});
    }
    std::cout << dump_json(out, 2) << "\n";
    return 0;
  }
  if (runs.empty() && overruns.empty()) {
    std::cout << "no running or lost runs in " << ledger->url() << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"RUN", "HOST", "PID", "TEAM", "EXPERIMENT", "STATUS", "SPEND", "CEILING", "BURN/H", "AGE"}};
  auto add_row = [&](const RunView& run, const std::string& status) {
    rows.push_back({run.id.substr(0, 8), run.host, std::to_string(run.pid), run.team,
                    run.experiment, status, format_money(run.spend, currency),
                    format_money(run.ceiling, currency), format_money(run.rate_per_hour, currency),
                    age(now - run.started_at)});
  };
  for (const RunView& run : runs) {
    std::string status = to_string(run.status);
    if (run.status == RunStatus::lost) status += " (silent " + age(now - run.heartbeat_at) + ")";
    add_row(run, status);
  }
  for (const RunView& run : overruns) add_row(run, to_string(run.status) + " (OVERRUN)");
  print_table(rows);
  return 0;
}

int stop_command(const LedgerChoice& choice, const StopRequest& request) {
  auto scope = requested_scope(request);
  if (!scope) {
    throw Error("stop", "give exactly one of --team, --experiment, --project, --user, --run",
                "e.g. spendcap stop --team vision --reason 'budget review'");
  }
  require_printable_name(scope->name, "--" + to_string(scope->kind));
  auto ledger = open_chosen_ledger(choice, nullptr);
  std::string flag = "--" + to_string(scope->kind) + " " + scope->name;
  if (request.clear) {
    // A stop order is the owner's kill switch: only the ledger's owner, or whoever placed the
    // order, may lift it.
    if (!ledger->caller_is_owner()) {
      std::string me = user_name() + "@";
      for (const StopOrder& order : ledger->active_stop_orders()) {
        if (order.scope == *scope && order.placed_by.rfind(me, 0) != 0) {
          throw Error("stop --clear " + flag,
                      "the order was placed by " + order.placed_by + ", not by " + user_name(),
                      "ask them, or the ledger's owner, to clear it");
        }
      }
    }
    int cleared = ledger->clear_stop_orders(*scope);
    std::cout << "cleared " << cleared << " stop order" << (cleared == 1 ? "" : "s") << " on "
              << escape_for_terminal(to_string(*scope)) << "\n";
    return 0;
  }
  ledger->place_stop_order(*scope, request.reason, user_name() + "@" + host_name());
  int affected = 0;
  for (const RunView& run : ledger->active_runs()) affected += in_scope(run, *scope);
  std::cout << "stop order placed on " << escape_for_terminal(to_string(*scope)) << ": " << affected
            << " running wrapper" << (affected == 1 ? "" : "s")
            << " in scope stop within one sync interval";
  if (scope->kind != ScopeKind::run) {
    std::cout << "; new runs are refused until `spendcap stop --clear " << escape_for_terminal(flag)
              << "`";
  }
  std::cout << "\n";
  return 0;
}

}  // namespace spendcap

namespace spendcap {

std::unique_ptr<Ledger> open_ledger_for(const LedgerChoice& choice) {
  return open_chosen_ledger(choice, nullptr);
}

namespace {

// ▁▂▃▄▅▆▇█ for 0..1 of `top`; a minute not measured is a space.
std::string sparkline(const std::vector<std::optional<double>>& values, double top) {
  static const char* const kBars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::string line;
  for (const auto& value : values) {
    if (!value || top <= 0) {
      line += " ";
      continue;
    }
    int level = static_cast<int>(std::lround(std::clamp(*value / top, 0.0, 1.0) * 7));
    line += kBars[level];
  }
  return line;
}

std::string fixed_text(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

}  // namespace

int show_command(const LedgerChoice& choice, const std::string& run_id) {
  std::string currency = "USD";
  auto ledger = open_chosen_ledger(choice, &currency);
  auto run = ledger->find_run(run_id);
  if (!run) {
    throw Error("run " + run_id, "is not in the ledger " + ledger->url(),
                "give the run's full id, as `spendcap ps --json` and --status-file show it",
                ExitCode::internal);
  }
  std::cout << "run " << run->id << ": " << to_string(run->status)
            << (run->reason.empty() ? "" : " (" + run->reason + ")") << "\n";
  std::cout << "  spent " << format_money(run->spend, currency) << " at "
            << format_money(run->rate_per_hour, currency) << "/h";
  if (run->budget) std::cout << ", budget " << format_money(*run->budget, currency);
  std::cout << "\n";
  if (!run->gpu) {
    std::cout << "  GPU: no record (the run did not finish with GPU measurement)\n";
    return 0;
  }
  const RunGpu& g = *run->gpu;
  if (!g.not_measured.empty()) {
    std::cout << "  GPU: not measured (" << g.not_measured << ")\n";
    return 0;
  }
  std::cout << "  GPU: " << g.devices << (g.devices == 1 ? " device, " : " devices, ")
            << fixed_text(g.allocated_seconds, 1) << " GPU-seconds allocated";
  if (g.busy_seconds) {
    std::cout << ", " << fixed_text(*g.busy_seconds, 1) << " busy ("
              << fixed_text(*g.mean_utilisation() * 100, 1) << "% mean utilisation)";
  } else {
    std::cout << ", busy time not measured";
  }
  if (g.idle_spend) std::cout << ", idle spend " << format_money(*g.idle_spend, currency);
  std::cout << "\n";
  if (g.energy_kwh) {
    std::cout << "  energy " << fixed_text(*g.energy_kwh, 6) << " kWh";
    if (g.co2_kg) std::cout << ", " << fixed_text(*g.co2_kg, 6) << " kg CO2";
    if (g.energy_cost)
      std::cout << ", " << format_money(*g.energy_cost, "USD") << " (not in spend)";
    std::cout << "\n";
  } else {
    std::cout << "  energy not measured\n";
  }
  if (!g.sources.empty()) std::cout << "  measured by: " << g.sources << "\n";
  if (!g.timeline.empty()) {
    std::vector<std::optional<double>> utilisation, watts;
    double top_watts = 0;
    for (const RunGpuPoint& p : g.timeline) {
      utilisation.push_back(p.utilisation);
      watts.push_back(p.watts);
      if (p.watts) top_watts = std::max(top_watts, *p.watts);
    }
    std::cout << "  utilisation per minute (0-100%): " << sparkline(utilisation, 1.0) << "\n";
    if (top_watts > 0) {
      std::cout << "  power per minute (0-" << fixed_text(top_watts, 0)
                << " W):        " << sparkline(watts, top_watts) << "\n";
    }
    // Billing is on the allocated rate: the burn is flat, and its idle part is the gap above.
    std::cout << "  burn " << format_money(run->rate_per_hour, currency)
              << "/h throughout (allocated billing)\n";
  }
  return 0;
}

}  // namespace spendcap
