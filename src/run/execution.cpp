#include "spendcap/run/execution.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "spendcap/base/signals.hpp"
#include "spendcap/base/text.hpp"
#include "spendcap/guards/progress.hpp"
#include "spendcap/ledger/spool.hpp"
#include "spendcap/process/output_relay.hpp"
#include "spendcap/process/process_tree.hpp"
#include "spendcap/process/tree_guard.hpp"
#include "spendcap/run/ledger_group.hpp"
#include "spendcap/run/run_notifier.hpp"
#include "spendcap/run/summary.hpp"
#include "spendcap/shared_runner/adoption.hpp"
#include "spendcap/supervise/gpu_sampler.hpp"
#include "spendcap/supervise/outcome.hpp"
#include "spendcap/supervise/run_env.hpp"
#include "spendcap/supervise/signal_forward.hpp"
#include "spendcap/supervise/supervisor.hpp"

namespace spendcap {

namespace {

// How long the final row may take before it is spooled instead: the job is already over, and a
// scheduler's SIGKILL may be on its way (see grace_on_signal).
constexpr auto kFinalRowTimeout = std::chrono::seconds(5);

std::vector<std::string> secret_variables(const Policy& policy) {
  std::vector<std::string> names;
  for (const Webhook& hook : policy.webhooks) {
    if (!hook.url_env.empty()) names.push_back(hook.url_env);  // a Slack URL is itself a secret
    if (hook.secret_env) names.push_back(*hook.secret_env);
  }
  return names;
}

std::string run_label(const RunIdentity& identity) {
  std::string label;
  auto add = [&label](const char* name, const std::string& value) {
    if (!value.empty()) label += (label.empty() ? "" : ", ") + std::string(name) + " " + value;
  };
  add("team", identity.team);
  add("experiment", identity.experiment);
  add("project", identity.project);
  add("job", identity.job_key);
  return label;
}

// GPU measurement: the devices the environment allocates, the policy's energy figures, and the
// idle guard (on by default: the policy's guards.idle_gpu, else its defaults).
GpuPlan make_gpu_plan(const Policy& policy, const Environment& env) {
  GpuPlan gpu;
  auto library = env.find("SPENDCAP_NVML_LIBRARY");
  gpu.enabled = library == env.end() || library->second != "none";
  std::vector<std::string> entries;
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  std::vector<const char*> pointers;
  for (const std::string& entry : entries) pointers.push_back(entry.c_str());
  pointers.push_back(nullptr);
  gpu.allocation = gpu_allocation_from_environment(pointers.data());
  gpu.allocated = gpu.allocation.entries;
  gpu.pue = policy.energy.pue;
  gpu.kg_co2_per_kwh = policy.energy.kg_co2_per_kwh;
  gpu.usd_per_kwh = policy.energy.usd_per_kwh;
  IdleGpuGuard idle = policy.guards.idle_gpu.value_or(IdleGpuGuard{});
  if (idle.enabled) gpu.idle_below = idle.below_percent / 100.0;
  gpu.idle_for = idle.for_duration;
  return gpu;
}

// What the guard launches: the command, its environment, the fds and signals spendcap inherited.
LaunchSpec make_launch_spec(const std::string& executable, const RunSettings& settings,
                            const Environment& env, const Inherited& inherited,
                            const Admission& admission, const RunDir& run_dir,
                            const std::string& cgroup_dir, bool take_terminal) {
  const RunIdentity& run = settings.identity;
  JobIdentity identity{run.id,
                       run.team,
                       run.experiment,
                       run.project,
                       admission.run_budget ? to_decimal(*admission.run_budget) : "",
                       signal_name(settings.checkpoint_signal),
                       run_dir.checkpoint_done(),
                       run_dir.progress()};
  LaunchSpec spec;
  spec.executable = executable;
  spec.argv = run.command;
  spec.env = job_environment(env, identity, secret_variables(settings.loaded.policy));
  spec.inherited = inherited;
  spec.cgroup_dir = cgroup_dir;
  spec.take_terminal = take_terminal;
  return spec;
}

// Records the final row, or spools it on this host when the ledger does not take it in time.
bool record_final(Supervisor& supervisor, const std::string& ledger_url, const RunOutcome& outcome,
                  const std::vector<std::int64_t>& outbox_delivered, const Reporter& reporter) {
  RunFinal final;
  final.id = outcome.run_id;
  final.status = outcome.status;
  final.reason = outcome.reason;
  final.spendcap_exit_code = outcome.exit_code;
  if (outcome.command_exit_code) {
    final.exit_code = *outcome.command_exit_code;
  } else if (outcome.command_signal) {
    final.exit_code = shell_status(*outcome.command_signal);
  }
  final.spend = outcome.spend;
  final.elapsed_seconds = outcome.elapsed_seconds;
  if (outcome.gpu) final.gpu = to_run_gpu(*outcome.gpu);
  if (outcome.progress) {
    final.metric_name = outcome.progress->metric_name;
    final.metric_value = outcome.progress->metric_value;
    final.units = outcome.progress->units;
    final.egress_gb = outcome.progress->egress_gb;
    if (!outcome.progress->last_line.empty()) {
      final.last_progress = RunLastProgress{outcome.progress->step, outcome.progress->total_steps,
                                            outcome.progress->last_line};
    }
    // As the heartbeats' (LiveProgress::at): the time its steps still needed at its pace, now.
    if (auto done_at = steps_done_at(*outcome.progress)) {
      final.progress_seconds_left = std::max(0.0, to_seconds(*done_at - now()));
    }
  }
  if (!outcome.checkpoint_signal.empty() && outcome.tripped_after_seconds) {
    final.checkpoint =
        RunCheckpoint{outcome.checkpoint_signal, outcome.checkpoint_signalled,
                      *outcome.tripped_after_seconds, outcome.checkpoint_written_after_seconds};
  }
  final.storage_peak_gb = outcome.storage_peak_gb;
  final.storage_spend = outcome.storage_spend;
  final.tracker = outcome.tracker;
  // Whatever fails here, the row is spooled and the run ends with its own status (issue 38).
  std::string error;
  try {
    error = supervisor.record_final(final, kFinalRowTimeout, outbox_delivered);
  } catch (const std::exception& record_error) {
    error = record_error.what();
  }
  if (error.empty()) return true;
  try {
    // A spooled row is checked against the run's last heartbeat when it is replayed, and
    // heartbeats are at the allocated rate: under measured billing the row is spooled at the
    // allocated spend (never less than was reported), giving up the measured discount.
    std::string note;
    if (outcome.gpu && outcome.gpu->allocated_spend &&
        *outcome.gpu->allocated_spend > final.spend) {
      final.spend = *outcome.gpu->allocated_spend;
      note = " (at the allocated spend: measured billing needs the ledger at the end)";
    }
    std::string path, fallback_why;
    with_ledger_group([&] { path = spool_final(ledger_url, final, &fallback_why); });
    if (!fallback_why.empty()) note += " (the spool failed: " + fallback_why + ")";
    reporter.error("ledger: " + error + "; the final row is spooled in " + path + note +
                   " and replayed by the next spendcap command");
  } catch (const Error& spool_error) {
    reporter.error("ledger: " + error +
                   "; spooling the final row failed too: " + format_error(spool_error));
  } catch (const std::exception& spool_error) {
    reporter.error("ledger: " + error +
                   "; spooling the final row failed too: " + spool_error.what());
  }
  return false;
}

// The guards that watch the run, from the flags and the policy.
GuardPlan make_guard_plan(const RunSettings& settings, const RunDir& run_dir) {
  const Policy& policy = settings.loaded.policy;
  GuardPlan plan;
  plan.progress_path = run_dir.progress();
  plan.require_fit = settings.require_fit;
  if (policy.guards.stall) plan.stall_after = policy.guards.stall->after;
  // The burn-rate guard: on where the experiment's budget says what it expects per hour.
  auto experiments = policy.budgets.find(ScopeKind::experiment);
  if (!settings.identity.experiment.empty() && experiments != policy.budgets.end()) {
    auto spec = experiments->second.find(settings.identity.experiment);
    if (spec != experiments->second.end() && spec->second.expected_per_hour) {
      BurnRateCheck check;
      check.factor = policy.guards.burn_rate.value_or(BurnRateGuard{}).factor;
      check.expected_per_hour = *spec->second.expected_per_hour;
      check.experiment = settings.identity.experiment;
      plan.burn_rate = check;
    }
  }
  return plan;
}

GuardOptions make_guard_options(const AdmittedJob& job) {
  const RunSettings& settings = job.settings;
  GuardOptions guard_options;
  guard_options.subreaper = !job.switches.no_subreaper;
  guard_options.run_dir = job.run_dir.path();
  guard_options.pid_namespace = settings.isolation != Isolation::none;
  guard_options.pid_namespace_required = settings.isolation == Isolation::pid;
  // Ticks come every interval; three missed (and never under 2 s: a loaded host delays timers)
  // mean the supervisor is stopped or hung.
  guard_options.stale_after = std::max<Nanos>(3 * settings.interval, std::chrono::seconds(2));
  return guard_options;
}

// The supervisor's plan: the run's figures and times, its guards, its tree, its notifier, its GPUs,
// its metrics and storage.
SupervisorPlan make_plan(const AdmittedJob& job, const std::string& ledger_url,
                         const StartedGuard& guard, WebhookNotifier* notifier, bool gave_terminal) {
  const RunSettings& settings = job.settings;
  const Admission& admission = job.admission;
  SupervisorPlan plan;
  plan.run_id = settings.identity.id;
  plan.label = run_label(settings.identity);
  plan.currency = settings.loaded.policy.currency;
  plan.rate_per_hour = settings.rate_per_hour;
  plan.run_budget = admission.run_budget;
  plan.grant = admission.grant;
  plan.on_trip = settings.on_trip;
  plan.on_signal = settings.on_signal;
  plan.checkpoint_signal = settings.checkpoint_signal;
  plan.mode = settings.mode;
  plan.warn_at = settings.warn_at;
  plan.sync = settings.sync;
  plan.claim_horizon = settings.claim_horizon;
  plan.interval = settings.interval;
  plan.verbose = settings.verbose;
  plan.checkpoint_done_path = job.run_dir.checkpoint_done();
  plan.gave_terminal = gave_terminal;
  if (!settings.node.empty()) {
    plan.multi_node_run_id = settings.identity.job_key;
    plan.node = settings.node;
  }
  if (settings.spot_notice) {
    plan.preemption_part = spot_notice_part(*settings.spot_notice);
    plan.on_preemption = settings.on_preemption;
  }
  plan.exit_window = settings.exit_window;
  plan.forward_signals.assign(std::begin(kForwardedByDefault), std::end(kForwardedByDefault));
  plan.forward_signals.insert(plan.forward_signals.end(), settings.forward_signals.begin(),
                              settings.forward_signals.end());
  GuardOptions guard_options = make_guard_options(job);
  plan.guard_ticks_lead = guard_options.stale_after + guard_options.orphan_kill_after;
  plan.isolation = guard.isolated ? "pid namespace" : "none: the job can signal spendcap";
  if (job.runner) {
    plan.isolation += "; supervisor and guard run as " + job.runner->service_user +
                      " (privileged runner: the user cannot signal, stop or ptrace them)";
  }
  plan.ledger = ledger_url;
  plan.guards = make_guard_plan(settings, job.run_dir);
  plan.guards.tracker_tagged = settings.identity.tags.count("tracker") > 0;
  RespawnLoopGuard respawn =
      settings.loaded.policy.guards.respawn_loop.value_or(RespawnLoopGuard{});
  if (respawn.enabled) {
    plan.guards.respawn = RespawnPlan{respawn.max_restarts, respawn.window, respawn.min_life,
                                      !job.switches.no_proc_connector};
  }
  plan.make_tree = [host = &job.host](pid_t root) { return host->make_tree(root); };
  plan.notifier = notifier;
  plan.gpu = make_gpu_plan(settings.loaded.policy, job.env);
  // --gpus N (with --gpu): how many GPUs the run holds, even where no variable names them.
  if (auto gpus = settings.identity.tags.find("gpus"); gpus != settings.identity.tags.end()) {
    plan.gpu.allocation.count = std::stoi(gpus->second);
  }
  if (settings.loaded.policy.metrics_dir) {
    plan.metrics = MetricsPlan{*settings.loaded.policy.metrics_dir, settings.identity.team,
                               settings.identity.experiment, job.metrics_sink};
  }
  plan.gpu.measured_billing = settings.loaded.policy.defaults.billing == Billing::measured;
  plan.gpu.gpu_rate_per_hour = settings.gpu_rate_per_hour;
  plan.storage = job.storage;
  return plan;
}

}  // namespace

int execute_run(AdmittedJob job, const Inherited& inherited, std::shared_ptr<Ledger> ledger,
                AdmittedRun& admitted, Reporter& reporter) {
  const RunSettings& settings = job.settings;
  const Environment& env = job.env;
  const TestSwitches& switches = job.switches;
  const Admission& admission = job.admission;
  const RunDir& run_dir = job.run_dir;
  RunFacts& facts = job.facts;
  RunHost& host = job.host;
  // Everything the guard needs is decided before it is forked. The cgroup: the privileged
  // runner's, else the run's own where the hierarchy is writable, else none (parentage).
  std::string cgroup_dir =
      host.make_cgroup("spendcap-" + settings.identity.id, !switches.no_cgroup);
  LaunchSpec spec = make_launch_spec(job.executable, settings, env, inherited, admission, run_dir,
                                     cgroup_dir, host.owns_terminal());

  // Orphans of the tree re-parent to the guard; should the guard die, to spendcap.
  if (!switches.no_subreaper) host.become_subreaper();
  GuardOptions guard_options = make_guard_options(job);
  // libcurl is loaded here (before the guard is forked) only when there is something to deliver.
  facts.started_at = host.unix_seconds();
  std::unique_ptr<WebhookNotifier> notifier =
      host.make_notifier(std::move(job.webhooks), facts, *ledger, env, reporter);
  // On a pipe the job's output goes through the relay, so spendcap's lines know where it ends
  // (the privileged runner's guard is forked before this, with the user's fds).
  std::unique_ptr<OutputRelay> relay = job.runner ? nullptr : host.start_output_relay();
  StartedGuard guard;
  auto fork_guard = [&] { guard = host.start_guard(spec, guard_options); };
  if (relay) {
    relay->hand_to_guard(fork_guard);
    reporter.relay_lines_to(relay.get());
  } else {
    fork_guard();
  }
  if (!guard.isolated && !guard.why_not_isolated.empty()) {
    reporter.error("isolation: no PID namespace here (" + guard.why_not_isolated +
                   "); the job runs without isolation");
  }
  admitted.launched();  // from here the supervisor's outcome is the run's final row
  // On a pipe a line needs no newline first while the job has written nothing since the last.
  reporter.set_job_write_count(guard.job_write_count);
  reporter.write_in_background();
  if (notifier) notifier->start();  // its thread only once the guard is forked

  SupervisorPlan plan = make_plan(job, ledger->url(), guard, notifier.get(), spec.take_terminal);
  Supervisor supervisor(std::move(plan), std::move(guard.link), host.terminal(), reporter, ledger);
  RunOutcome outcome = supervisor.run();
  outcome.tree_tracking = cgroup_dir.empty() ? "parentage" : "cgroup";
  outcome.isolation = guard.isolated ? "pid" : "none";
  // A stop signal that came after the tree was empty: the job is done, spendcap still dies by it.
  if (!outcome.reraise_signal) {
    if (int signal = take_pending_stop_signal()) {
      outcome.spendcap_signal = outcome.reraise_signal = signal;
      outcome.exit_code = shell_status(signal);
    }
  }

  bool recorded = record_final(supervisor, ledger->url(), outcome,
                               notifier ? notifier->acks() : std::vector<std::int64_t>{}, reporter);
  write_status(settings.status_file, outcome, reporter);
  run_dir.remove();
  if (!cgroup_dir.empty()) host.remove_cgroup();
  // The webhooks get at most their deadline; what is left waits in the outbox.
  if (notifier) finish_run_notifier(*notifier, *ledger, facts, recorded, reporter);
  say_summary(outcome, admission, settings.identity.job_key, reporter);
  int signal = outcome.reraise_signal ? outcome.reraise_signal : take_pending_stop_signal();
  if (relay) {
    reporter.flush();
    relay->drain(std::chrono::seconds(1));
  }
  if (signal) {
    reporter.flush();
    reraise(signal);
  }
  return outcome.exit_code;
}

}  // namespace spendcap
