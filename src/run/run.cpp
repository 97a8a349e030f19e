#include "spendcap/run/run.hpp"

#include <fcntl.h>
#include <signal.h>

#include <cerrno>

#include "spendcap/base/text.hpp"
#include "spendcap/run/admission.hpp"
#include "spendcap/run/dry_run.hpp"
#include "spendcap/run/estimate_fit.hpp"
#include "spendcap/run/execution.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/lost_runs.hpp"
#include "spendcap/run/membership.hpp"
#include "spendcap/run/run_dir.hpp"
#include "spendcap/run/run_notifier.hpp"
#include "spendcap/run/settings.hpp"
#include "spendcap/shared_runner/adoption.hpp"
#include "spendcap/supervise/metrics_part.hpp"
#include "spendcap/supervise/metrics_part_writer.hpp"
#include "spendcap/supervise/reporter.hpp"
#include "spendcap/supervise/run_env.hpp"
#include "spendcap/supervise/supervisor.hpp"

namespace spendcap {

namespace {

// --log FILE: appended to, made if missing; -1 without the flag.
int open_log(const RunRequest& request) {
  if (!request.log) return -1;
  int fd = ::open(request.log->c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd < 0) {
    throw Error("--log " + *request.log, "cannot open it: " + errno_text(errno),
                "give a file in a directory you can write");
  }
  return fd;
}

}  // namespace

int run_steps(const RunRequest& request, const Inherited& inherited) {
  return run_steps(request, inherited, *system_run_host());
}

int run_steps(const RunRequest& request, const Inherited& inherited, RunHost& host) {
  if (request.status_file) check_status_file_path(*request.status_file);
  // No stop signal may kill spendcap half-way (a run admitted but never launched): they stay
  // blocked until the supervisor's event loop handles them. The command gets the caller's mask.
  block_stop_signals(true);
  for (int signal : kIgnoredBySupervisor) ::signal(signal, SIG_IGN);
  Reporter reporter(request.quiet, request.title, open_log(request));
  // Under the privileged runner: the front's environment (the job's), not the runner's own.
  const RunnerRun* runner = host.runner();
  Environment env = host.environment();
  refuse_redirecting_environment(env);
  TestSwitches switches = TestSwitches::from(env);
  RunSettings settings =
      resolve_run_settings(request, env, PolicySearch::from_environment(request.policy));
  require_locked_policy_when_setgid(settings.loaded.locked, settings.ledger_url);
  if (settings.loaded.policy.metrics_dir) {
    require_runner_metrics_dir(settings.loaded);
    check_metrics_dir(*settings.loaded.policy.metrics_dir);
    check_shared_metrics_dir(*settings.loaded.policy.metrics_dir, settings.loaded.locked);
  }
  StoragePlan storage = checkpoint_storage(request, settings);
  if (switches.storage_every_second) storage.interval = std::chrono::seconds(1);
  if (switches.any()) {
    if (settings.loaded.locked) {
      throw Error("SPENDCAP_TEST_SWITCHES",
                  "test-only switches are refused under the locked policy " +
                      settings.loaded.locked_source);
    }
    reporter.error("test-only switches in effect: " + env.at("SPENDCAP_TEST_SWITCHES"));
  }
  // 127 and 126 before anything is written to the ledger.
  auto path = env.find("PATH");
  std::string executable =
      resolve_executable(request.command.front(), path == env.end() ? "" : path->second);
  const std::string& run_id = settings.identity.id;
  RunDir run_dir(env, run_id);
  // Webhook variables and URLs are checked before anything is written to the ledger.
  std::vector<WebhookTarget> webhooks = run_webhook_targets(
      settings.loaded.policy, settings.webhook_urls, env, settings.loaded.locked_policy);
  // Every check above holds for a dry run too; what follows would write the ledger.
  if (request.dry_run) return dry_run(settings, executable);

  // Metrics on the setgid install: the writer keeps the group the ledger's open drops for good.
  std::shared_ptr<MetricsSink> metrics_sink;
  if (settings.loaded.policy.metrics_dir && installed_setgid()) {
    metrics_sink = start_runner_metrics_writer(
        *settings.loaded.policy.metrics_dir,
        MetricsBinding{run_id, settings.identity.team, settings.loaded.policy.currency});
  }

  std::shared_ptr<Ledger> ledger = open_run_ledger(host, settings, switches, reporter);
  require_estimate_fits(settings, *ledger);  // --estimate-steps (estimate_fit.hpp)
  require_membership(*ledger, named_scopes(settings.identity), "charge runs to it");
  RunStart start = make_run_start(settings);
  start.webhooks = lost_event_webhooks(webhooks);  // lost_runs.hpp
  if (int code = check_crash_loop(host, settings, start, *ledger, webhooks, env, reporter))
    return code;
  Admission admission = ledger->begin_run(start);
  // Its admission reconciled what was due: their lost events are queued (lost_runs.hpp).
  tell_lost_runs(*ledger, settings.loaded.policy.currency);
  RunFacts facts = run_facts(settings, admission);
  if (!admission.admitted) {
    // Past the user's refusals recorded this minute, counted only: no webhook either.
    if (!webhooks.empty() && admission.refusal_count.recorded) {
      tell_refused(host, std::move(webhooks), facts, *ledger, env, reporter, admission.refusal,
                   admission.refused_by ? to_string(*admission.refused_by) : "", admission.refusal);
    }
    return refuse(settings, admission, reporter);
  }
  AdmittedRun admitted(*ledger, run_id);
  warn_about_reserve(settings, admission, reporter);
  say_job_budget_change(settings, admission, reporter);
  if (admission.lowered_by && settings.budget) {
    reporter.line("--budget " + format_money(*settings.budget, settings.loaded.policy.currency) +
                  " lowered to " +
                  format_money(*admission.run_budget, settings.loaded.policy.currency) +
                  ", the max_run of " + to_string(*admission.lowered_by));
  }

  return execute_run(
      AdmittedJob{settings, env, runner, host, switches, executable, run_dir, admission,
                  std::move(facts), std::move(webhooks), storage, metrics_sink},
      inherited, ledger, admitted, reporter);
}

}  // namespace spendcap
