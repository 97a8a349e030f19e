#include "spendcap/gpu/busy_window.hpp"

#include <algorithm>
#include <map>

namespace spendcap {

BusyWindow process_busy(const std::vector<GpuProcessSample>& samples,
                        const std::vector<unsigned long long>& device_times_us,
                        const std::set<unsigned>& ours, unsigned long long last_seen_us) {
  BusyWindow w;
  w.last_seen_us = last_seen_us;
  std::set<unsigned long long> times;
  // Each own pid's newest sample (the driver gives one; a second would be a driver quirk, and the
  // newest is the one that speaks for the latest segment).
  std::map<unsigned, GpuProcessSample> own;
  for (const GpuProcessSample& s : samples) {
    if (s.timestamp_us <= last_seen_us) continue;
    times.insert(s.timestamp_us);
    if (!ours.count(s.pid)) {
      w.others = true;
      continue;
    }
    auto [at, added] = own.emplace(s.pid, s);
    if (!added && s.timestamp_us > at->second.timestamp_us) at->second = s;
  }
  for (unsigned long long t : device_times_us) {
    if (t > last_seen_us) times.insert(t);
  }
  if (times.empty()) return w;
  w.fresh = true;
  // One driver sample gives each process its own timestamp, a little apart: timestamps within
  // kSameSampleUs of a sample's first are that sample (the driver samples at most every 1/6 s).
  std::vector<unsigned long long> ends;  // each sample's last timestamp
  unsigned long long first = 0;
  for (unsigned long long t : times) {
    if (ends.empty() || t - first > kSameSampleUs) {
      ends.push_back(t);
      first = t;
    } else {
      ends.back() = t;
    }
  }
  auto sample_of = [&](unsigned long long t) {
    return static_cast<std::size_t>(std::lower_bound(ends.begin(), ends.end(), t) - ends.begin());
  };
  unsigned long long start = last_seen_us;
  for (std::size_t j = 0; j < ends.size(); ++j) {
    double seconds = static_cast<double>(ends[j] - start) / 1e6;
    start = ends[j];
    double percent = 0;
    for (const auto& [pid, s] : own) {
      std::size_t k = sample_of(s.timestamp_us);
      // Its sample speaks for the window up to it: the driver keeps only the newest, and a
      // value per earlier segment is not to be had. Polling at about the driver's rate keeps
      // such windows to one sample.
      if (k >= j) percent += s.sm_percent;
    }
    w.measured_seconds += seconds;
    w.busy_seconds += std::min(100.0, percent) / 100.0 * seconds;
  }
  w.last_seen_us = *times.rbegin();
  return w;
}

BusyWindow device_busy(const std::vector<GpuDeviceSample>& samples,
                       unsigned long long last_seen_us) {
  BusyWindow w;
  w.last_seen_us = last_seen_us;
  std::vector<GpuDeviceSample> sorted;
  for (const GpuDeviceSample& s : samples) {
    if (s.timestamp_us > last_seen_us) sorted.push_back(s);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.timestamp_us < b.timestamp_us; });
  unsigned long long start = last_seen_us;
  for (const GpuDeviceSample& s : sorted) {
    if (s.timestamp_us == start) continue;
    double seconds = static_cast<double>(s.timestamp_us - start) / 1e6;
    start = s.timestamp_us;
    w.measured_seconds += seconds;
    w.busy_seconds += std::min(100u, s.percent) / 100.0 * seconds;
    w.fresh = true;
  }
  w.last_seen_us = start;
  return w;
}

}  // namespace spendcap
