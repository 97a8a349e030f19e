#include "spendcap/gpu/account.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace spendcap {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

const char* env_value(const char* const* env, const char* name) {
  std::size_t length = std::strlen(name);
  for (; env && *env; ++env) {
    if (std::strncmp(*env, name, length) == 0 && (*env)[length] == '=') return *env + length + 1;
  }
  return nullptr;
}

std::string joined(bool a, const char* a_text, bool b, const char* b_text) {
  if (a && b) return std::string(a_text) + " and " + b_text;
  if (a) return a_text;
  if (b) return b_text;
  return "";
}

}  // namespace

std::vector<std::string> allocated_gpus_from_environment(const char* const* env) {
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    const char* value = env_value(env, name);
    if (!value) continue;
    std::string text = value;
    if (text == "none" || text == "NoDevFiles") return {};
    return split_list(text);
  }
  return {};
}

std::vector<unsigned> pids_in_every_namespace(pid_t pid) {
  std::vector<unsigned> pids = {static_cast<unsigned>(pid)};
  // One read(2) of /proc/PID/status (about 1.5 KB): every sample reads it for each tree process.
  std::string path = "/proc/" + std::to_string(pid) + "/status";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pids;
  char buffer[4096];
  ssize_t length = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (length <= 0) return pids;
  buffer[length] = '\0';
  const char* line = std::strstr(buffer, "\nNSpid:");
  if (!line) return pids;
  const char* at = line + 7;
  while (*at && *at != '\n') {
    char* end = nullptr;
    unsigned long value = std::strtoul(at, &end, 10);
    if (end == at) break;
    auto p = static_cast<unsigned>(value);
    if (std::find(pids.begin(), pids.end(), p) == pids.end()) pids.push_back(p);
    at = end;
  }
  return pids;
}

GpuAccount::GpuAccount(GpuProbe& probe, std::vector<std::string> allocated)
    : probe_(probe), allocated_(std::move(allocated)) {
  for (const std::string& note : probe_.notes()) notes_.insert(note);
}

void GpuAccount::sample(double t, const std::vector<pid_t>& tree, unsigned long long wall_us) {
  // The last sample comes when the tree is empty: its interval belongs to the processes that
  // were there before.
  // A process's NSpid line never changes: read once per process, forgotten when it leaves the
  // tree.
  std::set<unsigned> ours;
  std::map<pid_t, std::vector<unsigned>> known;
  for (pid_t pid : tree) {
    auto cached = nspids_.find(pid);
    auto& pids = known[pid] =
        cached != nspids_.end() ? std::move(cached->second) : pids_in_every_namespace(pid);
    ours.insert(pids.begin(), pids.end());
  }
  nspids_ = std::move(known);
  if (ours.empty()) ours = last_ours_;
  last_ours_ = ours;
  double dt = last_t_ ? std::max(0.0, t - *last_t_) : 0.0;
  unsigned long long since_us = last_wall_us_;
  double total_busy = 0, total_joules = 0, gpus = 0;
  bool busy_measured = false, energy_measured = false;
  std::optional<double> busiest;

  for (const GpuDevice& device : probe_.devices()) {
    bool allocated =
        std::find_if(allocated_.begin(), allocated_.end(), [&](const auto& a) {
          return a == std::to_string(device.index) || (!device.uuid.empty() && a == device.uuid);
        }) != allocated_.end();
    auto pids = probe_.processes(device.index);
    bool used = false, others = false;
    if (pids) {
      for (unsigned pid : *pids) (ours.count(pid) ? used : others) = true;
    }
    auto found = state_.find(device.index);
    if (found == state_.end()) {
      if (!allocated && !used) continue;
      Device fresh;
      fresh.name =
          std::to_string(device.index) + (device.uuid.empty() ? "" : " (" + device.uuid + ")");
      fresh.allocated = allocated;
      fresh.since = t;
      found = state_.emplace(device.index, fresh).first;
    }
    Device& d = found->second;
    bool first = d.since == t || !last_t_;

    // Utilisation over the interval since the last sample.
    std::optional<double> utilisation, share;
    if (auto samples = probe_.process_utilisation(device.index, since_us)) {
      // Per timestamp: the run's processes' SM percent, and everyone's.
      std::map<unsigned long long, std::pair<double, double>> by_time;
      for (const GpuProcessSample& s : *samples) {
        auto& [run, all] = by_time[s.timestamp_us];
        if (ours.count(s.pid)) run += s.sm_percent;
        all += s.sm_percent;
        if (!ours.count(s.pid)) others = true;
      }
      double run_sum = 0, all_sum = 0;
      for (const auto& [stamp, pair] : by_time) {
        run_sum += std::min(100.0, pair.first);
        all_sum += std::min(100.0, pair.second);
      }
      utilisation = by_time.empty() ? 0.0 : run_sum / 100.0 / static_cast<double>(by_time.size());
      if (all_sum > 0) share = run_sum / all_sum;
      d.per_process = d.per_process || !first;
    } else if (auto u = probe_.device_utilisation(device.index)) {
      utilisation = *u / 100.0;
      d.device_level = d.device_level || !first;
      notes_.insert("GPU " + std::to_string(device.index) +
                    ": utilisation is device-level (no per-process utilisation)");
      if (others)
        notes_.insert("GPU " + std::to_string(device.index) +
                      ": device-level utilisation includes processes outside the run");
    }
    if (others) shared_ = true;
    if (!share && others && pids && !pids->empty()) {
      double mine = 0;
      for (unsigned pid : *pids) mine += ours.count(pid) ? 1 : 0;
      share = mine / static_cast<double>(pids->size());
    }

    // Energy: the counter's delta, else the power readings integrated (trapezoids).
    std::optional<double> joules;
    auto energy = probe_.energy_mj(device.index);
    auto power = probe_.power_mw(device.index);
    if (energy && d.last_energy_mj && *energy >= *d.last_energy_mj) {
      joules = static_cast<double>(*energy - *d.last_energy_mj) / 1000.0;
      d.counter = true;
    } else if (!energy && power && d.last_power_mw) {
      joules = (*power + *d.last_power_mw) / 2.0 / 1000.0 * dt;
      d.power = true;
    }
    d.last_energy_mj = energy;
    d.last_power_mw = power;
    if (joules && others) joules = *joules * share.value_or(0.0);

    if (first) continue;  // the first sample only sets where the counters start
    d.allocated_seconds += dt;
    gpus += 1;
    if (utilisation) {
      d.busy_seconds = d.busy_seconds.value_or(0) + *utilisation * dt;
      total_busy += *utilisation * dt;
      busy_measured = true;
      busiest = std::max(busiest.value_or(0.0), *utilisation);
    }
    if (joules) {
      d.joules = d.joules.value_or(0) + *joules;
      total_joules += *joules;
      energy_measured = true;
    }
  }
  if (last_t_ && gpus > 0) {
    last_utilisation_ = busiest;
    add_timeline(t, dt, busy_measured ? std::optional(total_busy) : std::nullopt,
                 energy_measured ? std::optional(total_joules) : std::nullopt, gpus);
  }
  last_t_ = t;
  last_wall_us_ = wall_us;
}

void GpuAccount::add_timeline(double t, double dt, std::optional<double> busy,
                              std::optional<double> joules, double gpus) {
  int minute = static_cast<int>(t / 60.0);
  auto flush = [&] {
    if (minute_seconds_ <= 0) return;
    GpuTimelinePoint point;
    point.minute = minute_;
    if (minute_busy_measured_ && minute_gpu_seconds_ > 0) {
      point.utilisation = minute_busy_ / minute_gpu_seconds_;
    }
    if (minute_energy_measured_) point.watts = minute_joules_ / minute_seconds_;
    if (timeline_.size() < kMaxTimelinePoints) timeline_.push_back(point);
    minute_gpu_seconds_ = minute_busy_ = minute_joules_ = minute_seconds_ = 0;
    minute_busy_measured_ = minute_energy_measured_ = false;
  };
  if (minute != minute_) {
    flush();
    minute_ = minute;
  }
  minute_seconds_ += dt;
  minute_gpu_seconds_ += dt * gpus;
  if (busy) {
    minute_busy_ += *busy;
    minute_busy_measured_ = true;
  }
  if (joules) {
    minute_joules_ += *joules;
    minute_energy_measured_ = true;
  }
}

GpuSummary GpuAccount::summary() const {
  GpuSummary s;
  bool per_process = false, device_level = false, counter = false, power = false;
  bool busy_unmeasured = false, energy_unmeasured = false;
  for (const auto& [index, d] : state_) {
    s.devices.push_back(d.name);
    s.allocated_seconds += d.allocated_seconds;
    if (d.busy_seconds) {
      s.busy_seconds = s.busy_seconds.value_or(0) + *d.busy_seconds;
    } else if (d.allocated_seconds > 0) {
      busy_unmeasured = true;
    }
    if (d.joules) {
      s.energy_joules = s.energy_joules.value_or(0) + *d.joules;
    } else if (d.allocated_seconds > 0) {
      energy_unmeasured = true;
    }
    per_process |= d.per_process;
    device_level |= d.device_level;
    counter |= d.counter;
    power |= d.power;
  }
  // A figure for some of the devices only is not the run's figure.
  if (busy_unmeasured) s.busy_seconds.reset();
  if (energy_unmeasured) s.energy_joules.reset();
  s.utilisation_source = joined(per_process, "per-process", device_level, "device-level");
  s.energy_source = joined(counter, "energy counter", power, "integrated power");
  s.shared = shared_;
  s.notes.assign(notes_.begin(), notes_.end());
  s.timeline = timeline_;
  // The minute being filled.
  if (minute_seconds_ > 0 && timeline_.size() < kMaxTimelinePoints) {
    GpuTimelinePoint point;
    point.minute = minute_;
    if (minute_busy_measured_ && minute_gpu_seconds_ > 0) {
      point.utilisation = minute_busy_ / minute_gpu_seconds_;
    }
    if (minute_energy_measured_) point.watts = minute_joules_ / minute_seconds_;
    s.timeline.push_back(point);
  }
  return s;
}

bool idle_gpu_update(std::optional<double>& idle_since, double t, std::optional<double> utilisation,
                     double below, double for_seconds) {
  if (!utilisation) return idle_since && t - *idle_since >= for_seconds;
  if (*utilisation >= below) {
    idle_since.reset();
    return false;
  }
  if (!idle_since) idle_since = t;
  return t - *idle_since >= for_seconds;
}

}  // namespace spendcap
