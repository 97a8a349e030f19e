// The ledger's rules over a LedgerStore. Contract in ledger.hpp and budget_ledger.hpp.
#include "spendcap/ledger/budget_ledger.hpp"

#include "budget_ledger_parts.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

#include <unistd.h>

#include "spendcap/base/acting_user.hpp"
#include "spendcap/base/command_redaction.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/ledger/grant_rule.hpp"
#include "spendcap/ledger/stop_rule.hpp"

namespace spendcap {

using budget_ledger_parts::add_usage;
using budget_ledger_parts::reconcile;
using budget_ledger_parts::view_of;

namespace budget_ledger_parts {

// The budget in force for `scope`: its ledger row, lowered by a locked policy's cap (ledger.hpp,
// LedgerOptions::budget_caps).
std::optional<BudgetRule> rule_in_force(std::optional<BudgetRule> row, const Scope& scope,
                                        const std::vector<BudgetRule>& caps) {
  auto cap = std::find_if(caps.begin(), caps.end(),
                          [&](const BudgetRule& rule) { return rule.scope == scope; });
  if (cap == caps.end()) return row;
  if (!row) return *cap;
  BudgetRule rule = *cap;
  rule.amount = std::min(row->amount, cap->amount);
  if (row->max_run)
    rule.max_run = cap->max_run ? std::min(*row->max_run, *cap->max_run) : *row->max_run;
  // The locked policy's members where it names them, else the row's.
  if (rule.member_groups.empty()) rule.member_groups = row->member_groups;
  return rule;
}

}  // namespace budget_ledger_parts

using budget_ledger_parts::rule_in_force;

namespace {

// Durations are kept in whole milliseconds, rounded up: a longer shutdown or sync only delays a
// reconciliation, a shorter one could charge a run that may still be spending.
Nanos to_whole_ms_rounded_up(Nanos duration) {
  return std::chrono::milliseconds((duration.count() + 999'999) / 1'000'000);
}

std::string plural(std::int64_t count, const std::string& word) {
  return std::to_string(count) + " " + word + (count == 1 ? "" : "s");
}

// Every scope a stop order on the run may name. Unnamed ones match nothing: an order always
// names its scope.
std::vector<Scope> stop_scopes(const RunRecord& run) {
  return {{ScopeKind::team, run.team},       {ScopeKind::experiment, run.experiment},
          {ScopeKind::project, run.project}, {ScopeKind::user, run.user},
          {ScopeKind::job, run.job_key},     {ScopeKind::run, run.id}};
}

// What the run is budgeted as itself: its job across runs, or the run alone.
Scope own_scope(const RunRecord& run) {
  return run.job_key.empty() ? Scope{ScopeKind::run, run.id} : Scope{ScopeKind::job, run.job_key};
}

void refresh_reconcile_at(RunRecord& run) {
  run.reconcile_at = reconcile_at(run.heartbeat_at, run.ceiling, run.spend, run.rate_per_hour,
                                  run.shutdown, run.sync);
}

RunRecord load_run_or_throw(StoreTxn& txn, const std::string& id, const std::string& url) {
  if (auto run = txn.find_run(id)) return std::move(*run);
  throw Error("run " + id, "not in the ledger " + url);
}

// ---- grants ----

// Other runs of the run's job: the spend of finished ones, the ceilings of unfinished ones.
Money job_use_of_others(StoreTxn& txn, const RunRecord& run) {
  Money used;
  for (const RunRecord& other : txn.runs_of_job(run.job_key)) {
    if (other.id == run.id) continue;
    used += other.status == RunStatus::running ? other.ceiling : other.spend;
  }
  return used;
}

// The job's earlier runs, for the lines the run prints: what the finished ones spent, and the
// --budget of the latest one.
void note_job_history(StoreTxn& txn, const RunRecord& run, Admission& admission) {
  Money spent;
  double latest = -1;
  for (const RunRecord& other : txn.runs_of_job(run.job_key)) {
    if (other.id == run.id) continue;
    if (other.status != RunStatus::running) spent += other.spend;
    if (other.budget && other.started_at >= latest) {
      latest = other.started_at;
      admission.job_budget_before = other.budget;
    }
  }
  admission.job_spent_before = spent;
}

// Takes the run's scopes' locks, then reads what the grant depends on. `spend`: what the run has
// spent now (0 at admission; a heartbeat's report).
GrantPlan plan_grant(StoreTxn& txn, const RunRecord& run, Money spend, Money want,
                     bool ignore_other_runs, const std::vector<BudgetRule>& caps) {
  std::vector<Scope> scopes = named_scopes(run);
  std::vector<Scope> locked = scopes;
  std::sort(locked.begin(), locked.end());
  txn.lock_scopes(locked);
  // The run's own ceiling is in its scopes' held sums (its day is in each of its periods) while
  // it is unfinished; the headroom excludes it.
  bool holding = run.status == RunStatus::running;
  Money own_ceiling = holding ? run.ceiling : Money{};
  GrantPlan plan;
  std::vector<BudgetRule> rules;
  for (const Scope& scope : scopes) {
    if (auto rule = rule_in_force(txn.budget_rule(scope), scope, caps)) rules.push_back(*rule);
  }
  std::vector<ScopeHeadroom> headrooms;
  // The fair share needs the other runs of a scope only when the run asks for more than it holds
  // (a heartbeat that raises nothing counts nothing).
  bool raising = want > own_ceiling && !ignore_other_runs;
  for (const BudgetRule& rule : rules) {
    ScopeState state{rule, period_days(rule.period, run.day), {}, {}, {}};
    state.sums = txn.usage(rule.scope, state.days);
    Money others = state.sums.spent + state.sums.held - own_ceiling;
    state.headroom = rule.amount - (ignore_other_runs ? Money{} : others);
    if (raising) {
      state.other_runs = txn.count_unfinished(rule.scope, state.days) - (holding ? 1 : 0);
    }
    headrooms.push_back({rule.scope, state.headroom, state.other_runs});
    plan.scopes.push_back(state);
  }
  plan.run_budget = effective_run_budget(run.budget, rules);
  if (plan.run_budget.amount) {
    if (!run.job_key.empty() && !ignore_other_runs) plan.job_others = job_use_of_others(txn, run);
    plan.own = ScopeHeadroom{own_scope(run), *plan.run_budget.amount - plan.job_others};
    headrooms.push_back(*plan.own);
  }
  Money need = std::min(want, near_term_need(spend, run.rate_per_hour, run.sync, run.reserve));
  plan.decision =
      decide_grant(own_ceiling, holding ? run.allowed : Money{}, want, run.mode, headrooms, need);
  return plan;
}

std::vector<ScopeUse> scope_uses(const GrantPlan& plan, Money live_delta, Money held_delta) {
  std::vector<ScopeUse> uses;
  for (const ScopeState& state : plan.scopes) {
    uses.push_back({state.rule.scope, state.rule.period, state.rule.amount,
                    state.sums.spent + state.sums.live + live_delta, state.sums.held + held_delta,
                    state.other_runs, state.sums.live + live_delta});
  }
  return uses;
}

// `unfinished`: how many unfinished runs the binding scope has in its period.
std::string refusal_message(const RunRecord& run, const GrantPlan& plan,
                            const std::function<std::int64_t(const ScopeState&)>& unfinished) {
  const std::optional<Scope>& binding = plan.decision.binding;
  std::string needs =
      "this run needs more than its " + format_money(run.reserve) + " shutdown reserve";
  if (!binding) {
    return "the first ceiling it asks for cannot cover its " + format_money(run.reserve) +
           " shutdown reserve";
  }
  for (const ScopeState& state : plan.scopes) {
    if (state.rule.scope != *binding) continue;
    return to_string(state.rule.scope) + " budget " + format_money(state.rule.amount) + " (" +
           to_string(state.rule.period) + ") has " +
           format_money(std::max(state.headroom, Money{})) +
           " left: " + format_money(state.sums.spent) + " spent, " + format_money(state.sums.held) +
           " held by " + plural(unfinished(state), "running run") + "; " + needs;
  }
  if (binding->kind == ScopeKind::job) {
    return to_string(*binding) + " budget " + format_money(*plan.run_budget.amount) + " has " +
           format_money(std::max(plan.own->headroom, Money{})) +
           " left: " + format_money(plan.job_others) + " spent or held by its other runs; " + needs;
  }
  return "the run budget " + format_money(*plan.run_budget.amount) +
         " cannot cover the shutdown reserve " + format_money(run.reserve);
}

// The refused row's reason: the scope whose budget is short, or, when it is the run's own budget
// (--budget, or max_run), the shutdown reserve it cannot hold: no other run is to blame (issue
// 40). As spendcap_admit's (postgres_grants.cpp).
std::string refusal_reason(const std::optional<Scope>& binding) {
  if (!binding) return "refused: budget";
  if (binding->kind == ScopeKind::run) return "refused: shutdown reserve exceeds the run budget";
  return "refused: budget " + to_string(*binding);
}

std::function<std::int64_t(const ScopeState&)> count_in(StoreTxn& txn) {
  return [&txn](const ScopeState& state) {
    return txn.count_unfinished(state.rule.scope, state.days);
  };
}

const char* const kNoBudget = "no budget applies to this run";
const char* const kNoBudgetHint =
    "give --budget USD, or define a team, experiment, project or user budget in the policy";

// The record of a run that is being admitted: holding nothing while its grant is planned.
RunRecord new_record(const RunStart& start, double now) {
  RunRecord run;
  static_cast<RunIdentity&>(run) = start;       // the identity whole (run_identity.hpp)
  run.command = stored_command(start.command);  // no secrets, at most 4 KiB
  run.cwd = start.cwd;
  run.fingerprint = start.fingerprint;
  run.pid = start.pid;
  run.uid = start.uid.value_or(static_cast<std::int64_t>(acting_uid()));
  run.mode = start.mode;
  run.rate_per_hour = start.rate_per_hour;
  run.pricing = start.pricing;
  run.commitment = start.commitment;
  run.reserve = start.reserve;
  run.budget = start.budget;
  run.shutdown = to_whole_ms_rounded_up(start.shutdown);
  run.sync = to_whole_ms_rounded_up(start.sync);
  run.started_at = run.heartbeat_at = now;
  run.day = utc_day(now);
  run.status = RunStatus::refused;
  return run;
}

// The budget in effect and its source, recorded with the run (as PostgreSQL's spendcap_admit).
void record_budget_source(RunRecord& run, const GrantPlan& plan) {
  std::vector<Scope> budgeted;
  for (const ScopeState& state : plan.scopes) budgeted.push_back(state.rule.scope);
  run.run_budget = plan.run_budget.amount;
  run.budget_source =
      budget_source_text(run.budget, plan.run_budget.lowered_by, run.job_key, budgeted);
}

}  // namespace

// ---- BudgetLedger ----

BudgetLedger::BudgetLedger(std::unique_ptr<LedgerStore> store, const LedgerOptions& options)
    : store_(std::move(store)),
      ignore_other_runs_(options.ignore_other_runs),
      budget_caps_(options.budget_caps),
      caller_(options.caller ? *options.caller : current_caller()) {}

std::function<std::optional<BudgetRule>(const Scope&)> BudgetLedger::rules_in(StoreTxn& txn) const {
  return [&txn, this](const Scope& scope) {
    return rule_in_force(txn.budget_rule(scope), scope, budget_caps_);
  };
}

Asker BudgetLedger::asker() {
  return Asker{caller_, caller_is_owner()};
}

std::string BudgetLedger::url() const {
  return store_->url();
}

bool BudgetLedger::caller_is_owner() {
  return store_->caller_is_owner();
}

bool BudgetLedger::is_personal() {
  return store_->is_personal();
}

void BudgetLedger::reconcile_if_due() {
  bool due = transact(Access::read, [](StoreTxn& txn) { return txn.any_run_due(txn.now()); });
  if (due) transact(Access::write, [](StoreTxn& txn) { return reconcile(txn, txn.now()); });
}

Admission BudgetLedger::begin_run(const RunStart& start) {
  if (start.id.empty()) throw Error("run", "has no id");
  for (Money amount :
       {start.rate_per_hour, start.reserve, start.want, start.budget.value_or(Money{})}) {
    if (amount < Money{}) throw Error("run " + start.id, "negative amount of money");
  }
  // The negative control (ignore_other_runs) is the rule's client side only: a server does not
  // know it.
  if (!ignore_other_runs_) {
    RunRecord record = new_record(start, 0);
    if (auto server = store_->admit_in_server(record, start.want, budget_caps_)) {
      return admission_from_server(record, std::move(*server));
    }
  }
  return transact(Access::write, [&](StoreTxn& txn) {
    double now = txn.now();
    reconcile(txn, now);
    if (txn.find_run(start.id)) throw Error("run " + start.id, "is already in the ledger " + url());
    RunRecord run = new_record(start, now);

    GrantPlan plan = plan_grant(txn, run, Money{}, start.want, ignore_other_runs_, budget_caps_);
    if (!plan.run_budget.amount && plan.scopes.empty()) {
      throw Error("run", kNoBudget, kNoBudgetHint);
    }
    Admission admission;
    if (!run.job_key.empty()) note_job_history(txn, run, admission);
    record_budget_source(run, plan);
    admission.run_budget = plan.run_budget.amount;
    admission.lowered_by = plan.run_budget.lowered_by;
    admission.grant.allowed = plan.decision.allowed;
    admission.grant.binding = plan.decision.binding;
    admission.grant.fair_share = plan.decision.fair_share;

    auto refuse = [&](std::string message, std::optional<Scope> scope, std::string reason) {
      admission.refusal = std::move(message);
      admission.refused_by = std::move(scope);
      run.reason = std::move(reason);
      run.finished_at = now;
      admission.grant.scopes = scope_uses(plan, Money{}, Money{});
      admission.refusal_count = txn.count_refusal(run.user, now);
      if (admission.refusal_count.recorded) txn.insert_run(run);
      return admission;
    };
    if (!run.job_key.empty()) {
      if (std::string why = why_not_join_job(txn.runs_of_job(run.job_key), run); !why.empty()) {
        Scope job{ScopeKind::job, run.job_key};
        return refuse(why, job, "refused: job key " + run.job_key + " is another's");
      }
    }
    if (auto order = txn.first_stop_order(stop_scopes(run))) {
      admission.grant.stop = order;
      std::string where = to_string(order->scope);
      return refuse("stop order on " + where + " by " + order->placed_by +
                        (order->reason.empty() ? "" : ": " + order->reason),
                    order->scope, "refused: stop order on " + where);
    }
    bool fits = plan.decision.allowed > start.reserve;
    if (!fits && start.mode == Mode::enforce) {
      std::optional<Scope> by = plan.decision.binding;
      return refuse(refusal_message(run, plan, count_in(txn)), by, refusal_reason(by));
    }
    if (!fits) {  // warn mode: admitted, and the ledger says it would have been refused
      admission.refusal = refusal_message(run, plan, count_in(txn));
      admission.refused_by = plan.decision.binding;
      run.would_stop_at = now;
      run.would_stop_reason = "would be refused: " + admission.refusal;
    }
    run.status = RunStatus::running;
    run.ceiling = plan.decision.ceiling;
    run.allowed = plan.decision.allowed;
    refresh_reconcile_at(run);
    txn.insert_run(run);
    if (!start.webhooks.empty()) txn.put_run_webhooks(run.id, start.webhooks);
    add_usage(txn, run, {Money{}, run.ceiling, Money{}});
    admission.admitted = true;
    admission.grant.ceiling = run.ceiling;
    admission.grant.scopes = scope_uses(plan, Money{}, run.ceiling);
    return admission;
  });
}

Admission BudgetLedger::admission_from_server(const RunRecord& run, ServerGrant server) {
  if (server.error == "exists") throw Error("run " + run.id, "is already in the ledger " + url());
  if (server.error == "no budget") throw Error("run", kNoBudget, kNoBudgetHint);
  if (!server.error.empty()) throw Error("ledger " + url(), "answered " + server.error);
  const GrantPlan& plan = server.plan;
  Admission admission;
  if (!run.job_key.empty()) {
    admission.job_spent_before = server.job_spent_before;
    admission.job_budget_before = server.job_budget_before;
  }
  admission.run_budget = plan.run_budget.amount;
  admission.lowered_by = plan.run_budget.lowered_by;
  admission.grant.allowed = plan.decision.allowed;
  admission.grant.binding = plan.decision.binding;
  admission.grant.fair_share = plan.decision.fair_share;
  auto unfinished = [&server](const ScopeState&) { return server.unfinished; };
  admission.refusal_count = server.refusal_count;
  if (server.job_owner) {
    admission.refusal = job_taken_message(*server.job_owner, run);
    admission.refused_by = Scope{ScopeKind::job, run.job_key};
    admission.grant.scopes = scope_uses(plan, Money{}, Money{});
    return admission;
  }
  if (server.stop) {
    const StopOrder& order = *server.stop;
    admission.grant.stop = order;
    admission.refusal = "stop order on " + to_string(order.scope) + " by " + order.placed_by +
                        (order.reason.empty() ? "" : ": " + order.reason);
    admission.refused_by = order.scope;
    admission.grant.scopes = scope_uses(plan, Money{}, Money{});
    return admission;
  }
  if (!server.fits) {
    admission.refusal = refusal_message(run, plan, unfinished);
    admission.refused_by = plan.decision.binding;
  }
  if (!server.admitted) {
    admission.grant.scopes = scope_uses(plan, Money{}, Money{});
    return admission;
  }
  // Warn mode, admitted though it does not fit: the ledger says it would have been refused.
  if (!server.fits) record_would_stop(run.id, "would be refused: " + admission.refusal);
  admission.admitted = true;
  admission.grant.ceiling = plan.decision.ceiling;
  admission.grant.scopes = scope_uses(plan, Money{}, plan.decision.ceiling);
  return admission;
}

Grant BudgetLedger::heartbeat(const std::string& run_id, Money spend, Money want,
                              const std::optional<HeartbeatProgress>& progress) {
  if (!ignore_other_runs_) {
    if (auto server = store_->heartbeat_in_server(run_id, spend, want, budget_caps_, progress)) {
      if (server->error == "missing") throw Error("run " + run_id, "not in the ledger " + url());
      if (!server->error.empty()) throw Error("ledger " + url(), "answered " + server->error);
      Grant grant;
      grant.stop = server->stop;
      grant.ceiling = server->ceiling;
      grant.allowed = server->allowed;
      if (!server->running) {
        grant.scopes = scope_uses(server->plan, Money{}, Money{});
        return grant;
      }
      grant.binding = server->plan.decision.binding;
      grant.fair_share = server->plan.decision.fair_share;
      grant.scopes = scope_uses(server->plan, server->live_delta, server->held_delta);
      return grant;
    }
  }
  return transact(Access::write, [&](StoreTxn& txn) {
    double now = txn.now();
    reconcile(txn, now);
    RunRecord run = load_run_or_throw(txn, run_id, url());
    GrantPlan plan = plan_grant(txn, run, spend, want, ignore_other_runs_, budget_caps_);
    Grant grant;
    grant.stop = txn.first_stop_order(stop_scopes(run));
    if (run.status != RunStatus::running) {  // final already: it holds nothing more
      grant.ceiling = run.ceiling;
      grant.allowed = run.allowed;
      grant.scopes = scope_uses(plan, Money{}, Money{});
      return grant;
    }
    Money live_delta = spend - run.spend;
    Money held_delta = plan.decision.ceiling - run.ceiling;
    run.spend = run.reported_spend = spend;
    run.ceiling = plan.decision.ceiling;
    run.allowed = plan.decision.allowed;
    run.heartbeat_at = now;
    if (progress) {
      run.last_progress = progress->last;
      run.progress_eta_at = progress_eta_of(now, progress->seconds_left);
      if (progress->metric_name) {
        run.metric_name = progress->metric_name;
        run.metric_value = progress->metric_value;
      }
    }
    refresh_reconcile_at(run);
    txn.update_run(run);
    if (progress && progress->tracker) txn.set_run_tracker(run.id, *progress->tracker);
    add_usage(txn, run, {Money{}, held_delta, live_delta});
    grant.ceiling = run.ceiling;
    grant.allowed = plan.decision.allowed;
    grant.binding = plan.decision.binding;
    grant.fair_share = plan.decision.fair_share;
    grant.scopes = scope_uses(plan, live_delta, held_delta);
    return grant;
  });
}

void BudgetLedger::record_would_stop(const std::string& run_id, const std::string& reason) {
  transact(Access::write, [&](StoreTxn& txn) {
    double now = txn.now();
    reconcile(txn, now);
    RunRecord run = load_run_or_throw(txn, run_id, url());
    // The first time is the one that matters: when it would have been stopped.
    if (run.would_stop_at) return;
    run.would_stop_at = now;
    run.would_stop_reason = reason;
    txn.update_run(run);
  });
}

CommandHistory BudgetLedger::command_history(const std::string& fingerprint,
                                             double window_seconds) {
  return transact(Access::read, [&](StoreTxn& txn) {
    CommandHistory history;
    history.now = txn.now();
    for (const RunRecord& run :
         txn.runs_of_fingerprint(fingerprint, history.now - window_seconds)) {
      history.runs.push_back(view_of(run, history.now));
    }
    return history;
  });
}

RefusalCount BudgetLedger::record_refused(const RunStart& start, const std::string& reason) {
  if (start.id.empty()) throw Error("run", "has no id");
  return transact(Access::write, [&](StoreTxn& txn) {
    double now = txn.now();
    RunRecord run = new_record(start, now);  // refused, nothing held
    run.reason = reason;
    run.finished_at = now;
    RefusalCount count = txn.count_refusal(run.user, now);
    if (count.recorded) txn.insert_run(run);
    return count;
  });
}

bool BudgetLedger::finish_run(const RunFinal& final) {
  if (final.status == RunStatus::running) {
    throw Error("run " + final.id, "cannot be finished with status running");
  }
  if (!ignore_other_runs_) {
    RunRecord record;
    record.id = final.id;
    record.status = final.status;
    record.reason = final.reason;
    record.exit_code = final.exit_code;
    record.spendcap_exit_code = final.spendcap_exit_code;
    record.spend = final.spend;
    record.elapsed_seconds = final.elapsed_seconds;
    record.gpu = final.gpu;
    record.metric_name = final.metric_name;
    record.metric_value = final.metric_value;
    record.units = final.units;
    record.egress_gb = final.egress_gb;
    record.storage_peak_gb = final.storage_peak_gb;
    record.storage_spend = final.storage_spend;
    record.last_progress = final.last_progress;
    record.checkpoint = final.checkpoint;
    record.progress_seconds_left = final.progress_seconds_left;
    // spendcap_finish reads only this tag of the final's (schema v25).
    if (final.tracker) record.tags["tracker"] = *final.tracker;
    if (auto answer = store_->finish_in_server(record)) {
      if (*answer == "missing") throw Error("run " + final.id, "not in the ledger " + url());
      return *answer == "written";
    }
  }
  return transact(Access::write, [&](StoreTxn& txn) {
    double now = txn.now();
    reconcile(txn, now);
    RunRecord run = load_run_or_throw(txn, final.id, url());
    bool unfinished = run.status == RunStatus::running;
    if (!unfinished && !run.reconciled) return false;
    std::vector<Scope> locked = named_scopes(run);
    std::sort(locked.begin(), locked.end());
    txn.lock_scopes(locked);
    // A reconciled lost run: its real spend replaces the ceiling it was charged.
    Usage delta = unfinished ? Usage{final.spend, Money{} - run.ceiling, Money{} - run.spend}
                             : Usage{final.spend - run.spend, Money{}, Money{}};
    run.status = final.status;
    run.reason = final.reason;
    run.exit_code = final.exit_code;
    run.spendcap_exit_code = final.spendcap_exit_code;
    run.spend = final.spend;
    run.elapsed_seconds = final.elapsed_seconds;
    if (final.gpu) run.gpu = final.gpu;
    run.metric_name = final.metric_name;
    run.metric_value = final.metric_value;
    run.units = final.units;
    run.egress_gb = final.egress_gb;
    run.storage_peak_gb = final.storage_peak_gb;
    run.storage_spend = final.storage_spend;
    run.last_progress = final.last_progress;
    if (final.progress_seconds_left) {
      run.progress_eta_at = progress_eta_of(now, final.progress_seconds_left);
    }
    run.checkpoint = final.checkpoint;
    run.reconciled = false;
    // Recorded with its true spend, never hidden: the rule's sum is then over budget by the
    // overrun, and `budgets` says so.
    run.overrun = final.spend > run.ceiling;
    if (!run.finished_at) run.finished_at = now;
    // Before the final row: the run is still its own unfinished (or reconciled) one.
    if (final.tracker) txn.set_run_tracker(run.id, *final.tracker);
    txn.update_run(run);
    add_usage(txn, run, delta);
    return true;
  });
}

}  // namespace spendcap
