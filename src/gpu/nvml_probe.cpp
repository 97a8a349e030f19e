#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "spendcap/base/dynamic_library.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/gpu/nvml_abi.hpp"
#include "spendcap/gpu/probe.hpp"

namespace spendcap {

std::string GpuDevice::name() const {
  return std::to_string(index) + (uuid.empty() ? "" : " (" + uuid + ")");
}

const char* gpu_status_text(GpuStatus status) {
  switch (status) {
    case GpuStatus::ok:
      return "ok";
    case GpuStatus::not_found:
      return "no new sample";
    case GpuStatus::not_supported:
      return "not supported";
    case GpuStatus::no_permission:
      return "no permission";
    case GpuStatus::gpu_lost:
      return "the GPU is lost";
    case GpuStatus::failed:
      return "failed";
  }
  return "failed";
}

namespace {

GpuStatus status_of(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS:
      return GpuStatus::ok;
    case NVML_ERROR_NOT_FOUND:
      return GpuStatus::not_found;
    case NVML_ERROR_NOT_SUPPORTED:
      return GpuStatus::not_supported;
    case NVML_ERROR_NO_PERMISSION:
      return GpuStatus::no_permission;
    case NVML_ERROR_GPU_IS_LOST:
      return GpuStatus::gpu_lost;
    default:
      return GpuStatus::failed;
  }
}

// DCGM's way with NVML's lists: keep the buffer between calls and grow it while the driver says
// INSUFFICIENT_SIZE. The count can grow between the call that sized the buffer and the one that
// fills it (a process starts), so one retry is not enough; a few are, and the kept buffer makes
// the steady state one call.
constexpr int kSizeTries = 5;
constexpr unsigned kFirstBuffer = 32;

template <class Entry, class Call>
nvmlReturn_t fill(std::vector<Entry>& buffer, unsigned& count, Call call) {
  if (buffer.empty()) buffer.resize(kFirstBuffer);
  nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_SIZE;
  for (int i = 0; i < kSizeTries; ++i) {
    count = static_cast<unsigned>(buffer.size());
    rc = call(buffer.data(), &count);
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE) break;
    buffer.resize(std::max<std::size_t>(buffer.size() * 2, count + 8));
  }
  if (rc == NVML_SUCCESS && count > buffer.size()) count = static_cast<unsigned>(buffer.size());
  return rc;
}

class NvmlProbe final : public GpuProbe {
 public:
  explicit NvmlProbe(DynamicLibrary library) : library_(std::move(library)) {}
  ~NvmlProbe() override {
    for (auto& [index, gpm] : gpm_) {
      for (nvmlGpmSample_t& s : gpm.samples) {
        if (s.handle && gpm_free_) gpm_free_(s);
      }
    }
    if (shutdown_) shutdown_();
  }

  // False with `why_not` set when NVML cannot be used at all.
  bool open(std::string& why_not) {
    auto init = library_.function<nvmlInit_v2_fn>("nvmlInit_v2");
    if (!init) {
      why_not = "no nvmlInit_v2 in " + library_.path();
      return false;
    }
    if (nvmlReturn_t rc = init(); rc != NVML_SUCCESS) {
      why_not = "nvmlInit_v2 failed (NVML error " + std::to_string(rc) + ")";
      return false;
    }
    shutdown_ = library_.function<nvmlShutdown_fn>("nvmlShutdown");
    auto count = library_.function<nvmlDeviceGetCount_v2_fn>("nvmlDeviceGetCount_v2");
    auto handle =
        library_.function<nvmlDeviceGetHandleByIndex_v2_fn>("nvmlDeviceGetHandleByIndex_v2");
    if (!count || !handle) {
      why_not = "no nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2 in " + library_.path();
      return false;
    }
    unsigned n = 0;
    if (count(&n) != NVML_SUCCESS) {
      why_not = "nvmlDeviceGetCount_v2 failed";
      return false;
    }
    uuid_ = library_.function<nvmlDeviceGetUUID_fn>("nvmlDeviceGetUUID");
    auto name = library_.function<nvmlDeviceGetName_fn>("nvmlDeviceGetName");
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t device = nullptr;
      if (nvmlReturn_t rc = handle(i, &device); rc != NVML_SUCCESS) {
        notes_.push_back("GPU " + std::to_string(i) + ": no handle (" +
                         gpu_status_text(status_of(rc)) + ")");
        continue;
      }
      GpuDevice d;
      d.index = i;
      d.uuid = uuid_of(device);
      char model[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
      if (name && name(device, model, sizeof model) == NVML_SUCCESS) d.model = model;
      add(d, device);
    }
    resolve();
    add_mig_slices();
    return true;
  }

  const std::vector<GpuDevice>& devices() const override { return devices_; }

  GpuReading<std::vector<unsigned>> processes(unsigned index) override {
    GpuReading<std::vector<unsigned>> r;
    nvmlDevice_t device = handle(index);
    if (!device || (!compute_ && !graphics_)) {
      r.status = GpuStatus::not_supported;
      return r;
    }
    bool any = false;
    for (auto [list, buffer] : {std::pair{compute_, &compute_buffer_[index]},
                                std::pair{graphics_, &graphics_buffer_[index]}}) {
      if (!list) continue;
      unsigned n = 0;
      nvmlReturn_t rc = fill(*buffer, n, [&](nvmlProcessInfo_t* infos, unsigned* c) {
        return list(device, c, infos);
      });
      if (rc != NVML_SUCCESS) {
        r.status = status_of(rc);
        continue;
      }
      any = true;
      for (unsigned i = 0; i < n; ++i) r.value.push_back((*buffer)[i].pid);
    }
    if (any) r.status = GpuStatus::ok;
    return r;
  }

  GpuReading<std::vector<unsigned>> mps_processes(unsigned index) override {
    GpuReading<std::vector<unsigned>> r;
    nvmlDevice_t device = handle(index);
    if (!device || !mps_) {
      r.status = GpuStatus::not_supported;
      return r;
    }
    auto& buffer = mps_buffer_[index];
    unsigned n = 0;
    r.status = status_of(fill(
        buffer, n, [&](nvmlProcessInfo_t* infos, unsigned* c) { return mps_(device, c, infos); }));
    if (r.ok()) {
      for (unsigned i = 0; i < n; ++i) r.value.push_back(buffer[i].pid);
    }
    return r;
  }

  GpuReading<std::vector<GpuProcessSample>> process_utilisation(
      unsigned index, unsigned long long since_us) override {
    GpuReading<std::vector<GpuProcessSample>> r;
    nvmlDevice_t device = handle(index);
    if (!device || !process_utilisation_) {
      r.status = GpuStatus::not_supported;
      return r;
    }
    auto& buffer = utilisation_buffer_[index];
    unsigned n = 0;
    r.status = status_of(fill(buffer, n, [&](nvmlProcessUtilizationSample_t* s, unsigned* c) {
      return process_utilisation_(device, s, c, since_us);
    }));
    if (r.ok()) {
      for (unsigned i = 0; i < n; ++i) {
        r.value.push_back({buffer[i].pid, buffer[i].timeStamp, buffer[i].smUtil});
      }
    }
    return r;
  }

  GpuReading<std::vector<GpuDeviceSample>> device_samples(unsigned index,
                                                          unsigned long long since_us) override {
    GpuReading<std::vector<GpuDeviceSample>> r;
    nvmlDevice_t device = handle(index);
    if (!device) {
      r.status = GpuStatus::not_supported;
      return r;
    }
    if (!samples_ || samples_unsupported_.count(index)) return point_reading(device);
    auto& buffer = samples_buffer_[index];
    unsigned n = 0;
    nvmlValueType_t type = NVML_VALUE_TYPE_UNSIGNED_INT;
    r.status = status_of(fill(buffer, n, [&](nvmlSample_t* s, unsigned* c) {
      return samples_(device, NVML_GPU_UTILIZATION_SAMPLES, since_us, &type, c, s);
    }));
    if (r.status == GpuStatus::not_supported) {
      // Some drivers have the symbol and answer NOT_SUPPORTED: the point reading from then on.
      samples_unsupported_.insert(index);
      return point_reading(device);
    }
    if (r.ok()) {
      for (unsigned i = 0; i < n; ++i) {
        const nvmlValue_t& v = buffer[i].sampleValue;
        unsigned percent = type == NVML_VALUE_TYPE_DOUBLE ? static_cast<unsigned>(v.dVal + 0.5)
                                                          : (type == NVML_VALUE_TYPE_UNSIGNED_INT
                                                                 ? v.uiVal
                                                                 : static_cast<unsigned>(v.ullVal));
        r.value.push_back({buffer[i].timeStamp, percent, false});
      }
    }
    return r;
  }

  GpuReading<double> slice_utilisation(unsigned index) override {
    GpuReading<double> r;
    nvmlDevice_t device = handle(index);
    auto found = gpm_.find(index);
    if (!device || found == gpm_.end()) {
      r.status = GpuStatus::not_supported;
      return r;
    }
    Gpm& g = found->second;
    nvmlGpmSample_t& next = g.samples[g.taken % 2];
    if (nvmlReturn_t rc = gpm_get_(device, next); rc != NVML_SUCCESS) {
      r.status = status_of(rc);
      return r;
    }
    ++g.taken;
    if (g.taken < 2) {
      r.status = GpuStatus::not_found;
      return r;
    }
    // The metrics struct is 13 KB: kept, not on the stack of every call.
    nvmlGpmMetricsGet_t& m = *g.metrics;
    std::memset(&m, 0, sizeof m);
    m.version = NVML_GPM_METRICS_GET_VERSION;
    m.numMetrics = 1;
    m.sample1 = g.samples[g.taken % 2];  // the older
    m.sample2 = next;
    m.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL;
    nvmlReturn_t rc = gpm_metrics_(&m);
    if (rc == NVML_SUCCESS) rc = m.metrics[0].nvmlReturn;
    r.status = status_of(rc);
    if (r.ok()) r.value = m.metrics[0].value;
    return r;
  }

  std::optional<unsigned long long> energy_mj(unsigned index) override {
    nvmlDevice_t device = handle(index);
    unsigned long long mj = 0;
    if (!device || !energy_ || energy_(device, &mj) != NVML_SUCCESS) return std::nullopt;
    return mj;
  }

  std::optional<unsigned> power_mw(unsigned index) override {
    nvmlDevice_t device = handle(index);
    unsigned mw = 0;
    if (!device || !power_ || power_(device, &mw) != NVML_SUCCESS) return std::nullopt;
    return mw;
  }

  std::optional<unsigned> find_uuid(const std::string& uuid) override {
    if (by_uuid_) {
      nvmlDevice_t device = nullptr;
      if (by_uuid_(uuid.c_str(), &device) == NVML_SUCCESS) {
        for (std::size_t i = 0; i < handles_.size(); ++i) {
          if (handles_[i] == device) return devices_[i].index;
        }
      }
    }
    // A prefix, as CUDA_VISIBLE_DEVICES accepts: it must name one device only.
    std::optional<unsigned> match;
    for (const GpuDevice& d : devices_) {
      if (d.uuid.size() >= uuid.size() && d.uuid.compare(0, uuid.size(), uuid) == 0) {
        if (match) return std::nullopt;
        match = d.index;
      }
    }
    return match;
  }

  std::vector<std::string> notes() const override { return notes_; }

 private:
  struct Gpm {
    nvmlGpmSample_t samples[2] = {};
    unsigned long taken = 0;
    std::unique_ptr<nvmlGpmMetricsGet_t> metrics = std::make_unique<nvmlGpmMetricsGet_t>();
  };

  std::string uuid_of(nvmlDevice_t device) {
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (uuid_ && uuid_(device, text, sizeof text) == NVML_SUCCESS) return text;
    return "";
  }

  void add(const GpuDevice& d, nvmlDevice_t device) {
    devices_.push_back(d);
    handles_.push_back(device);
  }

  // Each symbol on its own: what is missing turns that one measurement off.
  void resolve() {
    auto pick = [&](const char* newer, const char* older, const char* what) {
      if (auto f = library_.function<nvmlDeviceGetRunningProcesses_fn>(newer)) return f;
      if (auto f = library_.function<nvmlDeviceGetRunningProcesses_fn>(older)) {
        notes_.push_back(std::string("no ") + newer + ": " + what + " from " + older);
        return f;
      }
      notes_.push_back(std::string("no ") + newer + " nor " + older + ": " + what +
                       " not measured");
      return static_cast<nvmlDeviceGetRunningProcesses_fn>(nullptr);
    };
    compute_ = pick("nvmlDeviceGetComputeRunningProcesses_v3",
                    "nvmlDeviceGetComputeRunningProcesses_v2", "compute processes");
    graphics_ = pick("nvmlDeviceGetGraphicsRunningProcesses_v3",
                     "nvmlDeviceGetGraphicsRunningProcesses_v2", "graphics processes");
    mps_ = library_.function<nvmlDeviceGetRunningProcesses_fn>(
        "nvmlDeviceGetMPSComputeRunningProcesses_v3");
    process_utilisation_ =
        library_.function<nvmlDeviceGetProcessUtilization_fn>("nvmlDeviceGetProcessUtilization");
    if (!process_utilisation_) {
      notes_.push_back("no nvmlDeviceGetProcessUtilization: device-level utilisation only");
    }
    samples_ = library_.function<nvmlDeviceGetSamples_fn>("nvmlDeviceGetSamples");
    rates_ = library_.function<nvmlDeviceGetUtilizationRates_fn>("nvmlDeviceGetUtilizationRates");
    if (!samples_) {
      notes_.push_back(rates_ ? "no nvmlDeviceGetSamples: device-level utilisation from "
                                "nvmlDeviceGetUtilizationRates, one reading a poll"
                              : "no nvmlDeviceGetSamples nor nvmlDeviceGetUtilizationRates: no "
                                "device-level utilisation");
    }
    by_uuid_ = library_.function<nvmlDeviceGetHandleByUUID_fn>("nvmlDeviceGetHandleByUUID");
    energy_ = library_.function<nvmlDeviceGetTotalEnergyConsumption_fn>(
        "nvmlDeviceGetTotalEnergyConsumption");
    if (!energy_) {
      notes_.push_back("no nvmlDeviceGetTotalEnergyConsumption: energy from power readings");
    }
    power_ = library_.function<nvmlDeviceGetPowerUsage_fn>("nvmlDeviceGetPowerUsage");
    if (!power_) notes_.push_back("no nvmlDeviceGetPowerUsage");
  }

  // MIG: a GPU in MIG mode runs its work on slices, each its own handle with a MIG- UUID.
  void add_mig_slices() {
    auto mode = library_.function<nvmlDeviceGetMigMode_fn>("nvmlDeviceGetMigMode");
    auto max =
        library_.function<nvmlDeviceGetMaxMigDeviceCount_fn>("nvmlDeviceGetMaxMigDeviceCount");
    auto by_index = library_.function<nvmlDeviceGetMigDeviceHandleByIndex_fn>(
        "nvmlDeviceGetMigDeviceHandleByIndex");
    auto gi = library_.function<nvmlDeviceGetGpuInstanceId_fn>("nvmlDeviceGetGpuInstanceId");
    auto ci =
        library_.function<nvmlDeviceGetComputeInstanceId_fn>("nvmlDeviceGetComputeInstanceId");
    auto gpm_support = library_.function<nvmlGpmQueryDeviceSupport_fn>("nvmlGpmQueryDeviceSupport");
    auto gpm_alloc = library_.function<nvmlGpmSampleAlloc_fn>("nvmlGpmSampleAlloc");
    gpm_free_ = library_.function<nvmlGpmSampleFree_fn>("nvmlGpmSampleFree");
    gpm_get_ = library_.function<nvmlGpmSampleGet_fn>("nvmlGpmSampleGet");
    gpm_metrics_ = library_.function<nvmlGpmMetricsGet_fn>("nvmlGpmMetricsGet");
    if (!mode) return;
    std::size_t whole = devices_.size();
    unsigned next_index = whole ? devices_.back().index + 1 : 0;
    for (std::size_t i = 0; i < whole; ++i) {
      unsigned current = 0, pending = 0;
      if (mode(handles_[i], &current, &pending) != NVML_SUCCESS ||
          current != NVML_DEVICE_MIG_ENABLE) {
        continue;
      }
      devices_[i].mig_parent = true;
      unsigned slots = 0;
      if (!max || !by_index || max(handles_[i], &slots) != NVML_SUCCESS) {
        notes_.push_back("GPU " + std::to_string(devices_[i].index) +
                         " is in MIG mode, and its slices cannot be listed");
        continue;
      }
      for (unsigned s = 0; s < slots; ++s) {
        nvmlDevice_t slice = nullptr;
        if (by_index(handles_[i], s, &slice) != NVML_SUCCESS) continue;  // NOT_FOUND: empty slot
        GpuDevice d;
        d.index = next_index++;
        d.uuid = uuid_of(slice);
        d.parent = devices_[i].index;
        if (gi) gi(slice, &d.gpu_instance);
        if (ci) ci(slice, &d.compute_instance);
        nvmlGpmSupport_t support{NVML_GPM_SUPPORT_VERSION, 0};
        if (gpm_support && gpm_alloc && gpm_free_ && gpm_get_ && gpm_metrics_ &&
            gpm_support(slice, &support) == NVML_SUCCESS && support.isSupportedDevice) {
          Gpm g;
          if (gpm_alloc(&g.samples[0]) == NVML_SUCCESS &&
              gpm_alloc(&g.samples[1]) == NVML_SUCCESS) {
            gpm_.emplace(d.index, std::move(g));
          } else {
            for (nvmlGpmSample_t& x : g.samples) {
              if (x.handle) gpm_free_(x);
            }
          }
        }
        add(d, slice);
      }
    }
  }

  // nvmlDeviceGetUtilizationRates: the percent of the driver's last sample period (1/6 s to 1 s)
  // a kernel ran, read now: one device-level sample stamped with this CPU's clock (the clock of
  // nvmlDeviceGetSamples' timestamps).
  GpuReading<std::vector<GpuDeviceSample>> point_reading(nvmlDevice_t device) {
    GpuReading<std::vector<GpuDeviceSample>> r;
    if (!rates_) {
      r.status = GpuStatus::not_supported;
      return r;
    }
    nvmlUtilization_t utilisation{};
    r.status = status_of(rates_(device, &utilisation));
    if (r.ok()) {
      timespec ts{};
      clock_gettime(CLOCK_REALTIME, &ts);
      auto now_us = static_cast<unsigned long long>(ts.tv_sec) * 1000000ULL +
                    static_cast<unsigned long long>(ts.tv_nsec / 1000);
      r.value.push_back({now_us, std::min(100u, utilisation.gpu), true});
    }
    return r;
  }

  nvmlDevice_t handle(unsigned index) const {
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i].index == index) return handles_[i];
    }
    return nullptr;
  }

  DynamicLibrary library_;
  nvmlShutdown_fn shutdown_ = nullptr;
  nvmlDeviceGetUUID_fn uuid_ = nullptr;
  std::vector<GpuDevice> devices_;
  std::vector<nvmlDevice_t> handles_;
  nvmlDeviceGetRunningProcesses_fn compute_ = nullptr, graphics_ = nullptr, mps_ = nullptr;
  nvmlDeviceGetProcessUtilization_fn process_utilisation_ = nullptr;
  nvmlDeviceGetSamples_fn samples_ = nullptr;
  nvmlDeviceGetUtilizationRates_fn rates_ = nullptr;
  std::set<unsigned> samples_unsupported_;  // devices whose nvmlDeviceGetSamples is NOT_SUPPORTED
  nvmlDeviceGetHandleByUUID_fn by_uuid_ = nullptr;
  nvmlDeviceGetTotalEnergyConsumption_fn energy_ = nullptr;
  nvmlDeviceGetPowerUsage_fn power_ = nullptr;
  nvmlGpmSampleFree_fn gpm_free_ = nullptr;
  nvmlGpmSampleGet_fn gpm_get_ = nullptr;
  nvmlGpmMetricsGet_fn gpm_metrics_ = nullptr;
  std::map<unsigned, Gpm> gpm_;
  // The kept buffers, by device.
  std::map<unsigned, std::vector<nvmlProcessInfo_t>> compute_buffer_, graphics_buffer_, mps_buffer_;
  std::map<unsigned, std::vector<nvmlProcessUtilizationSample_t>> utilisation_buffer_;
  std::map<unsigned, std::vector<nvmlSample_t>> samples_buffer_;
  std::vector<std::string> notes_;
};

}  // namespace

std::string nvml_library_path() {
  const char* path = std::getenv("SPENDCAP_NVML_LIBRARY");
  return path && *path ? path : "libnvidia-ml.so.1";
}

std::unique_ptr<GpuProbe> open_nvml_probe(std::string& why_not) {
  std::string path = nvml_library_path();
  std::unique_ptr<NvmlProbe> probe;
  try {
    probe = std::make_unique<NvmlProbe>(DynamicLibrary(path, "NVML"));
  } catch (const Error&) {
    why_not = "no NVML library (" + path + ")";
    return nullptr;
  }
  if (!probe->open(why_not)) return nullptr;
  return probe;
}

}  // namespace spendcap
