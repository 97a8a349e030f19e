// What a run's GPUs did, as the ledger keeps it (RunRecord::gpu, RunFinal::gpu): every figure that
// was not measured is nullopt, never 0. Written with the final row; absent for runs finished
// before GPU measurement existed, or that never launched.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/money.hpp"

namespace spendcap {

// One minute of the run.
struct RunGpuPoint {
  int minute = 0;
  std::optional<double> utilisation;  // 0..1
  std::optional<double> watts;
};

struct RunGpu {
  std::string not_measured;  // why nothing was measured; "" when measured
  int devices = 0;
  double allocated_seconds = 0;  // GPU-seconds
  std::optional<double> busy_seconds;
  std::optional<Money> idle_spend;
  std::optional<double> energy_kwh;  // x PUE
  std::optional<double> co2_kg;
  std::optional<Money> energy_cost;  // USD at energy.usd_per_kwh; never part of spend
  std::string sources;               // "per-process; energy counter; shared"
  std::vector<RunGpuPoint> timeline;
  std::optional<double> mean_utilisation() const {
    if (!busy_seconds || allocated_seconds <= 0) return std::nullopt;
    return *busy_seconds / allocated_seconds;
  }
};

// The timeline as compact JSON text ([[minute, utilisation|null, watts|null], ...]) and back.
std::string timeline_to_text(const std::vector<RunGpuPoint>& timeline);
std::vector<RunGpuPoint> timeline_from_text(const std::string& text);

}  // namespace spendcap
