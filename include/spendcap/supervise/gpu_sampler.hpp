// The GPU sampler: a RunPart that samples the run's GPUs every interval through a GpuProbe (NVML),
// accounts busy and idle GPU time and energy (gpu/account.hpp), runs the idle guard, and leaves
// the run's GPU report in the outcome at the end.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spendcap/base/duration.hpp"
#include "spendcap/base/money.hpp"
#include "spendcap/gpu/account.hpp"
#include "spendcap/gpu/input_hint.hpp"
#include "spendcap/ledger/run_gpu.hpp"
#include "spendcap/process/process_tree.hpp"
#include "spendcap/spend/trip.hpp"

namespace boost::asio {
class io_context;
}

namespace spendcap {

class Meter;
class Reporter;
class RunPart;

struct GpuPlan {
  bool enabled = true;                 // false: no NVML is loaded (SPENDCAP_NVML_LIBRARY=none)
  std::vector<std::string> allocated;  // indices or UUIDs (allocated_gpus_from_environment)
  GpuAllocation allocation;            // the same with its source and CUDA_DEVICE_ORDER; wins
                                       // when it has entries
  double pue = 1.0;
  std::optional<double> kg_co2_per_kwh;
  std::optional<double> usd_per_kwh;  // reported, never added to spend
  // The idle guard: the run's GPUs under `idle_below` (0..1) for `idle_for` stop the run.
  std::optional<double> idle_below;
  Nanos idle_for = std::chrono::minutes(30);
  // Billing (defaults.billing / --billing): measured charges the GPU part of the rate by busy GPU
  // time at the end; the meter, the ceilings and the trip stay at the allocated rate.
  bool measured_billing = false;
  Money gpu_rate_per_hour;  // the part of the burn rate that buys the GPUs
};

// What the run's GPUs did, for the last line, the status file and the ledger.
struct GpuReport {
  std::string not_measured;  // why there is no figure at all; "" when measured
  GpuSummary summary;
  std::optional<Money> idle_spend;   // the part of the spend that bought idle GPU time
  std::optional<double> energy_kwh;  // x PUE
  std::optional<double> co2_kg;
  std::optional<Money> energy_cost;
  double pue = 1.0;
  // "allocated" or "measured": how the run's spend was billed. Measured billing asked for but
  // without busy GPU time measured falls back to allocated (billing_note says why).
  std::string billing = "allocated";
  std::string billing_note;
  std::optional<Money> allocated_spend;  // the spend at the allocated rate, under measured billing
  std::optional<Money> measured_spend;   // the run's spend under measured billing
  // Where the time went when the GPUs were mostly idle (gpu/input_hint.hpp); none otherwise.
  std::optional<InputHint> input_hint;
};

// Fills `report` at the end. `members` returns the tree's live processes; `trip` stops the run
// (the idle guard).
std::unique_ptr<RunPart> make_gpu_sampler(boost::asio::io_context& io, const Reporter& reporter,
                                          const Meter& meter, const GpuPlan& plan, Nanos interval,
                                          std::function<std::vector<ProcStat>()> members,
                                          std::function<void(const Trip&)> trip,
                                          std::optional<GpuReport>& report);

// "GPU: 2 devices, 1.2 of 2.0 GPU-hours busy (60%), idle spend $4.00; energy 1.3 kWh (energy
// counter, PUE 1.2), 0.5 kg CO2, $0.20 at $0.15/kWh (not added to spend)", or "GPU: not
// measured (why)".
std::string gpu_report_line(const GpuReport& report, const std::string& currency);

// The report as the ledger keeps it.
RunGpu to_run_gpu(const GpuReport& report);

}  // namespace spendcap
