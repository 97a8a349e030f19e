// `ps`: running and lost runs (admin.hpp).
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

// How long `ps` keeps listing a finished run that overran its ceiling, or a lost run charged its
// ceiling.
constexpr int kOverrunsShownDays = 7;

// A run's spend as `ps` shows it, which never goes down from one look to the next (issue 19). A
// running run's, or a silent one's not yet reconciled (it may still be spending), is the most it
// can have spent by now: its allocated rate since it was admitted, never below its last
// heartbeat's nor above its ceiling, where it trips. Extrapolating from the last heartbeat
// instead fell back at each heartbeat by that heartbeat's latency, and to the last report once
// the run went silent ($0.24 running, then $0.20 lost). A reconciled lost run's is its
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
TableCell lost_status(const RunView& run, double now, const std::string& currency) {
  std::string since = format_utc(run.heartbeat_at, UtcForm::clock_z);
  if (run.reconciled) {
    return "lost: charged the ceiling " + TableCell::money(run.ceiling, currency) +
           " (no heartbeat since " + since + ")";
  }
  return "lost (silent " + age(now - run.heartbeat_at) + "; holds its ceiling " +
         TableCell::money(run.ceiling, currency) + ")";
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
TableCell budget_share(const RunView& run, const std::vector<BudgetView>& views,
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
           " of " + TableCell::money(binding->rule.amount, currency);
  }
  if (own_binds) {
    return "run " + percent(live_spend(run, now), *run.budget) + " of " +
           TableCell::money(*run.budget, currency);
  }
  return "-";
}

// The progress channel's step of a run, "1200/2000" ("1200" without a total); "-" when none.
std::string step_text(const RunView& run) {
  if (!run.last_progress || !run.last_progress->step) return "-";
  std::string text = std::to_string(*run.last_progress->step);
  if (run.last_progress->total_steps) text += "/" + std::to_string(*run.last_progress->total_steps);
  return text;
}

// The seconds until a running run is expected to have done its steps, from its ETA in the
// ledger (progress_eta_at, written at its heartbeats from its pace; 0 once that time is past);
// none for a run that is not running (finished, lost, paused: no pace to go by) or has no ETA.
std::optional<double> eta_seconds(const RunView& run, double now, bool paused) {
  if (run.status != RunStatus::running || run.finished_at || paused || !run.progress_eta_at) {
    return std::nullopt;
  }
  return std::max(0.0, *run.progress_eta_at - now);
}

// "~3m10s"; "-" when not known.
std::string eta_text(const std::optional<double>& seconds) {
  return seconds ? "~" + age(*seconds) : "-";
}

}  // namespace

int ps_command(const LedgerChoice& choice, bool json) {
  LedgerSession session = open_ledger_session(choice);
  // The one reading verb that settles: `ps` is where an operator looks for lost runs and a run
  // spooled on this host, and the guide names it as the command that replays them.
  settle_host_debts(session);
  std::unique_ptr<Ledger>& ledger = session.ledger;
  const std::string& currency = session.currency;
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
    auto optional_json = [](const auto& value) {
      return value ? nlohmann::json(*value) : nlohmann::json();
    };
    auto time_json = [](const std::optional<double>& at) {
      return at ? nlohmann::json(iso_time(*at)) : nlohmann::json();
    };
    for (const RunView& run : listed) {
      bool paused = paused_here(run);
      std::optional<double> eta = eta_seconds(run, now, paused);
      if (eta) *eta = std::round(*eta * 1000) / 1000;
      const std::optional<RunLastProgress>& progress = run.last_progress;
      out.push_back(
          {{"id", run.id},
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
           {"paused", paused},
           {"rate_per_hour", money_to_json(run.rate_per_hour)},
           {"started_at", iso_time(run.started_at)},
           {"heartbeat_at", iso_time(run.heartbeat_at)},
           {"finished_at", time_json(run.finished_at)},
           {"age_seconds", now - run.started_at},
           {"step", progress ? optional_json(progress->step) : nlohmann::json()},
           {"total_steps", progress ? optional_json(progress->total_steps) : nlohmann::json()},
           {"eta_seconds", optional_json(eta)},
           {"eta_at", time_json(run.progress_eta_at)}});
    }
    std::cout << plain_json_numbers(dump_json(out, 2)) << "\n";
    return 0;
  }
  if (runs.empty() && overruns.empty() && charged.empty()) {
    std::cout << "no running or lost runs in " << ledger->url() << "\n";
    return 0;
  }
  std::vector<BudgetView> budget_views = ledger->budgets();
  std::vector<std::vector<TableCell>> rows = {{"RUN", "USER", "HOST", "PID", "TEAM", "EXPERIMENT",
                                               "STATUS", "SPEND", "HELD", "BURN/H", "AGE", "STEP",
                                               "ETA", "BUDGET USED"}};
  // Cut to fit the terminal: the names, the status and the budget's words (print_table).
  const std::vector<std::size_t> cut = {1, 2, 4, 5, 6, 13};
  auto add_row = [&](const RunView& run, const TableCell& status, bool paused) {
    rows.push_back(
        {run.id.substr(0, 8), run.user.empty() ? "-" : run.user, run.host, std::to_string(run.pid),
         run.team, run.experiment, status, TableCell::money(live_spend(run, now), currency),
         TableCell::money(held_by(run), currency), TableCell::money(run.rate_per_hour, currency),
         age(now - run.started_at), step_text(run), eta_text(eta_seconds(run, now, paused)),
         budget_share(run, budget_views, currency, now)});
  };
  // Shown "paused" (status_of): its ETA is not counting down.
  auto shown_paused = [&](const RunView& run) {
    return run.status != RunStatus::lost && paused_here(run);
  };
  auto status_of = [&](const RunView& run) -> TableCell {
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
      add_row(run, status_of(run), shown_paused(run));
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
                    TableCell::money(spend, currency), TableCell::money(ceiling, currency),
                    TableCell::money(burn, currency), age(now - started), "", "",
                    budget_share(run, budget_views, currency, now)});
    for (const RunView* node : group->second) {
      TableCell status = status_of(*node);
      rows.push_back({"  " + *node_of(*node), "", node->host, std::to_string(node->pid), "", "",
                      status, TableCell::money(live_spend(*node, now), currency),
                      TableCell::money(held_by(*node), currency),
                      TableCell::money(node->rate_per_hour, currency), age(now - node->started_at),
                      step_text(*node), eta_text(eta_seconds(*node, now, shown_paused(*node))),
                      ""});
    }
    nodes_of.erase(group);
  }
  for (const RunView& run : charged) add_row(run, lost_status(run, now, currency), false);
  for (const RunView& run : overruns) add_row(run, to_string(run.status) + " (OVERRUN)", false);
  print_table(rows, terminal_width(), cut);
  return 0;
}

namespace {

struct PsArgs {
  LedgerChoice choice;
  bool json = false;
};

VerbRun add_ps(CLI::App& command, CLI::App&, VerbContext&) {
  auto args = std::make_shared<PsArgs>();
  CLI::App* ps = &command;
  add_ledger_options(*ps, args->choice);
  ps->add_flag("--json", args->json, "print JSON");
  return [args] { return ps_command(args->choice, args->json); };
}

}  // namespace

const Verb kPsVerb = {"ps", "running and lost runs", add_ps};

}  // namespace spendcap
