// The GPU accounting of one run: which devices are the run's, and per sample what part of each
// interval they were busy for the run, and the energy they drew for it. Driven by the supervisor's
// GpuSampler every interval; pure apart from the probe and /proc (NSpid), so unit tests drive it
// with a fake probe and explicit times.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "spendcap/gpu/probe.hpp"

namespace spendcap {

// The devices allocated to the run by its environment: CUDA_VISIBLE_DEVICES (indices or UUIDs),
// else Slurm's SLURM_STEP_GPUS / SLURM_JOB_GPUS (indices). "" or "none" / "NoDevFiles": none.
std::vector<std::string> allocated_gpus_from_environment(const char* const* env);

// `pid` and every pid it has in nested PID namespaces (the NSpid line of /proc/PID/status): NVML
// reports the pids of the namespace the driver sees, which may be any of these.
std::vector<unsigned> pids_in_every_namespace(pid_t pid);

// One point of the downsampled timeline: a minute of the run.
struct GpuTimelinePoint {
  int minute = 0;                     // since launch
  std::optional<double> utilisation;  // 0..1 over the run's GPUs, when measured
  std::optional<double> watts;        // the run's share of the GPUs' power, when measured
};

struct GpuSummary {
  std::vector<std::string> devices;    // "0 (GPU-8f6c...)" for each device that was the run's
  double allocated_seconds = 0;        // GPU-seconds the run held
  std::optional<double> busy_seconds;  // GPU-seconds busy for the run; none: not measured
  std::optional<double> energy_joules;
  std::string utilisation_source;  // "per-process", "device-level", "per-process and device-level"
  std::string energy_source;       // "energy counter", "integrated power", "energy counter and ..."
  bool shared = false;             // a device was also used by processes outside the run
  std::vector<std::string> notes;  // what was not measured, and why
  std::vector<GpuTimelinePoint> timeline;
  std::optional<double> mean_utilisation() const {
    if (!busy_seconds || allocated_seconds <= 0) return std::nullopt;
    return *busy_seconds / allocated_seconds;
  }
};

// At most this many timeline points are kept (a day at one per minute); later minutes merge into
// the last point.
inline constexpr std::size_t kMaxTimelinePoints = 1440;

class GpuAccount {
 public:
  // `allocated`: indices or UUIDs (allocated_gpus_from_environment).
  GpuAccount(GpuProbe& probe, std::vector<std::string> allocated);

  // A sample at `t` (seconds since launch) with the tree's pids (as /proc shows them; each is
  // mapped through NSpid) and the wall clock in microseconds (NVML's sample timestamps).
  void sample(double t, const std::vector<pid_t>& tree, unsigned long long wall_us);

  // The utilisation of the run's GPUs over the last interval (the busiest device), when measured.
  std::optional<double> last_utilisation() const { return last_utilisation_; }
  bool has_devices() const { return !state_.empty(); }
  GpuSummary summary() const;

 private:
  struct Device {
    std::string name;
    bool allocated = false;
    double since = 0;  // seconds since launch when it became the run's
    double allocated_seconds = 0;
    std::optional<double> busy_seconds;
    std::optional<double> joules;
    std::optional<unsigned long long> last_energy_mj;
    std::optional<unsigned> last_power_mw;
    bool per_process = false, device_level = false, counter = false, power = false;
  };

  void add_timeline(double t, double dt, std::optional<double> busy, std::optional<double> joules,
                    double gpus);

  GpuProbe& probe_;
  std::vector<std::string> allocated_;
  std::map<unsigned, Device> state_;               // by device index: the run's devices
  std::map<pid_t, std::vector<unsigned>> nspids_;  // the tree's processes' pids in every namespace
  std::set<unsigned> last_ours_;
  std::optional<double> last_t_;
  unsigned long long last_wall_us_ = 0;
  std::optional<double> last_utilisation_;
  bool shared_ = false;
  std::set<std::string> notes_;
  std::vector<GpuTimelinePoint> timeline_;
  // The minute being filled: GPU-seconds, busy GPU-seconds, joules, and whether each was measured.
  double minute_gpu_seconds_ = 0, minute_busy_ = 0, minute_joules_ = 0, minute_seconds_ = 0;
  bool minute_busy_measured_ = false, minute_energy_measured_ = false;
  int minute_ = 0;
};

// The idle guard's decision, pure: `idle_since` is when the run's GPUs went under the threshold
// (kept by the caller). Returns true when they have stayed under `below` (0..1) for `for_seconds`.
// An unmeasured interval neither starts nor ends an idle stretch.
bool idle_gpu_update(std::optional<double>& idle_since, double t, std::optional<double> utilisation,
                     double below, double for_seconds);

}  // namespace spendcap
