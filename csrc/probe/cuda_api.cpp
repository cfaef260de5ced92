#include "probe/cuda_api.h"

namespace parallax::cuda {

void bind_api(SymbolBinder& b, Api& a) {
  b.bind(a.cuGetErrorName, {"cuGetErrorName"});
  b.bind(a.cuGetErrorString, {"cuGetErrorString"});
  b.bind(a.cuInit, {"cuInit"});
  b.bind(a.cuDriverGetVersion, {"cuDriverGetVersion"});
  b.bind(a.cuDeviceGetCount, {"cuDeviceGetCount"});
  b.bind(a.cuDeviceGet, {"cuDeviceGet"});
  b.bind(a.cuDeviceGetName, {"cuDeviceGetName"});
  b.bind(a.cuDeviceGetUuid, {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"});
  b.bind(a.cuDeviceGetPCIBusId, {"cuDeviceGetPCIBusId"});
  b.bind(a.cuDeviceGetAttribute, {"cuDeviceGetAttribute"});
  b.bind(a.cuDeviceTotalMem, {"cuDeviceTotalMem_v2"});
  b.bind(a.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
  b.bind(a.cuDevicePrimaryCtxRelease, {"cuDevicePrimaryCtxRelease_v2"});
  b.bind(a.cuCtxGetCurrent, {"cuCtxGetCurrent"});
  b.bind(a.cuCtxSetCurrent, {"cuCtxSetCurrent"});
  b.bind(a.cuCtxSynchronize, {"cuCtxSynchronize"});
  b.bind(a.cuMemAlloc, {"cuMemAlloc_v2"});
  b.bind(a.cuMemFree, {"cuMemFree_v2"});
  b.bind(a.cuMemcpyHtoD, {"cuMemcpyHtoD_v2"});
  b.bind(a.cuMemcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"});
  b.bind(a.cuStreamCreate, {"cuStreamCreate"});
  b.bind(a.cuStreamDestroy, {"cuStreamDestroy_v2"});
  b.bind(a.cuStreamSynchronize, {"cuStreamSynchronize"});
  b.bind(a.cuEventCreate, {"cuEventCreate"});
  b.bind(a.cuEventDestroy, {"cuEventDestroy_v2"});
  b.bind(a.cuEventRecord, {"cuEventRecord"});
  b.bind(a.cuEventSynchronize, {"cuEventSynchronize"});
  // cuda.h 13 maps cuEventElapsedTime to _v2; drivers before 12.8 export only the plain name.
  b.bind(a.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
}

LoadedApi<Api> driver() {
  static ApiLibrary<Api> library({"libcuda.so.1"}, bind_api);
  return library.get();
}

std::string describe(const Api& api, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr)
    return "CUresult " + std::to_string(rc);
  std::string out = name;
  if (api.cuGetErrorString(rc, &text) == CUDA_SUCCESS && text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

std::string call_error(const Api& api, const char* call, CUresult rc) {
  return std::string(call) + " failed: " + describe(api, rc);
}

std::string version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

}  // namespace parallax::cuda
