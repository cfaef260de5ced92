#pragma once
// The subset of the CUDA driver API that Parallax calls, declared here so the native core
// builds without the CUDA toolkit. Types, enum values and symbol names are those of cuda.h
// (CUDA 13.0); the driver is opened at run time (libcuda.so.1). No cudart is involved.
#include <string>

#include "probe/api_library.h"

namespace parallax::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
struct CUuuid {
  unsigned char bytes[16];
};

// CUresult (cudaError_enum)
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;

// CUdevice_attribute
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

constexpr unsigned CU_STREAM_DEFAULT = 0x0;
constexpr unsigned CU_EVENT_DEFAULT = 0x0;

struct Api {
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice);
  CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
};

// The exported symbol names (cuda.h maps e.g. cuMemAlloc to cuMemAlloc_v2).
void bind_api(SymbolBinder& binder, Api& api);

// libcuda.so.1, opened once per process.
LoadedApi<Api> driver();

// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)".
std::string describe(const Api& api, CUresult rc);
// "<call> failed: <describe(rc)>".
std::string call_error(const Api& api, const char* call, CUresult rc);
// 13000 -> "13.0", 12080 -> "12.8" (cuDriverGetVersion encodes 1000*major + 10*minor).
std::string version_string(int version);

}  // namespace parallax::cuda
