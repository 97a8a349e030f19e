// Estimates before launch: pure arithmetic over figures the caller gives (step time, model size,
// prices), so that a run reviewed before it starts costs less than one killed halfway. Nothing here
// reads a ledger or a policy; cli/report_commands.cpp fills the prices from them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace spendcap {

// From step time: steps x step time on `instances` at `rate_per_hour` (per instance).
struct StepEstimate {
  double wall_hours = 0;
  double instance_hours = 0;
  double cost = 0;
};
StepEstimate estimate_from_steps(double step_seconds, double steps, int instances,
                                 double rate_per_hour);

// From model size: about 6 x params x tokens FLOPs, at peak TFLOP/s x mfu per accelerator.
struct FlopsEstimate {
  double flops = 0;
  double achieved_tflops = 0;    // per accelerator
  double accelerator_hours = 0;  // independent of how many run at once
  double wall_hours = 0;         // at `gpus`
  std::optional<double> cost;    // with a price per accelerator-hour
};
FlopsEstimate estimate_from_size(double params, double tokens, double peak_tflops, double mfu,
                                 int gpus, std::optional<double> price_per_gpu_hour);

// Spot: the hours redone after interruptions (each loses `lost_hours` of work), priced at spot,
// beside the same hours on demand.
struct SpotEstimate {
  double interruptions = 0;
  double redone_hours = 0;
  double spot_cost = 0;       // (hours + redone) x spot price
  double on_demand_cost = 0;  // hours x on-demand price
};
SpotEstimate estimate_spot(double hours, double spot_price, double on_demand_price,
                           double interruptions_per_100h, double lost_hours);

// Reserved against on demand: the utilisation above which reserving is cheaper, and a year of each.
struct ReservedEstimate {
  double break_even = 0;  // reserved / on-demand, a fraction
  double reserved_yearly = 0;
  struct AtUse {
    double busy = 0;  // fraction
    double on_demand_yearly = 0;
  };
  std::vector<AtUse> on_demand_at;  // 30, 60 and 90% busy
};
inline constexpr double kHoursPerYear = 8760;
ReservedEstimate estimate_reserved(double reserved_price, double on_demand_price);

// Serving: the cost of a prediction at a sustained request rate and utilisation, per million; or
// from predictions per day (one replica all day), per thousand.
double serving_cost_per_million(double price_per_hour, double rps, double utilisation);
double serving_cost_per_thousand(double price_per_hour, double predictions_per_day);

// One GPU type priced for the same work (--compare).
struct GpuOffer {
  std::string name;
  double price_per_hour = 0;
  double memory_gb = 0;
  double peak_tflops = 0;
};
struct GpuChoice {
  GpuOffer offer;
  int gpus = 0;           // the fewest whose memory holds the training state
  bool fits_one = false;  // the state fits on one GPU
  double gpu_hours = 0;   // at the type's achieved throughput
  double wall_hours = 0;  // at `gpus`
  double cost = 0;
};
// State = params x bytes_per_param + activations; the work is 6ND FLOPs at peak x mfu. Cheapest
// first (ties by name).
std::vector<GpuChoice> compare_gpus(const std::vector<GpuOffer>& offers, double params,
                                    double tokens, double bytes_per_param, double activations_gb,
                                    double mfu);
// The cheapest type that holds the state on one GPU (scale up before scaling out); else the
// cheapest. nullptr when `choices` is empty.
const GpuChoice* recommended(const std::vector<GpuChoice>& choices);

}  // namespace spendcap
