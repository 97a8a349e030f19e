#include "spendcap/report/estimate.hpp"

#include <algorithm>
#include <cmath>

namespace spendcap {

StepEstimate estimate_from_steps(double step_seconds, double steps, int instances,
                                 double rate_per_hour) {
  StepEstimate e;
  e.wall_hours = step_seconds * steps / 3600.0;
  e.instance_hours = e.wall_hours * instances;
  e.cost = e.instance_hours * rate_per_hour;
  return e;
}

FlopsEstimate estimate_from_size(double params, double tokens, double peak_tflops, double mfu,
                                 int gpus, std::optional<double> price_per_gpu_hour) {
  FlopsEstimate e;
  e.flops = 6.0 * params * tokens;
  e.achieved_tflops = peak_tflops * mfu;
  e.accelerator_hours = e.flops / (e.achieved_tflops * 1e12) / 3600.0;
  e.wall_hours = e.accelerator_hours / std::max(gpus, 1);
  if (price_per_gpu_hour) e.cost = e.accelerator_hours * *price_per_gpu_hour;
  return e;
}

SpotEstimate estimate_spot(double hours, double spot_price, double on_demand_price,
                           double interruptions_per_100h, double lost_hours) {
  SpotEstimate e;
  e.interruptions = hours * interruptions_per_100h / 100.0;
  e.redone_hours = e.interruptions * lost_hours;
  e.spot_cost = (hours + e.redone_hours) * spot_price;
  e.on_demand_cost = hours * on_demand_price;
  return e;
}

ReservedEstimate estimate_reserved(double reserved_price, double on_demand_price) {
  ReservedEstimate e;
  e.break_even = reserved_price / on_demand_price;
  e.reserved_yearly = reserved_price * kHoursPerYear;
  for (double busy : {0.3, 0.6, 0.9}) {
    e.on_demand_at.push_back({busy, on_demand_price * kHoursPerYear * busy});
  }
  return e;
}

double serving_cost_per_million(double price_per_hour, double rps, double utilisation) {
  return price_per_hour / (rps * 3600.0 * utilisation) * 1e6;
}

double serving_cost_per_thousand(double price_per_hour, double predictions_per_day) {
  return price_per_hour * 24.0 / predictions_per_day * 1e3;
}

std::vector<GpuChoice> compare_gpus(const std::vector<GpuOffer>& offers, double params,
                                    double tokens, double bytes_per_param, double activations_gb,
                                    double mfu) {
  const double state_gb = params * bytes_per_param / 1e9 + activations_gb;
  std::vector<GpuChoice> choices;
  for (const GpuOffer& offer : offers) {
    GpuChoice c;
    c.offer = offer;
    c.gpus = std::max(1, static_cast<int>(std::ceil(state_gb / offer.memory_gb - 1e-12)));
    c.fits_one = c.gpus == 1;
    FlopsEstimate f =
        estimate_from_size(params, tokens, offer.peak_tflops, mfu, c.gpus, offer.price_per_hour);
    c.gpu_hours = f.accelerator_hours;
    c.wall_hours = f.wall_hours;
    c.cost = *f.cost;
    choices.push_back(c);
  }
  std::sort(choices.begin(), choices.end(), [](const GpuChoice& a, const GpuChoice& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    return a.offer.name < b.offer.name;
  });
  return choices;
}

const GpuChoice* recommended(const std::vector<GpuChoice>& choices) {
  for (const GpuChoice& c : choices) {
    if (c.fits_one) return &c;
  }
  return choices.empty() ? nullptr : &choices.front();
}

}  // namespace spendcap
