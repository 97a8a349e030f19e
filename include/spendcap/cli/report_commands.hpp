// `spendcap estimate`, `spendcap report` and `spendcap accept`: the command-line side of
// report/estimate.hpp and report/report.hpp (prices and budgets from the policy and the ledger).
// Each returns its exit status; errors are thrown as spendcap::Error and printed by main.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spendcap/cli/admin.hpp"

namespace spendcap {

// The flags of `spendcap estimate`, as typed (validated where they are read, naming the flag).
struct EstimateRequest {
  LedgerChoice choice;
  // From step time, or from model size.
  std::optional<std::string> step_time, steps, params, tokens, peak_tflops, mfu;
  // Or the GPU-hours themselves (--gpu-hours), priced per GPU like a size estimate.
  std::optional<std::string> gpu_hours;
  // The price: --rate, or --gpu/--instance priced by the policy.
  std::optional<std::string> rate, gpu, gpus, instance, instances, pricing;
  // Spot.
  std::optional<std::string> interruptions_per_100h, lost_per_interruption;
  // Budgets it must fit.
  std::optional<std::string> team, experiment;
  // --compare
  bool compare = false;
  std::optional<std::string> bytes_per_param, activations_gb;
  // --serving
  bool serving = false;
  std::optional<std::string> price_per_hour, rps, utilisation, predictions_per_day;
  // --reserved / --on-demand
  std::optional<std::string> reserved, on_demand;
  bool json = false;
};

// Prints the estimate. 0, or 120 when it does not fit a budget named by --team/--experiment.
int estimate_command(const EstimateRequest& request);

struct ReportRequest {
  LedgerChoice choice;
  std::vector<std::string> by;  // team|experiment|project|user|host|day|tag:KEY
  std::optional<std::string> since, until, team, experiment;
  std::string format = "table";  // table, csv, json, focus, html
  std::optional<std::string> baseline, metric, metric_goal;
  // --csv-raw: csv and FOCUS cells exactly as stored, without the formula guard (csv_field).
  bool csv_raw = false;
};

int report_command(const ReportRequest& request);

// Marks a finished run's result as the one kept.
// "2026-12-01", "2026-12-01T10:00:00Z" or a time ago ("30d"), as unix seconds, as `report`
// reads --since and --until (a date alone for --until: through that day). Throws naming `flag`.
double parse_report_time(const std::string& text, const std::string& flag, bool end_of_day);

int accept_command(const LedgerChoice& choice, const std::string& run_id, const std::string& note);

}  // namespace spendcap
