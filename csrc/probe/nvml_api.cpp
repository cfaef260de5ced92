#include "probe/nvml_api.h"

namespace parallax::nvml {

void bind_api(SymbolBinder& b, Api& a) {
  // nvml.h maps nvmlInit to nvmlInit_v2, nvmlDeviceGetCount to _v2, and so on.
  b.bind(a.nvmlInit, {"nvmlInit_v2"});
  b.bind(a.nvmlShutdown, {"nvmlShutdown"});
  b.bind(a.nvmlErrorString, {"nvmlErrorString"});
  b.bind(a.nvmlSystemGetDriverVersion, {"nvmlSystemGetDriverVersion"});
  b.bind(a.nvmlDeviceGetCount, {"nvmlDeviceGetCount_v2"});
  b.bind(a.nvmlDeviceGetHandleByIndex, {"nvmlDeviceGetHandleByIndex_v2"});
  b.bind(a.nvmlDeviceGetName, {"nvmlDeviceGetName"});
  b.bind(a.nvmlDeviceGetUUID, {"nvmlDeviceGetUUID"});
  b.bind(a.nvmlDeviceGetPciInfo, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"});
  b.bind(a.nvmlDeviceGetCudaComputeCapability, {"nvmlDeviceGetCudaComputeCapability"});
  b.bind(a.nvmlDeviceGetClockInfo, {"nvmlDeviceGetClockInfo"});
  b.bind(a.nvmlDeviceGetMaxClockInfo, {"nvmlDeviceGetMaxClockInfo"});
  b.bind(a.nvmlDeviceGetMemoryInfo, {"nvmlDeviceGetMemoryInfo"});
  b.bind(a.nvmlDeviceGetEnforcedPowerLimit, {"nvmlDeviceGetEnforcedPowerLimit"});
  b.bind_optional(a.nvmlDeviceGetTopologyCommonAncestor, {"nvmlDeviceGetTopologyCommonAncestor"});
  b.bind_optional(a.nvmlDeviceGetNvLinkState, {"nvmlDeviceGetNvLinkState"});
  // Only _v2: the first version filled an older nvmlPciInfo_t.
  b.bind_optional(a.nvmlDeviceGetNvLinkRemotePciInfo, {"nvmlDeviceGetNvLinkRemotePciInfo_v2"});
  b.bind_optional(a.nvmlDeviceGetNvLinkRemoteDeviceType, {"nvmlDeviceGetNvLinkRemoteDeviceType"});
  b.bind_optional(a.nvmlDeviceGetP2PStatus, {"nvmlDeviceGetP2PStatus"});
}

LoadedApi<Api> library() {
  static ApiLibrary<Api> lib({"libnvidia-ml.so.1"}, bind_api);
  return lib.get();
}

std::string call_error(const Api& api, const char* call, nvmlReturn_t rc) {
  const char* text = api.nvmlErrorString(rc);
  return std::string(call) + " failed: " + (text != nullptr ? text : "nvmlReturn_t " + std::to_string(rc));
}

}  // namespace parallax::nvml
