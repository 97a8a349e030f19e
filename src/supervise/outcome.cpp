#include "spendcap/supervise/outcome.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"
#include "spendcap/base/json_numbers.hpp"
#include "spendcap/base/json_text.hpp"
#include "spendcap/base/signals.hpp"
#include "spendcap/policy/policy.hpp"

namespace spendcap {

namespace {

// Only what was measured: a figure that was not is absent, never 0.
nlohmann::json gpu_to_json(const GpuReport& report) {
  if (!report.not_measured.empty()) {
    return {{"measured", false}, {"why", report.not_measured}};
  }
  const GpuSummary& s = report.summary;
  nlohmann::json json = {
      {"measured", true},   {"devices", s.devices}, {"allocated_gpu_seconds", s.allocated_seconds},
      {"shared", s.shared}, {"notes", s.notes},     {"pue", report.pue}};
  if (s.busy_seconds) {
    json["busy_gpu_seconds"] = *s.busy_seconds;  // within the measured time
    json["measured_gpu_seconds"] = s.measured_seconds;
    json["mean_utilisation"] = *s.mean_utilisation();
    json["utilisation_source"] = s.utilisation_source;
  }
  if (report.idle_spend) json["idle_spend"] = money_to_json(*report.idle_spend);
  if (s.energy_joules) {
    json["energy_joules"] = *s.energy_joules;  // the devices' own, before PUE
    json["energy_source"] = s.energy_source;
  }
  if (report.energy_kwh) json["energy_kwh"] = *report.energy_kwh;
  if (report.co2_kg) json["co2_kg"] = *report.co2_kg;
  if (report.energy_cost) json["energy_cost_usd"] = money_to_json(*report.energy_cost);
  if (report.input_hint) {
    json["input_hint"] = {{"kind", report.input_hint->kind}, {"text", report.input_hint->text}};
  }
  return json;
}

// What the job reported, and the costs from it; a figure it did not report is left out.
nlohmann::json progress_json(const ProgressState& p) {
  nlohmann::json json = {{"good_lines", p.good_lines}, {"bad_lines", p.bad_lines}};
  if (p.step) json["step"] = *p.step;
  if (p.total_steps) json["total_steps"] = *p.total_steps;
  if (p.metric_name) json["metric"] = {{*p.metric_name, *p.metric_value}};
  if (p.units) json["units"] = *p.units;
  if (p.egress_gb) json["egress_gb"] = *p.egress_gb;
  if (p.tracker) json["tracker"] = *p.tracker;
  if (auto cost = cost_per_step(p)) json["cost_per_step"] = *cost;
  if (auto cost = cost_per_thousand_units(p)) json["cost_per_thousand_units"] = *cost;
  if (auto total = projected_total(p)) json["projected_total"] = money_to_json(*total);
  return json;
}

}  // namespace

nlohmann::json to_json(const RunOutcome& outcome) {
  nlohmann::json json = {
      {"run_id", outcome.run_id},
      {"status", to_string(outcome.status)},
      {"reason", outcome.reason},
      {"first_trip",
       outcome.first_trip.empty() ? nlohmann::json() : nlohmann::json(outcome.first_trip)},
      {"stopped_by_spendcap", outcome.stopped_by_spendcap},
      {"exit_code", outcome.exit_code},
      {"spendcap_signal", nullptr},
      {"command_exit_code", nullptr},
      {"command_signal", nullptr},
      {"currency", outcome.currency},
      {"spend", money_to_json(outcome.spend)},
      {"ceiling", money_to_json(outcome.ceiling)},
      {"budget", nullptr},
      {"rate_per_hour", money_to_json(outcome.rate_per_hour)},
      {"elapsed_seconds", outcome.elapsed_seconds},
      {"tripped_after_seconds", nullptr},
      {"checkpoint_signalled", outcome.checkpoint_signalled},
      {"grace_skipped", outcome.grace_skipped},
      {"trip_to_empty_seconds", nullptr},
  };
  if (outcome.command_exit_code) json["command_exit_code"] = *outcome.command_exit_code;
  if (outcome.spendcap_signal) json["spendcap_signal"] = signal_name(outcome.spendcap_signal);
  if (outcome.command_signal) json["command_signal"] = signal_name(*outcome.command_signal);
  if (outcome.budget) json["budget"] = money_to_json(*outcome.budget);
  if (outcome.tripped_after_seconds) json["tripped_after_seconds"] = *outcome.tripped_after_seconds;
  if (outcome.trip_to_empty_seconds) json["trip_to_empty_seconds"] = *outcome.trip_to_empty_seconds;
  if (!outcome.message.empty()) json["message"] = outcome.message;
  if (!outcome.tree_tracking.empty()) json["tree_tracking"] = outcome.tree_tracking;
  if (!outcome.isolation.empty()) json["isolation"] = outcome.isolation;
  if (outcome.gpu) json["gpu"] = gpu_to_json(*outcome.gpu);
  if (outcome.progress) json["progress"] = progress_json(*outcome.progress);
  json["billing"] = outcome.billing;
  if (outcome.gpu && outcome.gpu->allocated_spend && outcome.billing == "measured") {
    json["allocated_spend"] = money_to_json(*outcome.gpu->allocated_spend);
  }
  if (outcome.gpu && !outcome.gpu->billing_note.empty()) {
    json["billing_note"] = outcome.gpu->billing_note;
  }
  if (outcome.storage_spend) json["storage_spend"] = money_to_json(*outcome.storage_spend);
  if (outcome.storage_peak_gb) json["storage_peak_gb"] = *outcome.storage_peak_gb;
  return json;
}

void write_status_file(const std::string& path, const RunOutcome& outcome) {
  write_file_atomically(path, plain_json_numbers(dump_json(to_json(outcome), 2)) + "\n", 0644,
                        "--status-file " + path);
}

void settle_end(RunOutcome& outcome, const RunEnd& end) {
  int status = end.main_status;
  if (end.guard_lost) {
    outcome.status = RunStatus::killed;
    outcome.reason = "guard-lost";
    outcome.stopped_by_spendcap = true;
    outcome.exit_code = to_int(ExitCode::internal);
  } else if (end.trip) {
    // SIGTERM is how Slurm and Kubernetes take a node back (preemption, scancel, eviction).
    bool preempted = end.trip->kind == TripKind::preemption ||
                     (end.trip->kind == TripKind::signal && end.trip->signal == SIGTERM);
    outcome.status = preempted ? RunStatus::preempted : RunStatus::killed;
    outcome.reason = end.trip->reason;
    outcome.stopped_by_spendcap = true;
    outcome.exit_code = to_int(exit_code_for(*end.trip));
    outcome.spendcap_signal = end.trip->signal;
    outcome.reraise_signal = end.trip->signal;
  } else if (end.launch_failed && !end.main_exited) {
    outcome.status = RunStatus::failed;
    outcome.reason = "launch-failed";
    outcome.exit_code = to_int(ExitCode::internal);
  } else {
    outcome.exit_code = command_exit_status(status);
    outcome.status = outcome.exit_code == 0 ? RunStatus::succeeded : RunStatus::failed;
    // A SIGTERM that spendcap did not send is the scheduler's: a plain scancel signals every
    // process of the job at once, and the job may die of it before spendcap's own is handled.
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) outcome.status = RunStatus::preempted;
    outcome.reason = "exited";
    // Ctrl-C on the terminal went to the job alone: dying by the same signal tells the calling
    // shell to stop its loop, as it would have without spendcap.
    bool interrupted =
        WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGQUIT);
    if (end.gave_terminal && interrupted) outcome.reraise_signal = WTERMSIG(status);
    // Ctrl-C: the user ended it, it did not fail. The ledger keeps its statuses (killed: ended
    // by a signal); the reason and the end line say "interrupted".
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) {
      outcome.status = RunStatus::killed;
      outcome.reason = "interrupted";
    }
    // The terminal hung up: the kernel's SIGHUP reached the job (the shell that got it exited)
    // before spendcap's own trip. The user ended it as with Ctrl-C: killed (hangup), not failed
    // (a failure counts toward the crash-loop guard), and spendcap dies by it too.
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGHUP) {
      outcome.status = RunStatus::killed;
      outcome.reason = "hangup";
      if (end.gave_terminal) outcome.reraise_signal = SIGHUP;
    }
  }
}

std::vector<RunEvent> end_events(const RunOutcome& outcome, const RunEnd& run_end, Nanos elapsed) {
  std::vector<RunEvent> events;
  RunEvent end;
  end.event = run_end.guard_lost ? "lost" : run_end.trip ? "killed" : "finished";
  // A scheduler or spot reclaim took the node back: not a stop by the budget, nor a finish.
  if (!run_end.guard_lost && outcome.status == RunStatus::preempted) end.event = "preempted";
  end.reason = outcome.reason;
  // "budget:team:vision" tripped the team's budget.
  if (end.reason.rfind("budget:", 0) == 0) end.scope = end.reason.substr(7);
  end.spend = outcome.spend;
  end.exit_code = outcome.exit_code;
  if (outcome.command_exit_code) {
    end.command_exit_code = outcome.command_exit_code;
  } else if (outcome.command_signal) {
    end.command_exit_code = shell_status(*outcome.command_signal);
  }
  if (outcome.gpu) end.gpu_utilisation = outcome.gpu->summary.mean_utilisation();
  if (!outcome.checkpoint_signal.empty()) {  // spendcap stopped it (issue 40: say what was kept)
    end.checkpoint = outcome.checkpoint_signal == "none"        ? "no-signal"
                     : outcome.checkpoint_written_after_seconds ? "written"
                     : outcome.checkpoint_signalled == 0        ? "not-caught"
                                                                : "not-written";
  }
  if (outcome.progress) {
    end.last_step = outcome.progress->step;
    end.total_steps = outcome.progress->total_steps;
  }
  end.tracker = outcome.tracker;
  end.ended = true;
  end.message =
      to_string(outcome.status) + " (" + outcome.reason + ") after " + format_duration(elapsed);
  if (!outcome.first_trip.empty()) end.message += "; the run's first trip: " + outcome.first_trip;
  events.push_back(end);
  if (outcome.spend > outcome.ceiling && outcome.ceiling > Money{}) {
    end.event = "overrun";
    end.message = format_money(outcome.spend - outcome.ceiling, outcome.currency) +
                  " above its ceiling " + format_money(outcome.ceiling, outcome.currency);
    events.push_back(end);
  }
  return events;
}

}  // namespace spendcap
