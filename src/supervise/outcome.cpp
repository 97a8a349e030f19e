#include "spendcap/supervise/outcome.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "spendcap/base/error.hpp"
#include "spendcap/base/files.hpp"
#include "spendcap/base/json_text.hpp"
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
    json["busy_gpu_seconds"] = *s.busy_seconds;
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
  write_file_atomically(path, dump_json(to_json(outcome), 2) + "\n", 0644, "--status-file " + path);
}

}  // namespace spendcap
