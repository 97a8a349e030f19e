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

namespace {

// How long `ps` keeps listing a finished run that overran its ceiling, or a lost run charged its
// ceiling.
constexpr int kOverrunsShownDays = 7;

}  // namespace

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
    LoadedPolicy loaded = (choice.reading ? load_policy_for_reading : load_policy)(
        PolicySearch::from_environment(choice.policy), PolicyLayer{"--ledger", flags});
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

namespace {

double wall_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6;
}

std::string utc_date(double unix_seconds) {
  if (unix_seconds <= 0) return "-";
  return format_utc(unix_seconds, UtcForm::date);
}

std::string age(double seconds) {
  if (seconds < 0) seconds = 0;
  return format_duration(std::chrono::seconds(static_cast<std::int64_t>(seconds)));
}

// What a budget has spent: finished runs, and running runs so far (their last heartbeats).
Money used(const BudgetView& view) {
  return view.spent + view.live;
}

std::string percent_used(const BudgetView& view) {
  if (view.rule.amount.micros <= 0) return "-";
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%",
                100.0 * static_cast<double>(used(view).micros) /
                    static_cast<double>(view.rule.amount.micros));
  return text;
}

// A run's spend as `ps` shows it, which never goes down from one look to the next (issue 19). A
// running run's, or a silent one's not yet reconciled (it may still be spending), is the most it
// can have spent by now: its allocated rate since it was admitted, never below its last
// heartbeat's nor above its ceiling, where it trips. Extrapolating from the last heartbeat
// instead fell back at each heartbeat by that heartbeat's latency, and to the last report once
// the run went silent ($0.2353 running, then $0.2000 lost). A reconciled lost run's is its
// charge, the ceiling; a finished run's, its final spend.
Money live_spend(const RunView& run, double now) {
  bool unfinished = run.status == RunStatus::running ||
                    (run.status == RunStatus::lost && !run.reconciled && !run.finished_at);
  if (!unfinished || now <= run.started_at) return run.spend;
  auto since =
      std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(now - run.started_at));
  Money most = cost_of(run.rate_per_hour, since);
  if (run.ceiling > Money{}) most = std::min(most, run.ceiling);
  return std::max(run.spend, most);
}

// What the ledger holds for a run against its budgets (HELD): an unfinished run's ceiling (a silent
// run's too, until it is charged); nothing once it finished or was charged.
Money held_by(const RunView& run) {
  bool unfinished = run.status == RunStatus::running ||
                    (run.status == RunStatus::lost && !run.reconciled && !run.finished_at);
  return unfinished ? run.ceiling : Money{};
}

// Why a lost run shows what it shows.
std::string lost_status(const RunView& run, double now, const std::string& currency) {
  std::string since = format_utc(run.heartbeat_at, UtcForm::clock_z);
  if (run.reconciled) {
    return "lost: charged the ceiling " + format_money(run.ceiling, currency) +
           " (no heartbeat since " + since + ")";
  }
  return "lost (silent " + age(now - run.heartbeat_at) + "; holds its ceiling " +
         format_money(run.ceiling, currency) + ")";
}

// A run of this host that is paused (Ctrl-Z, SIGTSTP): spendcap itself stopped (Ctrl-Z on a
// terminal stops the job and spendcap), or every process under its guard stopped (SIGTSTP to
// spendcap without a terminal stops the job alone). Read from /proc, so seen on the run's own
// host only; elsewhere it shows as running.
char proc_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ? '\0' : text[paren + 2];
}

std::vector<pid_t> proc_children(pid_t pid) {
  std::vector<pid_t> out;
  std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    std::ifstream in(task.path() / "children");
    pid_t child = 0;
    while (in >> child) out.push_back(child);
  }
  return out;
}

bool paused_here(const RunView& run) {
  if (run.status != RunStatus::running || run.pid <= 0 || run.host != host_name()) return false;
  char own = proc_state(run.pid);
  if (own == 'T') return true;
  if (own == '\0' || own == 'Z') return false;
  // spendcap -> its guard -> the job's processes: all of them stopped.
  int stopped = 0;
  for (pid_t guard : proc_children(run.pid)) {
    std::vector<pid_t> pending = proc_children(guard);
    for (std::size_t i = 0; i < pending.size() && i < 10000; ++i) {
      char state = proc_state(pending[i]);
      if (state == 'Z' || state == '\0') continue;
      if (state != 'T' && state != 't') return false;
      ++stopped;
      for (pid_t child : proc_children(pending[i])) pending.push_back(child);
    }
  }
  return stopped > 0;
}

// squeue's view of the budget a run is in: of its budgeted scopes, the one with the least left
// (the one that binds), as what was used of its amount ("team:vision 45% of $10.00"): used as
// `budgets` says it, finished runs' spend and running runs' spend so far (never the ceilings they
// hold: HELD shows those). The run's own budget (--budget, a max_run) instead when it is the
// lower: its spend of that. "-" when the run has neither.
std::string budget_share(const RunView& run, const std::vector<BudgetView>& views,
                         const std::string& currency, double now) {
  const BudgetView* binding = nullptr;
  for (const Scope& scope : named_scopes(run)) {
    for (const BudgetView& view : views) {
      if (view.rule.scope == scope && (!binding || view.remaining() < binding->remaining())) {
        binding = &view;
      }
    }
  }
  auto percent = [](Money part, Money whole) {
    char text[16];
    std::snprintf(text, sizeof text, "%.0f%%",
                  100.0 * static_cast<double>(part.micros) / static_cast<double>(whole.micros));
    return std::string(text);
  };
  // The run's own --budget binds when it leaves the run less room than the scope's budget does
  // (the scope's remaining, plus the ceiling this run holds in it): a $5 run in a team of $100
  // shows its own $5 (issue 38: ps showed the team's, which never stops it first).
  bool own_binds = run.budget && *run.budget > Money{} &&
                   (!binding || *run.budget < binding->remaining() + held_by(run));
  if (binding && binding->rule.amount > Money{} && !own_binds) {
    return to_string(binding->rule.scope) + " " + percent(used(*binding), binding->rule.amount) +
           " of " + format_money(binding->rule.amount, currency);
  }
  if (own_binds) {
    return "run " + percent(live_spend(run, now), *run.budget) + " of " +
           format_money(*run.budget, currency);
  }
  return "-";
}

std::optional<Scope> requested_scope(const StopRequest& request) {
  std::vector<Scope> scopes;
  if (request.team) scopes.push_back({ScopeKind::team, *request.team});
  if (request.experiment) scopes.push_back({ScopeKind::experiment, *request.experiment});
  if (request.project) scopes.push_back({ScopeKind::project, *request.project});
  if (request.user) scopes.push_back({ScopeKind::user, *request.user});
  if (request.run) scopes.push_back({ScopeKind::run, *request.run});
  if (request.job) scopes.push_back({ScopeKind::job, *request.job});
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
      if (policy.locked) {
        if (auto errors = locked_keys_without_effect(document); !errors.empty()) {
          throw PolicyError(file, std::move(errors));
        }
      }
      size_t budgets = 0;
      for (const auto& [kind, named] : policy.budgets) budgets += named.size();
      std::cout << file << ": ok (" << policy.gpu_rates.size() << " GPU types, "
                << policy.instance_rates.size() << " instance types, " << budgets << " budgets"
                << (policy.locked ? ", locked" : "") << ")\n";
      for (const std::string& key : keys_without_effect(document)) {
        std::cout << file << ": warning: " << escape_for_terminal(key) << "\n";
      }
    } catch (const Error& error) {
      // A policy's own errors are listed below it; its hint (run `spendcap policy check`) is
      // what the user is doing already.
      bool listed = dynamic_cast<const PolicyError*>(&error) != nullptr;
      std::cerr << "spendcap: "
                << escape_for_terminal(listed ? format_error(Error(error.subject(), error.why()))
                                              : format_error(error))
                << "\n";
      for (const std::string& detail : error.details) {
        std::cerr << "  " << escape_for_terminal(detail) << "\n";
      }
      status = to_int(ExitCode::internal);
    }
  }
  return status;
}

int policy_keys_command() {
  for (const PolicyKey& key : policy_keys()) {
    if (!key.listed) continue;
    std::string line = key.path;
    if (!key.flag.empty()) line += "  (" + key.flag + ")";
    if (!key.no_effect_yet.empty()) line += "  no effect yet: " + key.no_effect_yet;
    std::cout << line << "\n";
  }
  return 0;
}

namespace {
bool same_rule(const BudgetRule& a, const BudgetRule& b) {
  return a.scope == b.scope && a.period == b.period && a.amount == b.amount &&
         a.max_run == b.max_run && a.member_groups == b.member_groups;
}
bool changed_rules(const std::vector<BudgetRule>& before, const std::vector<BudgetRule>& after) {
  return !std::is_permutation(before.begin(), before.end(), after.begin(), after.end(), same_rule);
}
}  // namespace

// Spend above ceilings is never hidden: it is in `spent`, and named.
static std::string used_text(const BudgetView& view, const std::string& currency) {
  std::string text = format_money(used(view), currency);
  if (view.overrun > Money{}) text += " (overrun " + format_money(view.overrun, currency) + ")";
  return text;
}

int budgets_command(const LedgerChoice& choice, bool json) {
  std::string currency = "USD";
  std::vector<BudgetRule> policy_rules;
  auto ledger = open_chosen_ledger(choice, &currency, &policy_rules);
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
           {"held", money_to_json(view.held)},
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
  // still spend up to their ceilings; AVAILABLE is what new runs can be granted.
  std::vector<std::vector<std::string>> rows = {
      {"SCOPE", "PERIOD", "SINCE", "BUDGET", "USED", "USED%", "HELD", "AVAILABLE", "MEMBERS"}};
  for (const BudgetView& view : views) {
    rows.push_back(
        {to_string(view.rule.scope), to_string(view.rule.period), utc_date(view.period_start),
         format_money(view.rule.amount, currency), used_text(view, currency), percent_used(view),
         format_money(view.held, currency), format_money(view.remaining(), currency),
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
  // Reconciled lost runs stay listed with what they are charged, as overruns do.
  std::vector<RunView> charged = ledger->lost_runs(kOverrunsShownDays);
  double now = wall_now();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    std::vector<RunView> listed = runs;
    listed.insert(listed.end(), charged.begin(), charged.end());
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
                     {"node", run.tags.count("node") && !run.job_key.empty()
                                  ? nlohmann::json(run.tags.at("node"))
                                  : nlohmann::json()},
                     {"status", to_string(run.status)},
                     {"reconciled", run.reconciled},
                     {"overrun", run.overrun},
                     {"mode", to_string(run.mode)},
                     {"spend", money_to_json(run.spend)},
                     {"live_spend", money_to_json(live_spend(run, now))},
                     {"ceiling", money_to_json(run.ceiling)},
                     {"held", money_to_json(held_by(run))},
                     {"paused", paused_here(run)},
                     {"rate_per_hour", money_to_json(run.rate_per_hour)},
                     {"started_at", run.started_at},
                     {"heartbeat_at", run.heartbeat_at},
                     {"age_seconds", now - run.started_at}});
    }
    std::cout << plain_json_numbers(dump_json(out, 2)) << "\n";
    return 0;
  }
  if (runs.empty() && overruns.empty() && charged.empty()) {
    std::cout << "no running or lost runs in " << ledger->url() << "\n";
    return 0;
  }
  std::vector<BudgetView> budget_views = ledger->budgets();
  std::vector<std::vector<std::string>> rows = {{"RUN", "USER", "HOST", "PID", "TEAM", "EXPERIMENT",
                                                 "STATUS", "SPEND", "HELD", "BURN/H", "AGE",
                                                 "BUDGET USED"}};
  auto add_row = [&](const RunView& run, const std::string& status) {
    rows.push_back({run.id.substr(0, 8), run.user.empty() ? "-" : run.user, run.host,
                    std::to_string(run.pid), run.team, run.experiment, status,
                    format_money(live_spend(run, now), currency),
                    format_money(held_by(run), currency), format_money(run.rate_per_hour, currency),
                    age(now - run.started_at), budget_share(run, budget_views, currency, now)});
  };
  auto status_of = [&](const RunView& run) {
    if (run.status == RunStatus::lost) return lost_status(run, now, currency);
    return paused_here(run) ? std::string("paused") : to_string(run.status);
  };
  // A multi-node run (--run-id: its id is its nodes' job key, each row tagged with its node) is
  // one row, its nodes under it (issue 23).
  auto node_of = [](const RunView& run) -> const std::string* {
    auto node = run.tags.find("node");
    return node == run.tags.end() || run.job_key.empty() ? nullptr : &node->second;
  };
  std::map<std::string, std::vector<const RunView*>> nodes_of;
  for (const RunView& run : runs) {
    if (node_of(run)) nodes_of[run.job_key].push_back(&run);
  }
  for (const RunView& run : runs) {
    if (!node_of(run)) {
      add_row(run, status_of(run));
      continue;
    }
    auto group = nodes_of.find(run.job_key);
    if (group == nodes_of.end()) continue;  // shown already, with its first node
    Money spend, ceiling, burn;
    double started = now;
    int lost = 0;
    for (const RunView* node : group->second) {
      spend += live_spend(*node, now);
      ceiling += held_by(*node);
      burn += node->rate_per_hour;
      started = std::min(started, node->started_at);
      lost += node->status == RunStatus::lost;
    }
    std::size_t count = group->second.size();
    rows.push_back({run.job_key, run.user.empty() ? "-" : run.user,
                    std::to_string(count) + (count == 1 ? " node" : " nodes"), "", run.team,
                    run.experiment,
                    lost ? "running (" + std::to_string(lost) + " lost)" : "running",
                    format_money(spend, currency), format_money(ceiling, currency),
                    format_money(burn, currency), age(now - started),
                    budget_share(run, budget_views, currency, now)});
    for (const RunView* node : group->second) {
      rows.push_back({"  " + *node_of(*node), "", node->host, std::to_string(node->pid), "", "",
                      status_of(*node), format_money(live_spend(*node, now), currency),
                      format_money(held_by(*node), currency),
                      format_money(node->rate_per_hour, currency), age(now - node->started_at),
                      ""});
    }
    nodes_of.erase(group);
  }
  for (const RunView& run : charged) add_row(run, lost_status(run, now, currency));
  for (const RunView& run : overruns) add_row(run, to_string(run.status) + " (OVERRUN)");
  print_table(rows);
  return 0;
}

namespace {

// `stop --run PREFIX`: the one running run whose id starts with PREFIX (as `ps` shows them, 8
// characters), or the one active order's run for --clear. Nothing matching, or several: 125, and
// no order is placed.
std::string resolve_run_prefix(Ledger& ledger, const std::string& prefix, bool clear) {
  std::vector<std::string> ids;
  if (clear) {
    for (const StopOrder& order : ledger.active_stop_orders()) {
      if (order.scope.kind == ScopeKind::run && order.scope.name.starts_with(prefix)) {
        ids.push_back(order.scope.name);
      }
    }
  } else {
    for (const RunView& run : ledger.active_runs()) {
      if (run.id.starts_with(prefix)) ids.push_back(run.id);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (ids.size() == 1) return ids.front();
  if (ids.size() > 1) {
    Error error("--run " + prefix, "matches " + std::to_string(ids.size()) + " runs",
                "give more of the id");
    error.details = ids;
    throw error;
  }
  if (clear) {
    throw Error("--run " + prefix, "no active stop order on a run with this id",
                "see `spendcap stop --list`");
  }
  std::optional<RunView> finished = ledger.find_run(prefix);
  if (finished) {
    throw Error("--run " + prefix, "the run is not running (" + to_string(finished->status) + ")",
                "nothing to stop");
  }
  throw Error("--run " + prefix, "no running run has an id starting with this",
              "see `spendcap ps` for the running runs' ids");
}

int list_stop_orders(Ledger& ledger) {
  std::vector<StopOrder> orders = ledger.active_stop_orders();
  // An order on one run is done once that run has finished: it can stop nothing more, so it is
  // not listed (it still refuses a new run given that id, which a fresh UUID never is).
  std::erase_if(orders, [&](const StopOrder& order) {
    if (order.scope.kind != ScopeKind::run) return false;
    std::optional<RunView> run = ledger.find_run(order.scope.name);
    return run && run->status != RunStatus::running && run->status != RunStatus::lost;
  });
  if (orders.empty()) {
    std::cout << "no active stop orders in " << ledger.url() << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"SCOPE", "PLACED BY", "AGE", "REASON"}};
  double now = wall_now();
  for (const StopOrder& order : orders) {
    Scope shown = order.scope;
    if (shown.kind == ScopeKind::run) shown.name = shown.name.substr(0, 8);
    rows.push_back({to_string(shown), order.placed_by, age(now - order.placed_at),
                    order.reason.empty() ? "-" : order.reason});
  }
  print_table(rows);
  return 0;
}

}  // namespace

int stop_command(const LedgerChoice& choice, const StopRequest& request) {
  if (request.list) {
    if (requested_scope(request) || request.clear) {
      throw Error("stop --list", "lists the active stop orders: give no scope and no --clear");
    }
    auto ledger = open_chosen_ledger(choice, nullptr);
    return list_stop_orders(*ledger);
  }
  auto scope = requested_scope(request);
  if (!scope) {
    throw Error("stop", "give exactly one of --team, --experiment, --project, --user, --run, --job",
                "e.g. spendcap stop --team vision --reason 'budget review'");
  }
  require_printable_name(scope->name, "--" + to_string(scope->kind));
  auto ledger = open_chosen_ledger(choice, nullptr);
  if (scope->kind == ScopeKind::run) {
    scope->name = resolve_run_prefix(*ledger, scope->name, request.clear);
  }
  // Who may place and clear orders is the ledger's to check (ledger/stop_rule.hpp), in the
  // transaction that writes them.
  std::string flag = "--" + to_string(scope->kind) + " " + scope->name;
  if (request.clear) {
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

namespace {

nlohmann::json optional_json(const auto& value) {
  return value ? nlohmann::json(*value) : nlohmann::json();
}
nlohmann::json optional_money_json(const std::optional<Money>& value) {
  return value ? nlohmann::json(money_to_json(*value)) : nlohmann::json();
}
nlohmann::json text_or_null(const std::string& text) {
  return text.empty() ? nlohmann::json() : nlohmann::json(text);
}

double run_duration(const RunView& run, double now) {
  return std::max(0.0, run.finished_at.value_or(now) - run.started_at);
}

// The command as one line: a word with spaces, quotes or shell operators in single quotes (glob
// characters are left as they are: "***" is the redaction's mark, command_redaction.hpp).
std::string command_text(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& word : argv) {
    bool plain =
        !word.empty() && word.find_first_of(" \t\n'\"\\$`(){}<>|&;#!") == std::string::npos;
    std::string quoted = word;
    if (!plain) {
      quoted = "'";
      for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      quoted += "'";
    }
    text += (text.empty() ? "" : " ") + quoted;
  }
  return text;
}

std::string seconds_text(double seconds) {
  return fixed_text(seconds, 1) + "s";
}

// The budget as recorded at admission (or, for a run recorded before, derived from the budgets
// now: said so), and where it came from.
struct ShowBudget {
  std::optional<Money> amount;
  std::string source;  // "" when the run has no budget of its own and nothing was recorded
  bool recorded = false;
};
ShowBudget show_budget(const RunView& run, const std::vector<BudgetRule>& rules) {
  if (!run.budget_source.empty()) {
    return {run.run_budget, run.budget_source == "none" ? "" : run.budget_source, true};
  }
  ShownBudget derived = run_budget_of(run, rules);
  return {derived.amount, derived.source, false};
}

nlohmann::json show_json(const RunView& run, const std::vector<BudgetRule>& rules,
                         const std::string& currency, double now) {
  ShowBudget budget = show_budget(run, rules);
  nlohmann::json gpu = nullptr;
  if (run.gpu) {
    const RunGpu& g = *run.gpu;
    gpu = {{"measured", g.not_measured.empty()},
           {"not_measured", text_or_null(g.not_measured)},
           {"devices", g.devices},
           {"allocated_gpu_seconds", g.allocated_seconds},
           {"busy_gpu_seconds", optional_json(g.busy_seconds)},
           {"mean_utilisation", optional_json(g.mean_utilisation())},
           {"idle_spend", optional_money_json(g.idle_spend)},
           {"energy_kwh", optional_json(g.energy_kwh)},
           {"co2_kg", optional_json(g.co2_kg)},
           {"energy_cost_usd", optional_money_json(g.energy_cost)},
           {"sources", text_or_null(g.sources)}};
  }
  nlohmann::json progress = nullptr;
  if (run.last_progress) {
    progress = {{"step", optional_json(run.last_progress->step)},
                {"total_steps", optional_json(run.last_progress->total_steps)},
                {"line", run.last_progress->line}};
  }
  nlohmann::json metric = nullptr;
  if (run.metric_name) {
    metric = {{"name", *run.metric_name}, {"value", optional_json(run.metric_value)}};
  }
  nlohmann::json checkpoint = nullptr;
  if (run.checkpoint) {
    const RunCheckpoint& c = *run.checkpoint;
    checkpoint = {{"signal", c.signal == "none" ? nlohmann::json() : nlohmann::json(c.signal)},
                  {"signalled_processes", c.signalled},
                  {"signalled_after_seconds", std::round(c.signal_seconds * 1000) / 1000},
                  {"written", c.written_seconds.has_value()},
                  {"written_after_seconds",
                   c.written_seconds ? nlohmann::json(std::round(*c.written_seconds * 1000) / 1000)
                                     : nlohmann::json()}};
  }
  return {{"id", run.id},
          {"status", to_string(run.status)},
          {"reason", run.reason},
          {"user", run.user},
          {"uid", optional_json(run.uid)},
          {"team", run.team},
          {"experiment", run.experiment},
          {"project", run.project},
          {"job_key", text_or_null(run.job_key)},
          {"tags", run.tags},
          {"command", run.command.empty() ? nlohmann::json() : nlohmann::json(run.command)},
          {"working_directory", text_or_null(run.cwd)},
          {"host", run.host},
          {"pid", run.pid},
          {"mode", to_string(run.mode)},
          {"started_at", iso_time(run.started_at)},
          {"finished_at",
           run.finished_at ? nlohmann::json(iso_time(*run.finished_at)) : nlohmann::json()},
          {"duration_seconds", std::round(run_duration(run, now) * 1000) / 1000},
          {"exit_code", optional_json(run.exit_code)},
          {"currency", currency},
          {"spend", money_to_json(run.spend)},
          {"rate_per_hour", money_to_json(run.rate_per_hour)},
          {"pricing", run.pricing ? nlohmann::json(to_string(*run.pricing)) : nlohmann::json()},
          {"budget", optional_money_json(budget.amount)},
          {"budget_source", text_or_null(budget.source)},
          {"budget_recorded", budget.recorded},
          {"ceiling", money_to_json(run.ceiling)},
          {"overrun", run.overrun},
          {"progress", progress},
          {"metric", metric},
          {"checkpoint", checkpoint},
          {"gpu", gpu}};
}

// show's lines: "  label:      value", the value wrapped under itself so that no line is wider
// than kShowColumns (a command or a directory can be long).
constexpr std::size_t kShowColumns = 100;
constexpr std::size_t kShowLabel = 15;  // "  " + the label and its padding

std::size_t columns_of(std::string_view text) {
  std::size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

// `text` cut into pieces of at most `width` columns, at a space where there is one.
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string_view rest = text;
  while (columns_of(rest) > width) {
    std::size_t cut = 0, columns = 0;
    while (cut < rest.size() && columns < width) {
      ++cut;
      while (cut < rest.size() && (static_cast<unsigned char>(rest[cut]) & 0xC0) == 0x80) ++cut;
      ++columns;
    }
    std::size_t space = rest.substr(0, cut + 1).rfind(' ');
    if (space != std::string_view::npos && space > 0) cut = space;
    lines.emplace_back(rest.substr(0, cut));
    rest.remove_prefix(cut);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  }
  if (!rest.empty() || lines.empty()) lines.emplace_back(rest);
  return lines;
}

void print_field(const std::string& name, const std::string& value) {
  std::string padded = "  " + name + ":";
  padded.resize(std::max<std::size_t>(padded.size() + 1, kShowLabel), ' ');
  std::vector<std::string> lines = wrap(escape_for_terminal(value), kShowColumns - padded.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::cout << (i ? std::string(padded.size(), ' ') : padded) << lines[i] << "\n";
  }
}

std::string checkpoint_text(const std::optional<RunCheckpoint>& checkpoint, bool running) {
  if (!checkpoint) {
    return running ? "-" : "- (no checkpoint signal: spendcap did not stop the run)";
  }
  const RunCheckpoint& c = *checkpoint;
  std::string at = " after " + seconds_text(c.signal_seconds);
  if (c.signal == "none") return "none sent (the run has no checkpoint signal); stopped" + at;
  if (c.signalled == 0) return c.signal + " caught by no process: grace skipped; stopped" + at;
  std::string text = c.signal + " sent to " + std::to_string(c.signalled) +
                     (c.signalled == 1 ? " process" : " processes") + at;
  if (c.written_seconds) {
    return text + "; checkpoint written " +
           seconds_text(std::max(0.0, *c.written_seconds - c.signal_seconds)) + " later";
  }
  return text + "; no checkpoint written in the grace";
}

}  // namespace

int show_command(const LedgerChoice& choice, const std::string& run_id, bool json) {
  std::string currency = "USD";
  auto ledger = open_chosen_ledger(choice, &currency);
  // Any unique prefix: the 8 characters `ps`, `runs` and the end line print.
  auto run = ledger->find_run(resolve_run_id(*ledger, run_id, "show " + run_id));
  if (!run) throw Error("show " + run_id, "is not in the ledger " + ledger->url());
  double now = wall_now();
  std::vector<BudgetRule> rules = ledger->budget_rules();
  if (json) {
    std::cout << plain_json_numbers(dump_json(show_json(*run, rules, currency, now), 2)) << "\n";
    return 0;
  }
  const auto& field = print_field;
  auto or_dash = [](const std::string& text) { return text.empty() ? std::string("-") : text; };
  bool running = !run->finished_at;
  std::cout << "run " << run->id << ": " << to_string(run->status)
            << (run->reason.empty() ? "" : " (" + escape_for_terminal(run->reason) + ")") << "\n";
  // Who and what for.
  field("user", or_dash(run->user) + (run->uid ? " (uid " + std::to_string(*run->uid) + ")" : ""));
  field("team", or_dash(run->team));
  field("experiment", or_dash(run->experiment));
  field("project", or_dash(run->project));
  std::string tags;
  for (const auto& [key, value] : run->tags) tags += (tags.empty() ? "" : " ") + key + "=" + value;
  field("tags", or_dash(tags));
  field("job", or_dash(run->job_key));
  // What ran where.
  field("command", run->command.empty() ? "-" : command_text(run->command));
  field("directory", or_dash(run->cwd));
  field("host", run->host + " (pid " + std::to_string(run->pid) + ")");
  // When and how it ended.
  field("started", iso_time(run->started_at));
  field("ended", run->finished_at ? iso_time(*run->finished_at) : "- (still running)");
  field("duration",
        format_duration(std::chrono::milliseconds(std::llround(run_duration(*run, now) * 1000))));
  field("exit code", run->exit_code ? std::to_string(*run->exit_code) : "-");
  field("stopped by", run->reason.empty() ? "-" : run->reason);
  field("checkpoint", checkpoint_text(run->checkpoint, running));
  // Money.
  std::string spend = format_money(run->spend, currency) + " at " +
                      format_money(run->rate_per_hour, currency) + "/h" +
                      (run->mode == Mode::warn ? " (warn mode)" : "");
  if (run->overrun)
    spend += " (OVERRUN: above its ceiling " + format_money(run->ceiling, currency) + ")";
  field("spend", spend);
  ShowBudget budget = show_budget(*run, rules);
  std::string from = budget.source.empty() ? ""
                     : budget.recorded     ? " (from " + budget.source + ")"
                                       : " (from " + budget.source + ", as the budgets are now)";
  field("budget", budget.amount ? format_money(*budget.amount, currency) + from
                  : budget.recorded && !budget.source.empty()
                      ? "- (none of its own; held to " + budget.source + ")"
                      : "- (none of its own; team and other budgets still apply)");
  field("pricing", run->pricing ? to_string(*run->pricing) : "- (not recorded)");
  // What the job said.
  std::string progress = "-";
  if (run->last_progress && run->last_progress->step) {
    progress =
        "step " + std::to_string(*run->last_progress->step) +
        (run->last_progress->total_steps ? " of " + std::to_string(*run->last_progress->total_steps)
                                         : "");
  }
  field("progress", progress);
  field("last line", run->last_progress ? or_dash(run->last_progress->line) : "-");
  std::string metric = "-";
  if (run->metric_name) {
    metric =
        *run->metric_name +
        (run->metric_value ? " " + plain_json_numbers(nlohmann::json(*run->metric_value).dump())
                           : "");
  }
  field("metric", metric);
  if (!run->gpu) {
    field("GPU", "- (no record: the run did not finish with GPU measurement)");
    return 0;
  }
  const RunGpu& g = *run->gpu;
  if (!g.not_measured.empty()) {
    field("GPU", "not measured (" + g.not_measured + ")");
    return 0;
  }
  std::string gpu = std::to_string(g.devices) + (g.devices == 1 ? " device, " : " devices, ") +
                    fixed_text(g.allocated_seconds, 1) + " GPU-seconds allocated";
  if (g.busy_seconds) {
    gpu += ", " + fixed_text(*g.busy_seconds, 1) + " busy (" +
           fixed_text(*g.mean_utilisation() * 100, 1) + "% mean utilisation)";
  } else {
    gpu += ", busy time not measured";
  }
  if (g.idle_spend) gpu += ", idle spend " + format_money(*g.idle_spend, currency);
  field("GPU", gpu);
  std::string energy = "not measured";
  if (g.energy_kwh) {
    energy = fixed_text(*g.energy_kwh, 6) + " kWh";
    if (g.co2_kg) energy += ", " + fixed_text(*g.co2_kg, 6) + " kg CO2";
    if (g.energy_cost) energy += ", " + format_money(*g.energy_cost, "USD") + " (not in spend)";
  }
  field("energy", energy);
  field("measured by", or_dash(g.sources));
  if (!g.timeline.empty()) {
    std::vector<std::optional<double>> utilisation, watts;
    double top_watts = 0;
    for (const RunGpuPoint& p : g.timeline) {
      utilisation.push_back(p.utilisation);
      watts.push_back(p.watts);
      if (p.watts) top_watts = std::max(top_watts, *p.watts);
    }
    // Sparklines are printed as they are (escaping would spell out the bars): one bar a minute,
    // the last kShowColumns - kShowLabel minutes.
    auto bars = [](std::string line) {
      std::size_t keep = kShowColumns - kShowLabel;
      std::size_t count = columns_of(line);
      std::size_t at = 0;
      for (std::size_t skipped = 0; count > keep && skipped < count - keep; ++skipped) {
        ++at;
        while (at < line.size() && (static_cast<unsigned char>(line[at]) & 0xC0) == 0x80) ++at;
      }
      return line.substr(at);
    };
    std::cout << "  utilisation per minute (0-100%):\n"
              << std::string(kShowLabel, ' ') << bars(sparkline(utilisation, 1.0)) << "\n";
    if (top_watts > 0) {
      std::cout << "  power per minute (0-" << fixed_text(top_watts, 0) << " W):\n"
                << std::string(kShowLabel, ' ') << bars(sparkline(watts, top_watts)) << "\n";
    }
    // Billing is on the allocated rate: the burn is flat, and its idle part is the gap above.
    field("burn", format_money(run->rate_per_hour, currency) + "/h throughout (allocated billing)");
  }
  return 0;
}

}  // namespace spendcap
