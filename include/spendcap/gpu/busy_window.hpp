// The run's busy time on one device between two polls, from what the driver returned: pure, so the
// rules below are unit-tested without a driver.
//
// What NVML gives (nvml.h): nvmlDeviceGetProcessUtilization returns, for each process that had
// non-zero utilisation, its newest sample newer than lastSeenTimeStamp, each with its own CPU
// timestamp (microseconds), or NVML_ERROR_NOT_FOUND when there is none; nvmlDeviceGetSamples
// (NVML_GPU_UTILIZATION_SAMPLES) returns the device's own samples since a timestamp. The driver
// samples every 1/6 s to 1 s.
//
// The rules: the timestamps of every returned sample (any process's, and the device's), grouped
// into driver samples (kSameSampleUs), cut (last_seen, newest] into segments, each ending at a
// driver sample. In a segment, one of the
// run's pids was
//   - at its sample's SM percent where its sample ends the segment;
//   - at 0% where its newest sample is older, or it has none (the device sampled, it had no entry);
//   - at its sample's percent where its newest sample is younger (the driver keeps only the
//     newest per process: it speaks for the window up to it; polling at about the driver's rate
//     keeps a window to one sample, so this rarely spans more than one).
// The run's share of a segment is the sum over its own pids, capped at 100%; other tenants'
// samples only cut segments, never lower the share. No sample newer than last_seen at all: the
// period is unmeasured (neither busy nor idle), and last_seen stays.
#pragma once

#include <set>
#include <vector>

#include "spendcap/gpu/probe.hpp"

namespace spendcap {

// Timestamps this close to a sample's first timestamp belong to that same driver sample (each
// process's entry carries its own timestamp; the driver samples at most every 1/6 s).
inline constexpr unsigned long long kSameSampleUs = 50'000;

struct BusyWindow {
  double measured_seconds = 0;          // where the run's share is known
  double busy_seconds = 0;              // the run's busy time within them (0..measured_seconds)
  bool fresh = false;                   // some sample was newer than last_seen
  bool others = false;                  // a pid outside the run had a sample
  unsigned long long last_seen_us = 0;  // the newest timestamp seen (last_seen when none)
};

// Per-process: `samples` as the driver returned them (NOT_FOUND: empty), `device_times_us` the
// timestamps of the device's own samples over the same window (empty when not read), `ours` the
// run's pids as NVML reports them (the caller's PID namespace).
BusyWindow process_busy(const std::vector<GpuProcessSample>& samples,
                        const std::vector<unsigned long long>& device_times_us,
                        const std::set<unsigned>& ours, unsigned long long last_seen_us);

// Device-level: each device sample's percent covers the time since the previous one (or
// last_seen). The whole device, not the run: callers say "device-level".
BusyWindow device_busy(const std::vector<GpuDeviceSample>& samples,
                       unsigned long long last_seen_us);

}  // namespace spendcap
