// The few NVML types and functions spendcap uses, declared from NVML's documented ABI (nvml.h of
// the CUDA toolkit; the layouts below are the ones the driver's libnvidia-ml.so.1 exports). NVML is
// never linked: NvmlProbe resolves each of these by name through DynamicLibrary, and a symbol an
// older driver lacks turns off that one measurement. The fake NVML of the tests implements the same
// declarations.
#pragma once

extern "C" {

typedef int nvmlReturn_t;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;

typedef struct nvmlDevice_st* nvmlDevice_t;

// The buffer size nvml.h gives for nvmlDeviceGetUUID.
inline constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;

// nvmlProcessInfo_t (the _v3 process lists) and nvmlProcessInfo_v2_t (the _v2 ones) share this
// layout.
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU timestamp, microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
  unsigned int gpu;  // percent of the last sample period a kernel ran
  unsigned int memory;
} nvmlUtilization_t;

using nvmlInit_v2_fn = nvmlReturn_t (*)();
using nvmlShutdown_fn = nvmlReturn_t (*)();
using nvmlDeviceGetCount_v2_fn = nvmlReturn_t (*)(unsigned int* count);
using nvmlDeviceGetHandleByIndex_v2_fn = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
using nvmlDeviceGetUUID_fn = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
// nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3 and _v2.
using nvmlDeviceGetRunningProcesses_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                          unsigned int* infoCount,
                                                          nvmlProcessInfo_t* infos);
using nvmlDeviceGetProcessUtilization_fn =
    nvmlReturn_t (*)(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                     unsigned int* processSamplesCount, unsigned long long lastSeenTimeStamp);
using nvmlDeviceGetUtilizationRates_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                          nvmlUtilization_t* utilization);
// Millijoules since the driver was loaded.
using nvmlDeviceGetTotalEnergyConsumption_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                unsigned long long* energy);
// Milliwatts.
using nvmlDeviceGetPowerUsage_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* power);
using nvmlDeviceGetMigMode_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* currentMode,
                                                 unsigned int* pendingMode);
}
