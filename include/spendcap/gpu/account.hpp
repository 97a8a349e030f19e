// The GPU accounting of one run: which devices are the run's, and per poll what part of the time
// since the last poll they were busy for the run (gpu/busy_window.hpp), measured or not, and the
// energy they drew for it. Driven by the GPU sampler's helper thread (never the event loop: NVML
// calls can block); single-threaded, and pure apart from the probe and /proc/self, so unit tests
// drive it with a fake probe and explicit times.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "spendcap/gpu/busy_window.hpp"
#include "spendcap/gpu/probe.hpp"

namespace spendcap {

// The devices the run's environment allocates: CUDA_VISIBLE_DEVICES (indices, UUIDs, UUID
// prefixes, MIG- UUIDs or the older MIG-GPU-UUID/GI/CI form), else Slurm's SLURM_STEP_GPUS /
// SLURM_JOB_GPUS (indices). "" or "none" / "NoDevFiles": none.
struct GpuAllocation {
  std::vector<std::string> entries;
  std::string source;        // "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", ...
  bool pci_order = false;    // CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA's indices are NVML's
  std::optional<int> count;  // --gpus N: how many the run holds, whichever they are
};
GpuAllocation gpu_allocation_from_environment(const char* const* env);
// The entries only (kept for callers that need no more).
std::vector<std::string> allocated_gpus_from_environment(const char* const* env);

// The allocation's entries as device indices, with a note for each one that cannot be resolved:
// UUIDs and prefixes through the probe, MIG-GPU-UUID/GI/CI by the slice's parent and instances,
// CUDA indices only where they are NVML's (PCI order, or one GPU).
std::set<unsigned> resolve_allocation(const GpuAllocation& allocation, GpuProbe& probe,
                                      std::vector<std::string>& notes);

// Whether /proc is this process's own (its /proc/self is our pid): only then do the tree's pids,
// read from /proc, match the pids NVML gives (translated into the caller's namespace).
bool proc_is_ours();

// One point of the downsampled timeline: a minute of the run.
struct GpuTimelinePoint {
  int minute = 0;                     // since launch
  std::optional<double> utilisation;  // 0..1 over the measured time of the run's GPUs
  std::optional<double> watts;        // the run's share of the GPUs' power, when measured
};

// One device's running totals (the idle guard takes differences of these).
struct GpuDeviceFigures {
  unsigned index = 0;
  double measured_seconds = 0, busy_seconds = 0;
  double allocated_until = 0;  // seconds since launch of its last poll
};

struct GpuSummary {
  std::vector<std::string> devices;    // "0 (GPU-8f6c...)" for each device that was the run's
  double allocated_seconds = 0;        // GPU-seconds the run held
  double measured_seconds = 0;         // of which the run's busy share was known
  std::optional<double> busy_seconds;  // busy GPU-seconds within the measured time; none: never
  std::optional<double> energy_joules;
  std::string utilisation_source;  // "per-process", "device-level", "GPM", joined by " and "
  std::string energy_source;       // "energy counter", "integrated power", or both
  bool shared = false;             // a device was also used by processes outside the run
  std::vector<std::string> notes;  // what was not measured, and why
  std::vector<GpuTimelinePoint> timeline;
  std::vector<GpuDeviceFigures> per_device;
  // Busy over measured time: an unmeasured period counts neither busy nor idle.
  std::optional<double> mean_utilisation() const {
    if (!busy_seconds || measured_seconds <= 0) return std::nullopt;
    return *busy_seconds / measured_seconds;
  }
  // The measured idle GPU-seconds as a fraction of the allocated ones (for idle spend).
  std::optional<double> idle_fraction() const {
    if (!busy_seconds || allocated_seconds <= 0) return std::nullopt;
    return std::max(0.0, measured_seconds - *busy_seconds) / allocated_seconds;
  }
};

// At most this many timeline points are kept (a day at one per minute); later minutes merge into
// the last point.
inline constexpr std::size_t kMaxTimelinePoints = 1440;

// The process lists are read every this many polls (and whenever the tree gains a process): they
// change rarely, and each list is a driver call per device.
inline constexpr int kProcessListEvery = 4;

class GpuAccount {
 public:
  GpuAccount(GpuProbe& probe, GpuAllocation allocation);

  // A poll at `t` (seconds since launch) with the tree's pids as our /proc shows them, and the
  // wall clock in microseconds (NVML's sample timestamps). The first poll covers the time since
  // launch: its samples are those newer than the launch's wall time.
  void sample(double t, const std::vector<pid_t>& tree, unsigned long long wall_us);

  bool has_devices() const { return !state_.empty(); }
  GpuSummary summary() const;

 private:
  struct Device {
    GpuDevice info;
    bool allocated = false;
    double since = 0;  // seconds since launch when it became the run's
    double allocated_seconds = 0, measured_seconds = 0, busy_seconds = 0;
    bool any_measured = false;
    std::optional<double> joules;
    std::optional<unsigned long long> last_energy_mj;
    std::optional<unsigned> last_power_mw;
    unsigned long long last_seen_us = 0;
    bool per_process = false, device_level = false, gpm = false, counter = false, power = false;
    std::vector<unsigned> pids, mps;  // the last process lists read
    bool pids_read = false;
  };

  struct Interval {
    double busy = 0, measured = 0, joules = 0, gpus = 0;
    bool energy_measured = false;
  };
  void poll(Device& d, const std::set<unsigned>& ours, unsigned long long wall_us, double dt,
            bool first, bool refresh, Interval& out);
  void add_timeline(double t, double dt, const Interval& interval);

  GpuProbe& probe_;
  GpuAllocation allocation_;
  std::set<unsigned> allocated_;
  bool proc_ours_ = true;
  std::map<unsigned, Device> state_;  // by device index: the run's devices
  std::set<unsigned> last_ours_;
  std::optional<double> last_t_;
  std::optional<double> first_t_;
  std::optional<double> first_watts_;  // the first measured interval's power, for [0, first_t_]
  unsigned long long launch_wall_us_ = 0;
  int polls_ = 0;
  bool shared_ = false;
  std::set<std::string> notes_;
  std::vector<GpuTimelinePoint> timeline_;
  // The minute being filled.
  double minute_measured_ = 0, minute_busy_ = 0, minute_joules_ = 0, minute_seconds_ = 0;
  bool minute_energy_measured_ = false;
  int minute_ = 0;
};

// The idle guard's decision, pure: `idle_since` is when the run's GPUs went under the threshold
// (kept by the caller). Returns true when they have stayed under `below` (0..1) for `for_seconds`.
// An unmeasured interval neither starts nor ends an idle stretch.
bool idle_gpu_update(std::optional<double>& idle_since, double t, std::optional<double> utilisation,
                     double below, double for_seconds);

// The run's utilisation over the time between two summaries, for the idle guard: the busiest of
// its devices over their measured time; none when a device of the run had no measured time in
// it (a busy device must not be taken for idle because it was not measured).
std::optional<double> utilisation_between(const GpuSummary& before, const GpuSummary& after);

}  // namespace spendcap
