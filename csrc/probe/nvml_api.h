#pragma once
// The subset of NVML that the probe calls, declared here so the native core builds without
// nvml.h. Types, enum values and symbol names are those of nvml.h (as mirrored by NVIDIA's
// nvidia-ml-py 13.615); NVML ships with the driver as libnvidia-ml.so.1.
#include <string>

#include "probe/api_library.h"

namespace parallax::nvml {

using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

// nvmlClockType_t
constexpr int NVML_CLOCK_GRAPHICS = 0;
constexpr int NVML_CLOCK_SM = 1;
constexpr int NVML_CLOCK_MEM = 2;

// nvmlGpuTopologyLevel_t: the closest thing two GPUs' PCIe paths share.
constexpr int NVML_TOPOLOGY_INTERNAL = 0;     // one board (a dual-GPU card)
constexpr int NVML_TOPOLOGY_SINGLE = 10;      // one PCIe switch
constexpr int NVML_TOPOLOGY_MULTIPLE = 20;    // several PCIe switches, no host bridge
constexpr int NVML_TOPOLOGY_HOSTBRIDGE = 30;  // one PCIe host bridge (a CPU root complex)
constexpr int NVML_TOPOLOGY_NODE = 40;        // host bridges of one NUMA node
constexpr int NVML_TOPOLOGY_SYSTEM = 50;      // across NUMA nodes (the SMP interconnect: UPI, xGMI...)

// nvmlEnableState_t
constexpr int NVML_FEATURE_DISABLED = 0;
constexpr int NVML_FEATURE_ENABLED = 1;

// nvml.h's NVML_NVLINK_MAX_LINKS (18 since Hopper; earlier GPUs answer for fewer).
constexpr unsigned NVML_NVLINK_MAX_LINKS = 18;

// nvmlIntNvLinkDeviceType_t: what is at the far end of a link.
constexpr int NVML_NVLINK_DEVICE_TYPE_GPU = 0;
constexpr int NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1;
constexpr int NVML_NVLINK_DEVICE_TYPE_SWITCH = 2;
constexpr int NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF;

// nvmlGpuP2PCapsIndex_t and nvmlGpuP2PStatus_t (the values the probe reads).
constexpr int NVML_P2P_CAPS_INDEX_NVLINK = 2;
constexpr int NVML_P2P_STATUS_OK = 0;
constexpr int NVML_P2P_STATUS_NOT_SUPPORTED = 5;

constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
constexpr unsigned NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
constexpr unsigned NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;

struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];  // "00000000:19:00.0"
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct Api {
  nvmlReturn_t (*nvmlInit)();
  nvmlReturn_t (*nvmlShutdown)();
  const char* (*nvmlErrorString)(nvmlReturn_t);
  nvmlReturn_t (*nvmlSystemGetDriverVersion)(char*, unsigned);
  nvmlReturn_t (*nvmlDeviceGetCount)(unsigned*);
  nvmlReturn_t (*nvmlDeviceGetHandleByIndex)(unsigned, nvmlDevice_t*);
  nvmlReturn_t (*nvmlDeviceGetName)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*nvmlDeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t*);
  nvmlReturn_t (*nvmlDeviceGetCudaComputeCapability)(nvmlDevice_t, int*, int*);
  nvmlReturn_t (*nvmlDeviceGetClockInfo)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*nvmlDeviceGetMaxClockInfo)(nvmlDevice_t, int, unsigned*);
  nvmlReturn_t (*nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*nvmlDeviceGetEnforcedPowerLimit)(nvmlDevice_t, unsigned*);  // milliwatts
  // Topology and NVLink. Optional: null where this NVML lacks them (the rest still loads),
  // so every caller checks the pointer first.
  nvmlReturn_t (*nvmlDeviceGetTopologyCommonAncestor)(nvmlDevice_t, nvmlDevice_t, int*);  // nvmlGpuTopologyLevel_t
  nvmlReturn_t (*nvmlDeviceGetNvLinkState)(nvmlDevice_t, unsigned link, int*);            // nvmlEnableState_t
  nvmlReturn_t (*nvmlDeviceGetNvLinkRemotePciInfo)(nvmlDevice_t, unsigned link, nvmlPciInfo_t*);
  nvmlReturn_t (*nvmlDeviceGetNvLinkRemoteDeviceType)(nvmlDevice_t, unsigned link, int*);  // nvmlIntNvLinkDeviceType_t
  nvmlReturn_t (*nvmlDeviceGetP2PStatus)(nvmlDevice_t, nvmlDevice_t, int caps_index, int* status);
};

void bind_api(SymbolBinder& binder, Api& api);

// libnvidia-ml.so.1, opened once per process.
LoadedApi<Api> library();

// "<call> failed: <nvmlErrorString(rc)>".
std::string call_error(const Api& api, const char* call, nvmlReturn_t rc);

}  // namespace parallax::nvml
