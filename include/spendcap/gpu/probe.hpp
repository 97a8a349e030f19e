// GpuProbe: what spendcap reads of the GPUs, one device at a time. NvmlProbe reads it from NVML,
// loaded at run time through DynamicLibrary (libnvidia-ml.so.1, or $SPENDCAP_NVML_LIBRARY); unit
// tests drive the accounting with a fake probe. Every figure is optional: a measurement the driver
// does not offer (a missing symbol, NOT_SUPPORTED, MIG) is nullopt, never 0, and notes() says why.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spendcap {

struct GpuDevice {
  unsigned index = 0;
  std::string uuid;  // "GPU-8f6c...", "" when NVML did not say
};

// One per-process utilisation sample: the percent of the sample period the process's kernels ran
// on the SMs.
struct GpuProcessSample {
  unsigned pid = 0;  // host pid
  unsigned long long timestamp_us = 0;
  unsigned sm_percent = 0;
};

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  virtual const std::vector<GpuDevice>& devices() const = 0;
  // The host pids of the compute and graphics processes on device `index`; nullopt when neither
  // list can be read.
  virtual std::optional<std::vector<unsigned>> processes(unsigned index) = 0;
  // Per-process samples newer than `since_us` (microseconds, NVML's CPU timestamps); nullopt when
  // per-process utilisation is not supported (MIG, an old driver). An empty vector: supported, and
  // no process ran a kernel.
  virtual std::optional<std::vector<GpuProcessSample>> process_utilisation(
      unsigned index, unsigned long long since_us) = 0;
  // The device's utilisation over its last sample period, percent.
  virtual std::optional<unsigned> device_utilisation(unsigned index) = 0;
  // The device's energy counter, millijoules.
  virtual std::optional<unsigned long long> energy_mj(unsigned index) = 0;
  // The device's power draw, milliwatts.
  virtual std::optional<unsigned> power_mw(unsigned index) = 0;
  // What this probe cannot measure, and why ("no nvmlDeviceGetTotalEnergyConsumption in ...").
  virtual std::vector<std::string> notes() const = 0;
};

// NVML through dlopen. Null, with `why_not` set, when there is no usable NVML: the library cannot
// be loaded, or lacks nvmlInit_v2, or nvmlInit_v2 fails.
std::unique_ptr<GpuProbe> open_nvml_probe(std::string& why_not);

// The library open_nvml_probe loads: $SPENDCAP_NVML_LIBRARY, else libnvidia-ml.so.1.
std::string nvml_library_path();

}  // namespace spendcap
