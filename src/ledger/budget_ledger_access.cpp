// BudgetLedger's orders on other people's runs: stop orders and accepted results, checked by
// stop_rule.hpp inside the transaction that writes them (SQLite's write lock, PostgreSQL's scope
// lock in its function), so that a run admitted meanwhile cannot slip past the check.
#include <algorithm>

#include "spendcap/base/error.hpp"
#include "spendcap/ledger/budget_ledger.hpp"
#include "spendcap/ledger/grant_rule.hpp"
#include "spendcap/ledger/stop_rule.hpp"

namespace spendcap {

namespace {

std::string flag_of(const Scope& scope) {
  return "--" + to_string(scope.kind) + " " +
         (scope.kind == ScopeKind::run ? scope.name.substr(0, 8) : scope.name);
}

// "1a2b3c4d (alice, team:vision)", as `ps` names a run.
std::string run_label(const RunRecord& run) {
  return run.id.substr(0, 8) + " (" + run.user + (run.team.empty() ? "" : ", team:" + run.team) +
         ")";
}

// The refusal of an order that would reach runs the caller may not stop: at most five named.
void refuse_others_runs(const Asker& asker, const Scope& scope,
                        const std::vector<std::string>& refused) {
  if (refused.empty()) return;
  std::string which;
  for (size_t i = 0; i < refused.size() && i < 5; ++i) which += (i ? "; " : "") + refused[i];
  if (refused.size() > 5) which += "; and " + std::to_string(refused.size() - 5) + " more";
  throw Error("stop " + flag_of(scope),
              "the order would reach " + std::to_string(refused.size()) + " running run" +
                  (refused.size() == 1 ? "" : "s") + " " + asker.caller.user +
                  " may not stop: " + which,
              "stop your own runs (--user " + asker.caller.user +
                  ", --run ID), or ask a member of their team or the ledger's owner");
}

}  // namespace

bool BudgetLedger::claim_warning(const Scope& scope, Period period,
                                 const std::vector<int>& percents, const std::string& run_id) {
  if (percents.empty()) return false;
  bool claimed = false;
  store().transact(Access::write, [&](StoreTxn& txn) {
    double now = txn.now();
    std::int64_t first_day = period_days(period, utc_day(now)).first_day;
    if (period == Period::total) first_day = 0;
    claimed = false;
    for (int percent : percents) {
      claimed = txn.insert_warning(scope, first_day, percent, run_id, now);
    }
  });
  return claimed;
}

StopOrder BudgetLedger::place_stop_order(const Scope& scope, const std::string& reason,
                                         const std::string& placed_by) {
  if (scope.name.empty()) throw Error("stop order", "names no " + to_string(scope.kind));
  Asker who = asker();
  reconcile_if_due();
  StopOrder placed;
  store().transact(Access::write, [&](StoreTxn& txn) {
    if (!who.owner) {
      auto rule_of = rules_in(txn);
      std::vector<std::string> refused;
      for (const RunRecord& run : txn.unfinished_runs()) {
        if (!in_scope(run, scope)) continue;
        std::string why = why_not_act_on_run(who, run, rule_of);
        if (!why.empty()) refused.push_back(run_label(run) + ": " + why);
      }
      refuse_others_runs(who, scope, refused);
      std::optional<RunRecord> run;
      if (scope.kind == ScopeKind::run) run = txn.find_run(scope.name);
      std::vector<RunRecord> job_runs;
      if (scope.kind == ScopeKind::job) job_runs = txn.runs_of_job(scope.name);
      std::string why = why_not_order_scope(who, scope, rule_of, run, job_runs);
      if (!why.empty()) {
        throw Error("stop " + flag_of(scope), why,
                    "stop your own runs (--user " + who.caller.user +
                        ", --run ID), or ask the ledger's owner");
      }
    }
    placed = txn.insert_stop_order(scope, reason, placed_by, txn.now());
  });
  return placed;
}

int BudgetLedger::clear_stop_orders(const Scope& scope) {
  Asker who = asker();
  reconcile_if_due();
  int cleared = 0;
  store().transact(Access::write, [&](StoreTxn& txn) {
    if (!who.owner) {
      std::string mine = who.caller.user + "@";
      std::vector<std::string> others;
      for (const StopOrder& order : txn.active_stop_orders()) {
        if (order.scope == scope && !order.placed_by.starts_with(mine)) {
          others.push_back(order.placed_by);
        }
      }
      std::optional<RunRecord> run;
      if (scope.kind == ScopeKind::run) run = txn.find_run(scope.name);
      std::vector<RunRecord> job_runs;
      if (scope.kind == ScopeKind::job) job_runs = txn.runs_of_job(scope.name);
      auto rule_of = rules_in(txn);
      if (!others.empty() && !names_caller(who, scope, rule_of, run, job_runs)) {
        std::string why = "the order was placed by " + others.front() + ", not by " +
                          who.caller.user + "; only its placer";
        if (scope.kind == ScopeKind::user) why += ", " + scope.name;
        if (scope.kind == ScopeKind::run && run) why += ", the run's user " + run->user;
        if (const RunRecord* key = job_key_owner(job_runs)) why += ", the job key's " + key->user;
        if (auto rule = rule_of(scope); rule && !rule->member_groups.empty()) {
          why += ", the members of the group";
          why += rule->member_groups.size() == 1 ? " " : "s ";
          for (size_t i = 0; i < rule->member_groups.size(); ++i) {
            why += (i ? ", " : "") + rule->member_groups[i];
          }
        }
        why += " and the ledger's owner may clear it";
        throw Error("stop --clear " + flag_of(scope), why, "ask them to clear it");
      }
    }
    cleared = txn.clear_stop_orders(scope, txn.now());
  });
  return cleared;
}

AcceptedResult BudgetLedger::accept_run(const std::string& run_id, const std::string& note,
                                        const std::string& accepted_by) {
  Asker who = asker();
  AcceptedResult accepted;
  store().transact(Access::write, [&](StoreTxn& txn) {
    std::optional<RunRecord> run = txn.find_run(run_id);
    if (!run) {
      throw Error("spendcap accept " + run_id, "no such run in the ledger " + url(),
                  "the run ids are in `spendcap report --format json` and the run's status file");
    }
    if (run->status == RunStatus::running) {
      throw Error("spendcap accept " + run_id, "the run is still running",
                  "accept its result once it has finished");
    }
    if (run->status == RunStatus::refused) {
      throw Error("spendcap accept " + run_id, "the run was refused and has no result");
    }
    if (std::string why = why_not_accept_run(who, *run, rules_in(txn)); !why.empty()) {
      throw Error("spendcap accept " + run_id,
                  "the run " + run_label(*run) + " is not " + who.caller.user + "'s: " + why,
                  "only the run's user, the members of its team and the ledger's owner may "
                  "accept it");
    }
    accepted = AcceptedResult{run_id, note, accepted_by, txn.now()};
    txn.put_accepted_result(accepted);
  });
  return accepted;
}

// ---- the seam's defaults for lost runs' events: a store without them refuses ----

void StoreTxn::put_run_webhooks(const std::string&, const std::vector<RunWebhook>&) {
  throw Error("ledger", "this ledger backend cannot record a run's webhooks",
              "use a sqlite: or postgresql: ledger");
}

std::vector<std::pair<RunRecord, std::vector<RunWebhook>>> StoreTxn::untold_lost_runs() {
  return {};  // nothing was recorded, so nothing is owed
}

bool StoreTxn::claim_lost_run(const std::string&, double, const std::vector<OutboxEntry>&) {
  throw Error("ledger", "this ledger backend cannot queue a lost run's event",
              "use a sqlite: or postgresql: ledger");
}

std::vector<RunRecord> StoreTxn::reconciled_runs(std::int64_t) {
  throw Error("ledger", "this ledger backend cannot list lost runs",
              "use a sqlite: or postgresql: ledger");
}

}  // namespace spendcap
