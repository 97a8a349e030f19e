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
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

// nvmlDeviceGetMigMode's currentMode.
inline constexpr unsigned NVML_DEVICE_MIG_DISABLE = 0x0;
inline constexpr unsigned NVML_DEVICE_MIG_ENABLE = 0x1;

typedef struct nvmlDevice_st* nvmlDevice_t;

// The buffer sizes nvml.h gives for nvmlDeviceGetUUID and nvmlDeviceGetName.
inline constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
inline constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

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

// nvmlSamplingType_t and nvmlValueType_t are C enums (int-sized) in nvml.h.
typedef int nvmlSamplingType_t;
inline constexpr nvmlSamplingType_t NVML_GPU_UTILIZATION_SAMPLES = 1;
typedef int nvmlValueType_t;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_DOUBLE = 0;
inline constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_INT = 1;

typedef union {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} nvmlValue_t;

typedef struct {
  unsigned long long timeStamp;  // CPU timestamp, microseconds
  nvmlValue_t sampleValue;
} nvmlSample_t;

// GPM (Hopper and later): two samples give metrics over the time between them.
typedef struct {
  struct nvmlGpmSample_st* handle;
} nvmlGpmSample_t;

typedef struct {
  char* shortName;
  char* longName;
  char* unit;
} nvmlGpmMetricMetricInfo_t;

typedef struct {
  unsigned int metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  nvmlGpmMetricMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

inline constexpr unsigned NVML_GPM_METRIC_SM_UTIL = 2;  // percent of SMs busy, 0.0 - 100.0
inline constexpr unsigned NVML_GPM_METRIC_MAX = 333;
inline constexpr unsigned NVML_GPM_METRICS_GET_VERSION = 1;
inline constexpr unsigned NVML_GPM_SUPPORT_VERSION = 1;

typedef struct {
  unsigned int version;
  unsigned int numMetrics;
  nvmlGpmSample_t sample1;
  nvmlGpmSample_t sample2;
  nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
  unsigned int version;
  unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
  unsigned int gpu;  // percent of the last sample period a kernel ran
  unsigned int memory;
} nvmlUtilization_t;

using nvmlInit_v2_fn = nvmlReturn_t (*)();
using nvmlShutdown_fn = nvmlReturn_t (*)();
using nvmlDeviceGetCount_v2_fn = nvmlReturn_t (*)(unsigned int* count);
using nvmlDeviceGetHandleByIndex_v2_fn = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
using nvmlDeviceGetUUID_fn = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
using nvmlDeviceGetName_fn = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
// nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses_v3 and _v2.
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
using nvmlDeviceGetHandleByUUID_fn = nvmlReturn_t (*)(const char* uuid, nvmlDevice_t* device);
using nvmlDeviceGetSamples_fn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlSamplingType_t type,
                                                 unsigned long long lastSeenTimeStamp,
                                                 nvmlValueType_t* sampleValType,
                                                 unsigned int* sampleCount, nvmlSample_t* samples);
using nvmlDeviceGetMaxMigDeviceCount_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                           unsigned int* count);
using nvmlDeviceGetMigDeviceHandleByIndex_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                unsigned int index,
                                                                nvmlDevice_t* migDevice);
using nvmlDeviceGetGpuInstanceId_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* id);
using nvmlDeviceGetComputeInstanceId_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* id);
using nvmlGpmQueryDeviceSupport_fn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                      nvmlGpmSupport_t* gpmSupport);
using nvmlGpmSampleAlloc_fn = nvmlReturn_t (*)(nvmlGpmSample_t* gpmSample);
using nvmlGpmSampleFree_fn = nvmlReturn_t (*)(nvmlGpmSample_t gpmSample);
using nvmlGpmSampleGet_fn = nvmlReturn_t (*)(nvmlDevice_t device, nvmlGpmSample_t gpmSample);
using nvmlGpmMetricsGet_fn = nvmlReturn_t (*)(nvmlGpmMetricsGet_t* metricsGet);
using nvmlDeviceGetMigMode_fn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* currentMode,
                                                 unsigned int* pendingMode);
}
