// `stop`: the kill switch (admin.hpp).
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
  std::vector<std::vector<TableCell>> rows = {{"SCOPE", "PLACED BY", "AGE", "REASON"}};
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
    return list_stop_orders(*open_ledger_session(for_reading(choice)).ledger);
  }
  auto scope = requested_scope(request);
  if (!scope) {
    throw Error("stop", "give exactly one of --team, --experiment, --project, --user, --run, --job",
                "e.g. spendcap stop --team vision --reason 'budget review'");
  }
  require_printable_name(scope->name, "--" + to_string(scope->kind));
  LedgerSession session = open_ledger_session(choice);
  // The write a writing verb owes the host first (ledger_session.hpp).
  settle_host_debts(session);
  std::unique_ptr<Ledger>& ledger = session.ledger;
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
            << (affected == 1 ? " running wrapper in scope stops"
                              : " running wrappers in scope stop")
            << " within one sync interval";
  if (scope->kind != ScopeKind::run) {
    std::cout << "; new runs are refused until `spendcap stop --clear " << escape_for_terminal(flag)
              << "`";
  }
  std::cout << "\n";
  return 0;
}

namespace {

struct StopArgs {
  LedgerChoice choice;
  StopRequest request;
};

VerbRun add_stop(CLI::App& command, CLI::App&, VerbContext&) {
  auto args = std::make_shared<StopArgs>();
  StopRequest& stop_request = args->request;
  CLI::App* stop = &command;
  add_ledger_options(*stop, args->choice);
  stop->add_option("--team", stop_request.team, "stop the team's runs");
  stop->add_option("--experiment", stop_request.experiment, "stop the experiment's runs");
  stop->add_option("--project", stop_request.project, "stop the project's runs");
  stop->add_option("--user", stop_request.user, "stop the user's runs");
  stop->add_option("--run", stop_request.run, "stop one run (its id)");
  stop->add_option("--job", stop_request.job,
                   "stop every run of a job key (every node of a multi-node --run-id)");
  stop->add_option("--reason", stop_request.reason, "why (shown to the runs' owners)");
  stop->add_flag("--clear", stop_request.clear, "clear the scope's stop orders instead");
  stop->add_flag("--list", stop_request.list, "list the active stop orders");
  stop->get_option("--run")->description("stop one run (its id, or any unique prefix: ps shows 8)");
  return [args] { return stop_command(args->choice, args->request); };
}

}  // namespace

const Verb kStopVerb = {"stop", "the kill switch: stop every run in a scope", add_stop};

}  // namespace spendcap
