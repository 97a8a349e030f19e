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

std::string joined(const std::vector<std::pair<bool, const char*>>& parts) {
  std::string text;
  for (const auto& [on, name] : parts) {
    if (on) text += (text.empty() ? "" : " and ") + std::string(name);
  }
  return text;
}

bool is_index(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

std::string gpu_label(const GpuDevice& d) {
  return d.parent ? "GPU " + std::to_string(d.index) + " (MIG slice of GPU " +
                        std::to_string(*d.parent) + ")"
                  : "GPU " + std::to_string(d.index);
}

}  // namespace

GpuAllocation gpu_allocation_from_environment(const char* const* env) {
  GpuAllocation a;
  const char* order = env_value(env, "CUDA_DEVICE_ORDER");
  a.pci_order = order && std::strcmp(order, "PCI_BUS_ID") == 0;
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    const char* value = env_value(env, name);
    if (!value) continue;
    a.source = name;
    // Slurm numbers the node's GPUs as NVML does (by PCI bus, from the device files).
    if (std::strcmp(name, "CUDA_VISIBLE_DEVICES") != 0) a.pci_order = true;
    std::string text = value;
    if (text == "none" || text == "NoDevFiles") return a;
    a.entries = split_list(text);
    return a;
  }
  return a;
}

std::vector<std::string> allocated_gpus_from_environment(const char* const* env) {
  return gpu_allocation_from_environment(env).entries;
}

std::set<unsigned> resolve_allocation(const GpuAllocation& allocation, GpuProbe& probe,
                                      std::vector<std::string>& notes) {
  std::set<unsigned> found;
  const auto& devices = probe.devices();
  std::vector<const GpuDevice*> whole;
  for (const GpuDevice& d : devices) {
    if (!d.parent) whole.push_back(&d);
  }
  bool identical = std::all_of(whole.begin(), whole.end(), [&](const GpuDevice* d) {
    return !d->model.empty() && d->model == whole.front()->model;
  });
  for (const std::string& entry : allocation.entries) {
    std::string what = allocation.source + "=" + entry;
    if (is_index(entry)) {
      unsigned index = static_cast<unsigned>(std::strtoul(entry.c_str(), nullptr, 10));
      if (index >= whole.size()) {
        notes.push_back(what + ": no such GPU (NVML lists " + std::to_string(whole.size()) + ")");
      } else if (allocation.pci_order || whole.size() == 1 || identical) {
        found.insert(whole[index]->index);
      } else {
        // CUDA's default order is fastest first, NVML's is by PCI bus: on unlike GPUs the same
        // number can name another device.
        notes.push_back(what +
                        ": not resolved (CUDA numbers GPUs fastest first unless "
                        "CUDA_DEVICE_ORDER=PCI_BUS_ID; give UUIDs)");
      }
      continue;
    }
    // The older MIG form: MIG-GPU-<parent UUID>/<GPU instance>/<compute instance>.
    if (entry.rfind("MIG-GPU-", 0) == 0) {
      std::string rest = entry.substr(4);
      std::size_t a = rest.find('/'), b = a == std::string::npos ? a : rest.find('/', a + 1);
      std::optional<unsigned> slice;
      if (b != std::string::npos) {
        std::string parent_uuid = rest.substr(0, a);
        unsigned gi = static_cast<unsigned>(std::strtoul(rest.c_str() + a + 1, nullptr, 10));
        unsigned ci = static_cast<unsigned>(std::strtoul(rest.c_str() + b + 1, nullptr, 10));
        for (const GpuDevice& d : devices) {
          if (!d.parent) continue;
          auto p = std::find_if(devices.begin(), devices.end(),
                                [&](const GpuDevice& x) { return x.index == *d.parent; });
          if (p != devices.end() && p->uuid == parent_uuid && d.gpu_instance == gi &&
              d.compute_instance == ci) {
            slice = d.index;
          }
        }
      }
      if (slice) {
        found.insert(*slice);
      } else {
        notes.push_back(what + ": no such MIG slice");
      }
      continue;
    }
    if (auto index = probe.find_uuid(entry)) {
      found.insert(*index);
    } else {
      notes.push_back(what + ": no GPU or MIG slice has this UUID (or the prefix names several)");
    }
  }
  if (allocation.count && static_cast<int>(found.size()) < *allocation.count) {
    notes.push_back(
        "--gpus " + std::to_string(*allocation.count) + ": " +
        std::to_string(*allocation.count - static_cast<int>(found.size())) +
        " of the run's GPUs are not identified (no " +
        (allocation.source.empty() ? std::string("CUDA_VISIBLE_DEVICES") : allocation.source) +
        " naming them): counted as allocated, not measured");
  }
  return found;
}

bool proc_is_ours() {
  char link[64] = {};
  ssize_t n = ::readlink("/proc/self", link, sizeof link - 1);
  return n > 0 && std::strtol(link, nullptr, 10) == static_cast<long>(::getpid());
}

GpuAccount::GpuAccount(GpuProbe& probe, GpuAllocation allocation)
    : probe_(probe), allocation_(std::move(allocation)) {
  for (const std::string& note : probe_.notes()) notes_.insert(note);
  std::vector<std::string> notes;
  allocated_ = resolve_allocation(allocation_, probe_, notes);
  notes_.insert(notes.begin(), notes.end());
  proc_ours_ = proc_is_ours();
  if (!proc_ours_) {
    notes_.insert(
        "the run's pids cannot be matched to NVML's: /proc is not this process's PID namespace "
        "(a container?); utilisation is device-level");
  }
}

void GpuAccount::sample(double t, const std::vector<pid_t>& tree, unsigned long long wall_us) {
  // The last poll comes when the tree is empty: its interval belongs to the processes that were
  // there before. Only the pids as our /proc shows them: the driver translates its pids into the
  // caller's namespace, and the job's inner pids (1, 2, ...) would match unrelated processes.
  std::set<unsigned> ours;
  for (pid_t pid : tree) ours.insert(static_cast<unsigned>(pid));
  if (ours.empty()) ours = last_ours_;
  bool grew = !std::includes(last_ours_.begin(), last_ours_.end(), ours.begin(), ours.end());
  last_ours_ = ours;
  if (!last_t_) {
    launch_wall_us_ = wall_us - static_cast<unsigned long long>(std::max(0.0, t) * 1e6);
    first_t_ = t;
  }
  double dt = last_t_ ? std::max(0.0, t - *last_t_) : std::max(0.0, t);
  bool refresh = grew || polls_ % kProcessListEvery == 0;
  ++polls_;
  Interval interval;

  for (const GpuDevice& device : probe_.devices()) {
    auto found = state_.find(device.index);
    bool allocated = allocated_.count(device.index) > 0;
    if (found == state_.end()) {
      // A GPU in MIG mode runs the work on its slices, which are listed as devices of their own.
      if (device.mig_parent && !allocated) continue;
      bool used = false;
      if (refresh || !last_t_) {
        auto pids = probe_.processes(device.index);
        if (pids.ok()) {
          for (unsigned pid : pids.value) used = used || ours.count(pid);
        }
        auto mps = probe_.mps_processes(device.index);
        if (mps.ok()) {
          for (unsigned pid : mps.value) used = used || ours.count(pid);
        }
      }
      if (!allocated && !used) continue;
      Device fresh;
      fresh.info = device;
      fresh.allocated = allocated;
      // A device found in use later became the run's at this poll; an allocated one at launch.
      fresh.since = allocated || !last_t_ ? 0 : t;
      fresh.last_seen_us = allocated || !last_t_ ? launch_wall_us_ : wall_us;
      found = state_.emplace(device.index, fresh).first;
      poll(found->second, ours, wall_us, dt, true, true, interval);
      continue;
    }
    poll(found->second, ours, wall_us, dt, false, refresh, interval);
  }
  if (interval.gpus > 0) add_timeline(t, dt, interval);
  last_t_ = t;
}

void GpuAccount::poll(Device& d, const std::set<unsigned>& ours, unsigned long long /*wall_us*/,
                      double dt, bool first, bool refresh, Interval& out) {
  const std::string label = gpu_label(d.info);
  if (refresh || !d.pids_read) {
    auto pids = probe_.processes(d.info.index);
    if (pids.ok()) {
      d.pids = pids.value;
      d.pids_read = true;
    } else if (pids.status == GpuStatus::no_permission) {
      notes_.insert(label + ": the process list needs more permission (NO_PERMISSION)");
    }
    auto mps = probe_.mps_processes(d.info.index);
    d.mps = mps.ok() ? mps.value : std::vector<unsigned>{};
  }
  bool others = false, ours_listed = false, mps_client = false;
  for (unsigned pid : d.pids) (ours.count(pid) ? ours_listed : others) = true;
  for (unsigned pid : d.mps) {
    if (ours.count(pid)) mps_client = true;
  }

  // Utilisation over the time since the last poll.
  std::optional<BusyWindow> window;
  double run_share = 1;  // of the device's energy
  if (d.info.parent) {
    auto u = probe_.slice_utilisation(d.info.index);
    if (u.ok()) {
      window = BusyWindow{};
      window->measured_seconds = dt;
      window->busy_seconds = std::min(100.0, u.value) / 100.0 * dt;
      d.gpm = true;
      if (others) notes_.insert(label + ": GPM utilisation is the slice's, shared with others");
    } else if (u.status != GpuStatus::not_found) {
      notes_.insert(label +
                    ": no per-process utilisation on MIG and no GPM (Hopper and later): "
                    "utilisation not measured");
    }
  } else {
    auto device = probe_.device_samples(d.info.index, d.last_seen_us);
    std::vector<unsigned long long> times;
    // No device samples on this driver: nvmlDeviceGetUtilizationRates, read at this poll, stands
    // in (the device's, not the run's). Its time is the poll's, not a driver sample's: it never
    // cuts the per-process samples' segments; it measures the interval where no process had a
    // sample (an idle run's NOT_FOUND), which would otherwise be lost.
    bool point = false;
    if (device.ok()) {
      for (const GpuDeviceSample& s : device.value) point = point || s.point_reading;
      if (!point) {
        for (const GpuDeviceSample& s : device.value) times.push_back(s.timestamp_us);
      }
    }
    auto process = proc_ours_ ? probe_.process_utilisation(d.info.index, d.last_seen_us)
                              : GpuReading<std::vector<GpuProcessSample>>{};
    if (point && (process.status == GpuStatus::not_found || !proc_ours_)) {
      notes_.insert(label +
                    ": device-level utilisation (nvmlDeviceGetUtilizationRates: the driver "
                    "gives no device samples)");
    }
    if (point && process.status == GpuStatus::not_found) {
      // No process had a sample since last_seen: the device's own reading over the interval
      // (an upper bound of the run's; 0% for an idle device).
      BusyWindow w = device_busy(device.value, d.last_seen_us);
      if (w.fresh) {
        window = w;
        d.device_level = true;
      }
      d.last_seen_us = std::max(w.last_seen_us, d.last_seen_us);
    } else if (process.status == GpuStatus::ok || process.status == GpuStatus::not_found) {
      BusyWindow w = process_busy(process.value, times, ours, d.last_seen_us);
      std::set<unsigned> everyone;
      bool own_sample = false;
      for (const GpuProcessSample& s : process.value) {
        everyone.insert(s.pid);
        own_sample = own_sample || ours.count(s.pid);
      }
      for (unsigned pid : ours) everyone.insert(pid);
      if (w.others) others = true;
      if (mps_client && !own_sample && w.fresh) {
        // Behind MPS the samples can carry the MPS server's pid, not the clients': the run's
        // share cannot be told apart from the server's other clients.
        notes_.insert(label +
                      ": the run's processes are MPS clients and the driver's samples "
                      "carry no pid of the run: utilisation not measured");
        d.last_seen_us = w.last_seen_us;
      } else {
        BusyWindow all = process_busy(process.value, times, everyone, d.last_seen_us);
        if (w.fresh) {
          window = w;
          // Measured only because the point reading cut the interval: its timing is the
          // device-level reading's.
          d.per_process = d.per_process || w.measured_seconds > 0;
          if (all.busy_seconds > 0) run_share = w.busy_seconds / all.busy_seconds;
        }
        // A busy device with no process sample we can see: processes we cannot see (another PID
        // namespace, a container) use it.
        if (device.ok() && process.status == GpuStatus::not_found) {
          BusyWindow dev = device_busy(device.value, d.last_seen_us);
          if (dev.busy_seconds > 0.05 * std::max(dev.measured_seconds, 1e-9)) {
            others = true;
            notes_.insert(label +
                          ": busy with no process this run can see (processes in another "
                          "PID namespace or container share it)");
            run_share = 0;
          }
        }
        d.last_seen_us = std::max(w.last_seen_us, d.last_seen_us);
      }
    } else if (device.ok() || device.status == GpuStatus::not_found) {
      BusyWindow w = device_busy(device.value, d.last_seen_us);
      if (w.fresh) {
        window = w;
        d.device_level = true;
      }
      d.last_seen_us = std::max(w.last_seen_us, d.last_seen_us);
      if (proc_ours_) {
        notes_.insert(label + ": utilisation is device-level (per-process utilisation: " +
                      gpu_status_text(process.status) + ")");
      }
      if (others)
        notes_.insert(label +
                      ": device-level utilisation includes processes outside "
                      "the run");
      if (others && !d.pids.empty()) {
        double mine = 0;
        for (unsigned pid : d.pids) mine += ours.count(pid) ? 1 : 0;
        run_share = mine / static_cast<double>(d.pids.size());
      }
    } else if (device.status == GpuStatus::gpu_lost || process.status == GpuStatus::gpu_lost) {
      notes_.insert(label + " was lost (GPU_IS_LOST): not measured from then on");
    } else {
      notes_.insert(label + ": utilisation not measured (" + gpu_status_text(process.status) + ")");
    }
  }
  if (others) shared_ = true;
  (void)ours_listed;

  // Energy: the counter's delta, else the power readings integrated (trapezoids); the power is
  // not read where the counter works. A MIG slice's counter would be the whole GPU's.
  std::optional<double> joules;
  if (d.info.parent) {
    notes_.insert(label + ": energy not measured (the energy counter is the whole GPU's)");
  } else {
    auto energy = probe_.energy_mj(d.info.index);
    std::optional<unsigned> power;
    if (!energy) power = probe_.power_mw(d.info.index);
    if (energy && d.last_energy_mj && *energy >= *d.last_energy_mj) {
      joules = static_cast<double>(*energy - *d.last_energy_mj) / 1000.0;
      d.counter = true;
    } else if (power && d.last_power_mw) {
      joules = (*power + *d.last_power_mw) / 2.0 / 1000.0 * dt;
      d.power = true;
    }
    d.last_energy_mj = energy;
    d.last_power_mw = power;
    if (joules && others) joules = *joules * std::clamp(run_share, 0.0, 1.0);
  }
  if (first && !d.allocated && d.since > 0) return;  // found later: counters start here
  d.allocated_seconds += dt;
  out.gpus += 1;
  if (window) {
    d.measured_seconds += window->measured_seconds;
    d.busy_seconds += window->busy_seconds;
    d.any_measured = d.any_measured || window->measured_seconds > 0;
    out.busy += window->busy_seconds;
    out.measured += window->measured_seconds;
  }
  if (joules) {
    d.joules = d.joules.value_or(0) + *joules;
    out.joules += *joules;
    out.energy_measured = true;
    if (!first_watts_ && dt > 0) first_watts_ = *joules / dt;
  }
}

void GpuAccount::add_timeline(double t, double dt, const Interval& interval) {
  int minute = static_cast<int>(t / 60.0);
  auto flush = [&] {
    if (minute_seconds_ <= 0) return;
    GpuTimelinePoint point;
    point.minute = minute_;
    if (minute_measured_ > 0) point.utilisation = minute_busy_ / minute_measured_;
    if (minute_energy_measured_) point.watts = minute_joules_ / minute_seconds_;
    if (timeline_.size() < kMaxTimelinePoints) timeline_.push_back(point);
    minute_measured_ = minute_busy_ = minute_joules_ = minute_seconds_ = 0;
    minute_energy_measured_ = false;
  };
  if (minute != minute_) {
    flush();
    minute_ = minute;
  }
  minute_seconds_ += dt;
  minute_measured_ += interval.measured;
  minute_busy_ += interval.busy;
  if (interval.energy_measured) {
    minute_joules_ += interval.joules;
    minute_energy_measured_ = true;
  }
}

GpuSummary GpuAccount::summary() const {
  GpuSummary s;
  bool per_process = false, device_level = false, gpm = false, counter = false, power = false;
  bool energy_unmeasured = false, any_measured = false;
  for (const auto& [index, d] : state_) {
    s.devices.push_back(d.info.name());
    s.allocated_seconds += d.allocated_seconds;
    s.measured_seconds += d.measured_seconds;
    any_measured = any_measured || d.any_measured;
    s.busy_seconds = s.busy_seconds.value_or(0) + d.busy_seconds;
    if (d.joules) {
      s.energy_joules = s.energy_joules.value_or(0) + *d.joules;
    } else if (d.allocated_seconds > 0) {
      energy_unmeasured = true;
    }
    per_process |= d.per_process;
    device_level |= d.device_level;
    gpm |= d.gpm;
    counter |= d.counter;
    power |= d.power;
    s.per_device.push_back({index, d.measured_seconds, d.busy_seconds, last_t_.value_or(0)});
  }
  if (!any_measured) s.busy_seconds.reset();
  // A figure for some of the devices only is not the run's figure.
  if (energy_unmeasured) s.energy_joules.reset();
  // The time from launch to the first answer of NVML (nvmlInit_v2 can take seconds without
  // persistence mode) at the power of the first measured interval.
  if (s.energy_joules && first_t_ && first_watts_ && *first_t_ > 0) {
    s.energy_joules = *s.energy_joules + *first_watts_ * *first_t_;
  }
  if (allocation_.count) {
    // --gpus N with fewer identified: the rest counts as allocated, never measured.
    double known = 0;
    for (const auto& [index, d] : state_) known += d.allocated ? 1 : 0;
    if (known < *allocation_.count && last_t_) {
      s.allocated_seconds += (*allocation_.count - known) * *last_t_;
    }
  }
  double unmeasured = s.allocated_seconds - s.measured_seconds;
  if (s.busy_seconds && s.allocated_seconds > 0 && unmeasured > 0.05 * s.allocated_seconds) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "%.1f of %.1f GPU-seconds had no fresh driver sample: counted neither busy "
                  "nor idle",
                  unmeasured, s.allocated_seconds);
    s.notes.push_back(text);
  }
  s.utilisation_source = joined(
      {{per_process, "per-process"}, {device_level, "device-level"}, {gpm, "GPM (MIG slice)"}});
  s.energy_source = joined({{counter, "energy counter"}, {power, "integrated power"}});
  s.shared = shared_;
  s.notes.insert(s.notes.begin(), notes_.begin(), notes_.end());
  s.timeline = timeline_;
  if (minute_seconds_ > 0 && timeline_.size() < kMaxTimelinePoints) {
    GpuTimelinePoint point;
    point.minute = minute_;
    if (minute_measured_ > 0) point.utilisation = minute_busy_ / minute_measured_;
    if (minute_energy_measured_) point.watts = minute_joules_ / minute_seconds_;
    s.timeline.push_back(point);
  }
  return s;
}

bool idle_gpu_update(std::optional<double>& idle_since, double t, std::optional<double> utilisation,
                     double below, double for_seconds) {
  // Unmeasured: the guard acts on measured periods only, so it neither trips nor resets.
  if (!utilisation) return false;
  if (*utilisation >= below) {
    idle_since.reset();
    return false;
  }
  if (!idle_since) idle_since = t;
  return t - *idle_since >= for_seconds;
}

std::optional<double> utilisation_between(const GpuSummary& before, const GpuSummary& after) {
  std::optional<double> busiest;
  for (const GpuDeviceFigures& now : after.per_device) {
    double measured = now.measured_seconds, busy = now.busy_seconds;
    for (const GpuDeviceFigures& then : before.per_device) {
      if (then.index == now.index) {
        measured -= then.measured_seconds;
        busy -= then.busy_seconds;
      }
    }
    if (measured <= 1e-6) return std::nullopt;
    busiest = std::max(busiest.value_or(0.0), busy / measured);
  }
  return busiest;
}

}  // namespace spendcap
