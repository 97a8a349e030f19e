#include <time.h>

#include <cstdlib>
#include <cstring>

#include "spendcap/base/dynamic_library.hpp"
#include "spendcap/base/error.hpp"
#include "spendcap/gpu/nvml_abi.hpp"
#include "spendcap/gpu/probe.hpp"

namespace spendcap {

namespace {

// NVML's own bound for the process lists is the caller's buffer: ask again, larger, when it says
// INSUFFICIENT_SIZE.
constexpr unsigned kFirstProcessBuffer = 64;

class NvmlProbe final : public GpuProbe {
 public:
  explicit NvmlProbe(DynamicLibrary library) : library_(std::move(library)) {}
  ~NvmlProbe() override {
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
    auto uuid = library_.function<nvmlDeviceGetUUID_fn>("nvmlDeviceGetUUID");
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t device = nullptr;
      if (handle(i, &device) != NVML_SUCCESS) continue;
      GpuDevice d;
      d.index = i;
      if (uuid) {
        char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
        if (uuid(device, text, sizeof text) == NVML_SUCCESS) d.uuid = text;
      }
      devices_.push_back(d);
      handles_.push_back(device);
    }
    resolve();
    return true;
  }

  const std::vector<GpuDevice>& devices() const override { return devices_; }

  std::optional<std::vector<unsigned>> processes(unsigned index) override {
    nvmlDevice_t device = handle(index);
    if (!device || (!compute_ && !graphics_)) return std::nullopt;
    std::vector<unsigned> pids;
    bool any = false;
    for (auto list : {compute_, graphics_}) {
      if (!list) continue;
      std::vector<nvmlProcessInfo_t> infos(kFirstProcessBuffer);
      unsigned count = static_cast<unsigned>(infos.size());
      nvmlReturn_t rc = list(device, &count, infos.data());
      if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
        infos.resize(count + 16);
        count = static_cast<unsigned>(infos.size());
        rc = list(device, &count, infos.data());
      }
      if (rc != NVML_SUCCESS) continue;
      any = true;
      for (unsigned i = 0; i < count && i < infos.size(); ++i) pids.push_back(infos[i].pid);
    }
    if (!any) return std::nullopt;
    return pids;
  }

  std::optional<std::vector<GpuProcessSample>> process_utilisation(
      unsigned index, unsigned long long since_us) override {
    nvmlDevice_t device = handle(index);
    if (!device || !process_utilisation_) return std::nullopt;
    unsigned count = 0;
    // A first call with no buffer asks how many samples there are.
    nvmlReturn_t rc = process_utilisation_(device, nullptr, &count, since_us);
    if (rc == NVML_ERROR_NOT_FOUND) return std::vector<GpuProcessSample>{};  // no kernel ran
    if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) return std::nullopt;
    std::vector<nvmlProcessUtilizationSample_t> raw(count + 8);
    count = static_cast<unsigned>(raw.size());
    rc = process_utilisation_(device, raw.data(), &count, since_us);
    if (rc == NVML_ERROR_NOT_FOUND) return std::vector<GpuProcessSample>{};
    if (rc != NVML_SUCCESS) return std::nullopt;
    std::vector<GpuProcessSample> samples;
    for (unsigned i = 0; i < count && i < raw.size(); ++i) {
      samples.push_back({raw[i].pid, raw[i].timeStamp, raw[i].smUtil});
    }
    return samples;
  }

  std::optional<unsigned> device_utilisation(unsigned index) override {
    nvmlDevice_t device = handle(index);
    nvmlUtilization_t u{};
    if (!device || !utilisation_ || utilisation_(device, &u) != NVML_SUCCESS) return std::nullopt;
    return u.gpu;
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

  std::vector<std::string> notes() const override { return notes_; }

 private:
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
    process_utilisation_ =
        library_.function<nvmlDeviceGetProcessUtilization_fn>("nvmlDeviceGetProcessUtilization");
    if (!process_utilisation_) {
      notes_.push_back("no nvmlDeviceGetProcessUtilization: device-level utilisation only");
    }
    utilisation_ =
        library_.function<nvmlDeviceGetUtilizationRates_fn>("nvmlDeviceGetUtilizationRates");
    if (!utilisation_) notes_.push_back("no nvmlDeviceGetUtilizationRates");
    energy_ = library_.function<nvmlDeviceGetTotalEnergyConsumption_fn>(
        "nvmlDeviceGetTotalEnergyConsumption");
    if (!energy_) {
      notes_.push_back("no nvmlDeviceGetTotalEnergyConsumption: energy from power readings");
    }
    power_ = library_.function<nvmlDeviceGetPowerUsage_fn>("nvmlDeviceGetPowerUsage");
    if (!power_) notes_.push_back("no nvmlDeviceGetPowerUsage");
    auto mig = library_.function<nvmlDeviceGetMigMode_fn>("nvmlDeviceGetMigMode");
    for (std::size_t i = 0; mig && i < handles_.size(); ++i) {
      unsigned current = 0, pending = 0;
      if (mig(handles_[i], &current, &pending) == NVML_SUCCESS && current == 1) {
        notes_.push_back("GPU " + std::to_string(devices_[i].index) +
                         " is in MIG mode: no per-process utilisation");
      }
    }
  }

  nvmlDevice_t handle(unsigned index) const {
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i].index == index) return handles_[i];
    }
    return nullptr;
  }

  DynamicLibrary library_;
  nvmlShutdown_fn shutdown_ = nullptr;
  std::vector<GpuDevice> devices_;
  std::vector<nvmlDevice_t> handles_;
  nvmlDeviceGetRunningProcesses_fn compute_ = nullptr, graphics_ = nullptr;
  nvmlDeviceGetProcessUtilization_fn process_utilisation_ = nullptr;
  nvmlDeviceGetUtilizationRates_fn utilisation_ = nullptr;
  nvmlDeviceGetTotalEnergyConsumption_fn energy_ = nullptr;
  nvmlDeviceGetPowerUsage_fn power_ = nullptr;
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
