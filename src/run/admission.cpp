#include "spendcap/run/admission.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "spendcap/base/signals.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/guards/crash_loop.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/notify/runner_files.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/membership.hpp"
#include "spendcap/run/run_notifier.hpp"
#include "spendcap/run/summary.hpp"
#include "spendcap/spend/meter.hpp"
#include "spendcap/supervise/run_env.hpp"
#include "spendcap/supervise/supervisor.hpp"

namespace spendcap {

// Opens the ledger, replays what earlier runs on this host spooled, and, on a personal ledger (the
// caller's own file), applies the policy's budgets: loading the owner's policy applies it.
std::shared_ptr<Ledger> open_run_ledger(RunHost& host, const RunSettings& settings,
                                        const TestSwitches& switches, const Reporter& reporter) {
  LedgerOptions options;
  options.ignore_other_runs = switches.no_ceilings;
  if (settings.loaded.locked_policy) {
    options.budget_caps = budget_rules_of(*settings.loaded.locked_policy);
  }
  options.postgres_password =
      ledger_password_as_installed(settings.loaded.policy, settings.loaded.locked_policy);
  std::shared_ptr<Ledger> ledger = host.open_ledger(settings.ledger_url, options);
  // The switches weaken what spendcap enforces: only on a ledger that is the caller's alone.
  if (switches.any() && !ledger->is_personal()) {
    throw Error("SPENDCAP_TEST_SWITCHES",
                "test-only switches are refused on a shared ledger (" + ledger->url() + ")",
                "unset SPENDCAP_TEST_SWITCHES; they work on a personal ledger only");
  }
  int replayed = 0;
  with_ledger_group([&] { replayed = replay_spool(*ledger); });
  if (replayed) {
    reporter.line("replayed " + std::to_string(replayed) + " spooled final rows into " +
                  ledger->url());
  }
  // Under a locked policy only the locked policy's own budgets, never a user layer's.
  const Policy& owner_policy =
      settings.loaded.locked_policy ? *settings.loaded.locked_policy : settings.loaded.policy;
  std::vector<BudgetRule> rules = budget_rules_of(owner_policy);
  if (!rules.empty() && ledger->is_personal()) ledger->apply_budgets(rules, false);
  return ledger;
}

RunStart make_run_start(const RunSettings& settings) {
  RunStart run{settings.identity};
  run.fingerprint = command_fingerprint(run.team, run.experiment, run.command);
  run.pid = ::getpid();
  // The job runs where spendcap was started (the privileged runner too: it takes this
  // directory's descriptor).
  std::error_code no_cwd;
  run.cwd = std::filesystem::current_path(no_cwd).string();
  run.mode = settings.mode;
  run.rate_per_hour = settings.rate_per_hour;
  run.pricing = settings.loaded.policy.defaults.pricing;  // --pricing or the policy's
  // The commitment a reserved run uses: the reserved price of its one GPU or instance type (as
  // FOCUS prices it, report/focus.cpp), kept with the run. --rate names no type: none.
  const Policy& policy = settings.loaded.policy;
  auto gpu = settings.identity.tags.find("gpu");
  auto instance = settings.identity.tags.find("instance");
  bool has_gpu = gpu != settings.identity.tags.end();
  bool has_instance = instance != settings.identity.tags.end();
  if (run.pricing == Pricing::reserved && has_gpu != has_instance) {
    const auto& rates = has_gpu ? policy.gpu_rates : policy.instance_rates;
    auto sheet = rates.find(has_gpu ? gpu->second : instance->second);
    if (sheet != rates.end()) run.commitment = sheet->second.reserved;
  }
  run.reserve = shutdown_reserve(settings.rate_per_hour, settings.on_trip);
  run.budget = settings.budget;
  run.shutdown = settings.on_trip.total();
  run.sync = settings.sync;
  run.want =
      claim_ahead(settings.rate_per_hour, settings.claim_horizon, settings.sync, run.reserve);
  return run;
}

// Refused at admission (120): says why, and writes the status file.
int refuse(const RunSettings& settings, const Admission& admission, const Reporter& reporter) {
  // The run's own budget cannot even hold the shutdown reserve: no other run is to blame, and
  // the fix is in the caller's flags.
  Money reserve = shutdown_reserve(settings.rate_per_hour, settings.on_trip);
  bool reserve_too_big = admission.run_budget && *admission.run_budget <= reserve &&
                         (!admission.refused_by || admission.refused_by->kind == ScopeKind::run);
  std::string refusal = admission.refusal;
  if (reserve_too_big) {
    refusal = "the shutdown reserve " + format_money(reserve, settings.loaded.policy.currency) +
              " (grace " + format_duration(settings.on_trip.grace) + " + kill-after " +
              format_duration(settings.on_trip.kill_after) + " + 1s at " +
              format_money(settings.rate_per_hour, settings.loaded.policy.currency) +
              "/h) does not fit in the budget " +
              format_money(*admission.run_budget, settings.loaded.policy.currency) +
              " (lower --grace or raise --budget)";
  }
  const RefusalCount& count = admission.refusal_count;
  if (!count.recorded) {
    refusal += " (refused run " + std::to_string(count.this_minute) + " of " +
               settings.identity.user + " this minute: past " +
               std::to_string(kRecordedRefusalsPerMinute) +
               " a minute the ledger counts refused runs instead of recording each, and sends "
               "no refused webhook)";
  }
  reporter.error("refused: " + refusal);
  RunOutcome refused;
  refused.run_id = settings.identity.id;
  refused.status = RunStatus::refused;
  refused.reason = reserve_too_big ? "reserve-exceeds-budget" : "refused";
  refused.exit_code = to_int(ExitCode::refused);
  refused.currency = settings.loaded.policy.currency;
  refused.rate_per_hour = settings.rate_per_hour;
  refused.budget = admission.run_budget;
  refused.message = refusal;
  write_status(settings.status_file, refused, reporter);
  if (int signal = take_pending_stop_signal()) reraise(signal);
  return refused.exit_code;
}

// "the shutdown reserve $0.71 is 71% of the budget $1.00": a budget mostly eaten by the reserve
// stops the run soon after it starts.
void warn_about_reserve(const RunSettings& settings, const Admission& admission,
                        const Reporter& reporter) {
  if (!admission.run_budget || admission.run_budget->micros <= 0) return;
  Money reserve = shutdown_reserve(settings.rate_per_hour, settings.on_trip);
  double share = static_cast<double>(reserve.micros) / admission.run_budget->micros;
  if (share <= 0.5) return;
  const std::string& currency = settings.loaded.policy.currency;
  reporter.line("the shutdown reserve " + format_money(reserve, currency) + " is " +
                std::to_string(static_cast<int>(share * 100 + 0.5)) + "% of the budget " +
                format_money(*admission.run_budget, currency) +
                ": the run trips when little is spent (lower --grace or raise --budget)");
}

// A job key's budget is the latest --budget: raising (or lowering) it is said, never silent.
void say_job_budget_change(const RunSettings& settings, const Admission& admission,
                           const Reporter& reporter) {
  if (settings.identity.job_key.empty() || !settings.budget || !admission.job_budget_before) return;
  const Money before = *admission.job_budget_before;
  if (*settings.budget == before) return;
  const std::string& currency = settings.loaded.policy.currency;
  reporter.line(std::string("--budget ") + format_money(*settings.budget, currency) +
                (before < *settings.budget ? " raises" : " lowers") + " the budget of job " +
                settings.identity.job_key + " from " + format_money(before, currency) +
                " (its earlier runs spent " +
                format_money(admission.job_spent_before.value_or(Money{}), currency) + ")");
}

// What the webhooks say about the run (notify/payload.hpp).
RunFacts run_facts(const RunSettings& settings, const Admission& admission) {
  RunFacts facts{settings.identity};
  facts.currency = settings.loaded.policy.currency;
  facts.budget = admission.run_budget ? admission.run_budget : settings.budget;
  facts.rate_per_hour = settings.rate_per_hour;
  return facts;
}

// The `refused` event: delivered before spendcap exits, else left in the outbox.
void tell_refused(RunHost& host, std::vector<WebhookTarget> webhooks, const RunFacts& facts,
                  Ledger& ledger, const Environment& env, const Reporter& reporter,
                  const std::string& reason, const std::string& scope, const std::string& refusal) {
  auto notifier = host.make_notifier(std::move(webhooks), facts, ledger, env, reporter);
  if (!notifier) return;
  notifier->start();
  RunEvent refused{"refused", reason, scope, "refused: " + refusal};
  refused.exit_code = to_int(ExitCode::refused);  // no command ran: it has no exit of its own
  refused.ended = true;
  notifier->notify(refused);
  finish_run_notifier(*notifier, ledger, facts, true, reporter);
}

// The crash-loop guard, before admission: 0 to go on (after the back-off wait, with
// --retry-backoff), else the exit status of the refusal (120), recorded as a refused row.
CrashLoopVerdict crash_loop_verdict(const RunSettings& settings, const RunStart& start,
                                    Ledger& ledger, bool retry_backoff, CommandHistory* history_out,
                                    std::vector<std::string>* counted_out) {
  CrashLoopGuard guard = settings.loaded.policy.guards.crash_loop.value_or(CrashLoopGuard{});
  if (!guard.enabled) return {};
  CommandHistory history = ledger.command_history(start.fingerprint, to_seconds(guard.window));
  // Only the caller's own runs count, unless the policy shares the count (guards.crash_loop.
  // shared): another user's crash loop must not refuse this user's run (issue 29).
  if (!guard.shared) {
    std::erase_if(history.runs, [&](const RunView& run) { return run.user != start.user; });
  }
  std::vector<std::string> counted;  // whose failures counted, for the refusal
  for (const RunView& run : history.runs) {
    if (run.status == RunStatus::failed &&
        std::find(counted.begin(), counted.end(), run.user) == counted.end()) {
      counted.push_back(run.user);
    }
  }
  std::vector<PastRun> past;
  for (const RunView& run : history.runs) {
    PastRun p;
    p.started_at = run.started_at;
    p.finished_at = run.finished_at;
    switch (run.status) {
      case RunStatus::running:
        p.ended = PastRun::Ended::running;
        break;
      case RunStatus::succeeded:
        p.ended = PastRun::Ended::succeeded;
        break;
      case RunStatus::failed:
        // A run spendcap could not launch failed by no fault of the command.
        p.ended = run.reason == "not launched" ? PastRun::Ended::other : PastRun::Ended::failed;
        break;
      default:
        p.ended = PastRun::Ended::other;
    }
    p.crash_loop_refusal =
        run.status == RunStatus::refused && run.reason.find(kCrashLoopReason) != std::string::npos;
    p.cleared = run.tags.count(kCrashLoopClearedTag) > 0;
    past.push_back(p);
  }
  if (history_out) *history_out = history;
  if (counted_out) *counted_out = std::move(counted);
  return decide_crash_loop(past, history.now, guard.max_failures, guard.window, retry_backoff);
}

int check_crash_loop(RunHost& host, const RunSettings& settings, RunStart& start, Ledger& ledger,
                     std::vector<WebhookTarget>& webhooks, const Environment& env,
                     const Reporter& reporter) {
  CrashLoopGuard guard = settings.loaded.policy.guards.crash_loop.value_or(CrashLoopGuard{});
  if (!guard.enabled) return 0;
  CommandHistory history;
  std::vector<std::string> counted;  // whose failures counted, for the refusal
  CrashLoopVerdict verdict =
      crash_loop_verdict(settings, start, ledger, settings.retry_backoff, &history, &counted);
  if (settings.clear_crash_loop) {
    if (verdict.failures == 0) {
      reporter.line("--clear-crash-loop: no failures of this command to clear; starting as usual");
      return 0;
    }
    // The failures' own user, a member of the team's budget, or the ledger's owner: not anyone
    // who happens to run the same command line.
    bool own = std::any_of(history.runs.begin(), history.runs.end(), [](const RunView& run) {
      return run.status == RunStatus::failed && run.user == user_name();
    });
    if (!own && !ledger.caller_is_owner()) {
      if (settings.identity.team.empty()) {
        throw Error("--clear-crash-loop", "the failures are another user's and the run has no team",
                    "ask their user or the ledger's owner to clear it");
      }
      require_membership(ledger, {Scope{ScopeKind::team, settings.identity.team}},
                         "clear the crash loop of its runs");
    }
    std::string by = user_name() + "@" + host_name();
    start.tags[kCrashLoopClearedTag] = by;
    reporter.line("crash-loop guard cleared by " + by + " (" + std::to_string(verdict.failures) +
                  " failures; the ledger keeps it as this run's tag " + kCrashLoopClearedTag +
                  "): starting");
    return 0;
  }
  if (verdict.refuse) {
    RefusalCount count = ledger.record_refused(start, std::string("refused: ") + kCrashLoopReason);
    // The `refused` event goes out once per window (verdict.send_refused_event): a job knocking
    // again and again does not flood the channel.
    verdict.message += " (failures counted: " + join(counted, ", ") +
                       (guard.shared ? "'s; guards.crash_loop.shared counts every user's)"
                                     : "'s own; other users' are not counted)");
    Admission refused;
    refused.refusal =
        verdict.message + (verdict.send_refused_event ? "" : " (refused before in this window)");
    refused.run_budget = settings.budget;
    refused.refusal_count = count;
    if (verdict.send_refused_event && count.recorded && !webhooks.empty()) {
      tell_refused(host, std::move(webhooks), run_facts(settings, refused), ledger, env, reporter,
                   kCrashLoopReason, "", verdict.message);
    }
    return refuse(settings, refused, reporter);
  }
  if (verdict.backoff > Nanos{}) {
    reporter.line(verdict.message);
    // The stop signals are blocked: the wait ends early on one, and spendcap dies by it.
    if (int signal = host.wait_unless_stopped(verdict.backoff)) reraise(signal);
  }
  return 0;
}

}  // namespace spendcap
