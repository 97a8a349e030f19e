// GpuProbe: what spendcap reads of the GPUs, one device (or MIG slice) at a time. NvmlProbe reads
// it from NVML, loaded at run time through DynamicLibrary (libnvidia-ml.so.1, or
// $SPENDCAP_NVML_LIBRARY); unit tests drive the accounting with a fake probe. Every reading says
// how it went: a measurement the driver does not offer (a missing symbol, NOT_SUPPORTED, MIG) is
// never 0, and notes() says why. Not thread-safe: one thread (the GPU sampler's helper) uses it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spendcap {

struct GpuDevice {
  unsigned index = 0;  // spendcap's own numbering: NVML's index for whole GPUs, then the slices
  std::string uuid;    // "GPU-8f6c...", "MIG-...", "" when NVML did not say
  std::string model;   // nvmlDeviceGetName: "NVIDIA H100 80GB HBM3"
  // A MIG slice: the parent's index, its GPU and compute instance.
  std::optional<unsigned> parent;
  unsigned gpu_instance = 0, compute_instance = 0;
  bool mig_parent = false;  // a GPU in MIG mode: its work runs on its slices
  std::string name() const;
};

// One per-process utilisation sample: the percent of the sample period the process's kernels ran
// on the SMs.
struct GpuProcessSample {
  unsigned pid = 0;  // as the driver translated it into the caller's PID namespace
  unsigned long long timestamp_us = 0;
  unsigned sm_percent = 0;
};

// One device-level utilisation sample (nvmlDeviceGetSamples, NVML_GPU_UTILIZATION_SAMPLES), or,
// where the driver has no device samples (the symbol is missing or answers NOT_SUPPORTED), a point
// reading of nvmlDeviceGetUtilizationRates (the last sample period) stamped with the time it was
// read.
struct GpuDeviceSample {
  unsigned long long timestamp_us = 0;
  unsigned percent = 0;
  bool point_reading = false;  // from nvmlDeviceGetUtilizationRates
};

// How a reading went. not_found: nothing new (NOT_FOUND), not an error and not 0.
enum class GpuStatus { ok, not_found, not_supported, no_permission, gpu_lost, failed };
const char* gpu_status_text(GpuStatus status);

template <class T>
struct GpuReading {
  GpuStatus status = GpuStatus::failed;
  T value{};
  bool ok() const { return status == GpuStatus::ok; }
};

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  virtual const std::vector<GpuDevice>& devices() const = 0;
  // The pids of the compute and graphics processes on the device, in the caller's PID namespace.
  virtual GpuReading<std::vector<unsigned>> processes(unsigned index) = 0;
  // The MPS clients (nvmlDeviceGetMPSComputeRunningProcesses_v3); not_supported without MPS.
  virtual GpuReading<std::vector<unsigned>> mps_processes(unsigned index) = 0;
  // Per-process samples newer than `since_us`; not_found: none newer.
  virtual GpuReading<std::vector<GpuProcessSample>> process_utilisation(
      unsigned index, unsigned long long since_us) = 0;
  // The device's own utilisation samples newer than `since_us`; not_found: none newer. Without
  // device samples, one point reading of nvmlDeviceGetUtilizationRates (point_reading set).
  virtual GpuReading<std::vector<GpuDeviceSample>> device_samples(unsigned index,
                                                                  unsigned long long since_us) = 0;
  // A MIG slice's SM utilisation (percent) since the previous call, from GPM (Hopper and later);
  // not_found on the first call (it takes two samples), not_supported without GPM.
  virtual GpuReading<double> slice_utilisation(unsigned index) = 0;
  // The device's energy counter, millijoules.
  virtual std::optional<unsigned long long> energy_mj(unsigned index) = 0;
  // The device's power draw, milliwatts.
  virtual std::optional<unsigned> power_mw(unsigned index) = 0;
  // The device (or slice) whose UUID is `uuid` or starts with it (nvmlDeviceGetHandleByUUID for a
  // whole UUID); none when no device or several match.
  virtual std::optional<unsigned> find_uuid(const std::string& uuid) = 0;
  // What this probe cannot measure, and why ("no nvmlDeviceGetTotalEnergyConsumption in ...").
  virtual std::vector<std::string> notes() const = 0;
};

// NVML through dlopen. Null, with `why_not` set, when there is no usable NVML: the library cannot
// be loaded, or lacks nvmlInit_v2, or nvmlInit_v2 fails. nvmlInit_v2 can block for seconds (no
// persistence mode): call it off the event loop.
std::unique_ptr<GpuProbe> open_nvml_probe(std::string& why_not);

// The library open_nvml_probe loads: $SPENDCAP_NVML_LIBRARY, else libnvidia-ml.so.1.
std::string nvml_library_path();

}  // namespace spendcap
