#pragma once
// A scripted GPU for the GoogleTest suite: fake CUDA driver, NVML and cuBLASLt function tables
// that read and record one global FakeGpu. Tests script devices, return codes and how long each
// algorithm's GEMMs take, run the real probe/GEMM code against these tables, then check fields
// and bookkeeping (every allocation freed, every handle destroyed, the caller's context restored).
//
// Time: the fake stream has a clock. A GEMM advances it by its scripted duration, an event
// records it, and cuEventElapsedTime subtracts two records, so whatever the code brackets with
// events is what it measures, as on a GPU.
// Header-only; used by csrc/tests/probe_*_test.cpp and gemm_*_test.cpp only.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "probe/cublaslt_api.h"
#include "probe/cuda_api.h"
#include "probe/nvml_api.h"

namespace parallax::testing {

// One NVLink port of a fake GPU: up or down, and what its far end is.
struct FakeLink {
  bool active = true;
  std::string remote_bus = "";  // as nvmlPciInfo_t.busId spells it
  int remote_type = nvml::NVML_NVLINK_DEVICE_TYPE_GPU;
};

struct FakeDevice {
  std::string name = "NVIDIA H200";
  unsigned char uuid[16] = {0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81,
                            0x92, 0xa3, 0xb4, 0xc5, 0xd6, 0xe7, 0xf8, 0x09};
  std::string cuda_bus_id = "0000:19:00.0";      // as cuDeviceGetPCIBusId spells it
  std::string nvml_bus_id = "00000000:19:00.0";  // as nvmlPciInfo_t.busId spells it
  int cc_major = 9, cc_minor = 0, sm_count = 132;
  size_t cuda_total_bytes = 150'011'707'392;
  unsigned long long nvml_total_bytes = 150'754'820'096, nvml_free_bytes = 150'000'000'000;
  unsigned clock_sm = 1980, clock_sm_max = 1980, clock_mem = 3201, clock_mem_max = 3201;
  unsigned power_limit_mw = 700'000;
  std::vector<FakeLink> nvlinks;  // empty: no NVLink (every link answers NVML_ERROR_NOT_SUPPORTED)
};

struct Layout {
  int type;
  uint64_t rows, cols;
  int64_t ld;
};

struct FakeGpu {
  // Driver
  std::vector<FakeDevice> cuda_devices{FakeDevice{}};
  cuda::CUresult init_result = cuda::CUDA_SUCCESS;
  cuda::CUresult alloc_result = cuda::CUDA_SUCCESS;
  cuda::CUresult event_record_result = cuda::CUDA_SUCCESS;
  int driver_version = 13000;
  // NVML
  std::vector<FakeDevice> nvml_devices{FakeDevice{}};
  nvml::nvmlReturn_t nvml_init_result = nvml::NVML_SUCCESS;
  std::string nvml_driver_version = "580.95.05";
  int nvml_shutdowns = 0;
  // Topology, keyed by the two GPUs' NVML bus ids in either order; pairs not listed get the default.
  std::map<std::pair<std::string, std::string>, int> ancestors;
  int default_ancestor = nvml::NVML_TOPOLOGY_SYSTEM;
  nvml::nvmlReturn_t ancestor_result = nvml::NVML_SUCCESS;
  std::map<std::pair<std::string, std::string>, int> p2p_nvlink;  // nvmlGpuP2PStatus_t
  int default_p2p_nvlink = nvml::NVML_P2P_STATUS_NOT_SUPPORTED;
  std::vector<unsigned> nvlink_state_calls;  // link of each nvmlDeviceGetNvLinkState call
  // cuBLASLt. The heuristic offers `heuristic_count` algorithms; algorithm i's GEMMs take
  // algo_times_ms[i] ms, that list cycled over its calls (warm-up calls included); 1 ms when
  // the list has no entry i.
  int heuristic_count = 3;
  std::vector<cublaslt::cublasStatus_t> heuristic_states;  // state of result i; success if absent
  cublaslt::cublasStatus_t matmul_result = cublaslt::CUBLAS_STATUS_SUCCESS;    // every call
  std::map<int, cublaslt::cublasStatus_t> algo_matmul_results;                 // calls of algorithm i
  std::vector<std::vector<float>> algo_times_ms;
  // Device-to-device copies: each takes copy_times_ms[i] ms, that list cycled over the calls
  // (warm-up calls included); 1 ms when it is empty.
  std::vector<float> copy_times_ms;
  std::vector<size_t> copy_sizes;  // bytes of each copy, in order
  // Recorded
  std::map<cuda::CUdeviceptr, size_t> live_allocations;
  std::vector<size_t> allocation_sizes;
  std::map<cuda::CUdeviceptr, std::vector<unsigned char>> uploads;  // first bytes written to each
  size_t bad_copies = 0;
  cuda::CUdeviceptr next_address = 0x100000;
  int ctx_retains = 0, ctx_releases = 0, gpu_calls = 0;
  cuda::CUcontext current_context = nullptr;
  int live_streams = 0, live_events = 0, elapsed_calls = 0, matmul_calls = 0;
  double clock_ms = 0;                            // the stream's clock
  std::map<cuda::CUevent, double> event_clock;    // clock at each event's last record
  std::vector<int> matmul_algos;                  // algorithm of each successful call, in order
  std::map<int, int> algo_calls;                  // successful calls per algorithm
  int live_lt_objects = 0;
  std::map<int, int64_t> desc_attributes;  // attribute -> value (int32 or pointer)
  std::vector<Layout> layouts;
  uint64_t workspace_preference = 0;
};

inline FakeGpu& fake() {
  static FakeGpu state;
  return state;
}
inline void reset_fake() { fake() = FakeGpu{}; }

inline cuda::CUcontext fake_primary_context() { return reinterpret_cast<cuda::CUcontext>(0xC0); }

inline cuda::Api fake_cuda_api() {
  cuda::Api a{};
  a.cuGetErrorName = +[](cuda::CUresult rc, const char** out) -> cuda::CUresult {
    static const std::map<int, const char*> names = {
        {0, "CUDA_SUCCESS"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"}, {3, "CUDA_ERROR_NOT_INITIALIZED"},
        {100, "CUDA_ERROR_NO_DEVICE"}, {101, "CUDA_ERROR_INVALID_DEVICE"}, {400, "CUDA_ERROR_INVALID_HANDLE"}};
    auto it = names.find(rc);
    if (it == names.end()) return cuda::CUDA_ERROR_INVALID_VALUE;
    *out = it->second;
    return cuda::CUDA_SUCCESS;
  };
  a.cuGetErrorString = +[](cuda::CUresult rc, const char** out) -> cuda::CUresult {
    static const std::map<int, const char*> texts = {
        {0, "no error"}, {2, "out of memory"}, {3, "initialization error"},
        {100, "no CUDA-capable device is detected"}, {101, "invalid device ordinal"},
        {400, "invalid resource handle"}};
    auto it = texts.find(rc);
    if (it == texts.end()) return cuda::CUDA_ERROR_INVALID_VALUE;
    *out = it->second;
    return cuda::CUDA_SUCCESS;
  };
  a.cuInit = +[](unsigned) { return fake().init_result; };
  a.cuDriverGetVersion = +[](int* v) {
    *v = fake().driver_version;
    return cuda::CUDA_SUCCESS;
  };
  a.cuDeviceGetCount = +[](int* n) {
    *n = static_cast<int>(fake().cuda_devices.size());
    return cuda::CUDA_SUCCESS;
  };
  a.cuDeviceGet = +[](cuda::CUdevice* dev, int ordinal) {
    if (ordinal < 0 || ordinal >= static_cast<int>(fake().cuda_devices.size())) return cuda::CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return cuda::CUDA_SUCCESS;
  };
  a.cuDeviceGetName = +[](char* out, int len, cuda::CUdevice dev) {
    std::snprintf(out, len, "%s", fake().cuda_devices[dev].name.c_str());
    return cuda::CUDA_SUCCESS;
  };
  a.cuDeviceGetUuid = +[](cuda::CUuuid* out, cuda::CUdevice dev) {
    std::memcpy(out->bytes, fake().cuda_devices[dev].uuid, 16);
    return cuda::CUDA_SUCCESS;
  };
  a.cuDeviceGetPCIBusId = +[](char* out, int len, cuda::CUdevice dev) {
    std::snprintf(out, len, "%s", fake().cuda_devices[dev].cuda_bus_id.c_str());
    return cuda::CUDA_SUCCESS;
  };
  a.cuDeviceGetAttribute = +[](int* out, int attr, cuda::CUdevice dev) {
    const FakeDevice& d = fake().cuda_devices[dev];
    switch (attr) {
      case cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *out = d.cc_major; break;
      case cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *out = d.cc_minor; break;
      case cuda::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *out = d.sm_count; break;
      default: return cuda::CUDA_ERROR_INVALID_VALUE;
    }
    return cuda::CUDA_SUCCESS;
  };
  a.cuDeviceTotalMem = +[](size_t* out, cuda::CUdevice dev) {
    *out = fake().cuda_devices[dev].cuda_total_bytes;
    return cuda::CUDA_SUCCESS;
  };
  a.cuDevicePrimaryCtxRetain = +[](cuda::CUcontext* ctx, cuda::CUdevice) {
    ++fake().ctx_retains, ++fake().gpu_calls;
    *ctx = fake_primary_context();
    return cuda::CUDA_SUCCESS;
  };
  a.cuDevicePrimaryCtxRelease = +[](cuda::CUdevice) {
    ++fake().ctx_releases;
    return cuda::CUDA_SUCCESS;
  };
  a.cuCtxGetCurrent = +[](cuda::CUcontext* ctx) {
    *ctx = fake().current_context;
    return cuda::CUDA_SUCCESS;
  };
  a.cuCtxSetCurrent = +[](cuda::CUcontext ctx) {
    fake().current_context = ctx;
    return cuda::CUDA_SUCCESS;
  };
  a.cuCtxSynchronize = +[]() { return cuda::CUDA_SUCCESS; };
  a.cuMemAlloc = +[](cuda::CUdeviceptr* ptr, size_t bytes) {
    ++fake().gpu_calls;
    if (fake().alloc_result != cuda::CUDA_SUCCESS) return fake().alloc_result;
    *ptr = fake().next_address;
    fake().next_address += (bytes + 0xFFFF) / 0x10000 * 0x10000 + 0x10000;
    fake().live_allocations[*ptr] = bytes;
    fake().allocation_sizes.push_back(bytes);
    return cuda::CUDA_SUCCESS;
  };
  a.cuMemFree = +[](cuda::CUdeviceptr ptr) {
    return fake().live_allocations.erase(ptr) == 1 ? cuda::CUDA_SUCCESS : cuda::CUDA_ERROR_INVALID_VALUE;
  };
  // Each copy must land inside one live allocation; the first bytes written to it are kept.
  a.cuMemcpyHtoD = +[](cuda::CUdeviceptr dst, const void* src, size_t bytes) {
    auto& f = fake();
    auto it = f.live_allocations.upper_bound(dst);
    if (it == f.live_allocations.begin()) return ++f.bad_copies, cuda::CUDA_ERROR_INVALID_VALUE;
    --it;
    if (dst + bytes > it->first + it->second) return ++f.bad_copies, cuda::CUDA_ERROR_INVALID_VALUE;
    if (dst == it->first) {
      const auto* p = static_cast<const unsigned char*>(src);
      f.uploads[dst].assign(p, p + std::min<size_t>(bytes, 4096));
    }
    return cuda::CUDA_SUCCESS;
  };
  // Both ends must be live allocations of at least `bytes`; the stream's clock advances.
  a.cuMemcpyDtoDAsync = +[](cuda::CUdeviceptr dst, cuda::CUdeviceptr src, size_t bytes, cuda::CUstream) {
    auto& f = fake();
    for (cuda::CUdeviceptr end : {dst, src}) {
      auto it = f.live_allocations.find(end);
      if (it == f.live_allocations.end() || it->second < bytes) return ++f.bad_copies, cuda::CUDA_ERROR_INVALID_VALUE;
    }
    const size_t n = f.copy_sizes.size();
    f.clock_ms += f.copy_times_ms.empty() ? 1.0 : f.copy_times_ms[n % f.copy_times_ms.size()];
    f.copy_sizes.push_back(bytes);
    return cuda::CUDA_SUCCESS;
  };
  a.cuStreamCreate = +[](cuda::CUstream* s, unsigned) {
    ++fake().live_streams;
    *s = reinterpret_cast<cuda::CUstream>(0x5);
    return cuda::CUDA_SUCCESS;
  };
  a.cuStreamDestroy = +[](cuda::CUstream) {
    --fake().live_streams;
    return cuda::CUDA_SUCCESS;
  };
  a.cuStreamSynchronize = +[](cuda::CUstream) { return cuda::CUDA_SUCCESS; };
  a.cuEventCreate = +[](cuda::CUevent* e, unsigned) {
    *e = reinterpret_cast<cuda::CUevent>(static_cast<uintptr_t>(0xE000 + ++fake().live_events));
    return cuda::CUDA_SUCCESS;
  };
  a.cuEventDestroy = +[](cuda::CUevent) {
    --fake().live_events;
    return cuda::CUDA_SUCCESS;
  };
  a.cuEventRecord = +[](cuda::CUevent e, cuda::CUstream) {
    if (fake().event_record_result != cuda::CUDA_SUCCESS) return fake().event_record_result;
    fake().event_clock[e] = fake().clock_ms;
    return cuda::CUDA_SUCCESS;
  };
  a.cuEventSynchronize = +[](cuda::CUevent) { return cuda::CUDA_SUCCESS; };
  // As CUDA: an event never recorded is an invalid handle here.
  a.cuEventElapsedTime = +[](float* ms, cuda::CUevent start, cuda::CUevent stop) {
    auto& f = fake();
    ++f.elapsed_calls;
    if (f.event_clock.count(start) == 0 || f.event_clock.count(stop) == 0) return cuda::CUresult{400};
    *ms = static_cast<float>(f.event_clock[stop] - f.event_clock[start]);
    return cuda::CUDA_SUCCESS;
  };
  return a;
}

inline nvml::nvmlDevice_t fake_nvml_handle(unsigned index) {
  return reinterpret_cast<nvml::nvmlDevice_t>(static_cast<uintptr_t>(index + 1));
}
inline const FakeDevice& fake_nvml_device(nvml::nvmlDevice_t h) {
  return fake().nvml_devices[reinterpret_cast<uintptr_t>(h) - 1];
}

template <class T>
T fake_pair_value(const std::map<std::pair<std::string, std::string>, T>& table, nvml::nvmlDevice_t a,
                  nvml::nvmlDevice_t b, T fallback) {
  const std::string& x = fake_nvml_device(a).nvml_bus_id;
  const std::string& y = fake_nvml_device(b).nvml_bus_id;
  for (const auto& key : {std::make_pair(x, y), std::make_pair(y, x)}) {
    auto it = table.find(key);
    if (it != table.end()) return it->second;
  }
  return fallback;
}

inline nvml::Api fake_nvml_api() {
  nvml::Api a{};
  a.nvmlInit = +[]() { return fake().nvml_init_result; };
  a.nvmlShutdown = +[]() {
    ++fake().nvml_shutdowns;
    return nvml::NVML_SUCCESS;
  };
  a.nvmlErrorString = +[](nvml::nvmlReturn_t rc) -> const char* {
    switch (rc) {
      case nvml::NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
      case nvml::NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
      case nvml::NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
      default: return "Unknown Error";
    }
  };
  a.nvmlSystemGetDriverVersion = +[](char* out, unsigned len) {
    std::snprintf(out, len, "%s", fake().nvml_driver_version.c_str());
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetCount = +[](unsigned* n) {
    *n = static_cast<unsigned>(fake().nvml_devices.size());
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetHandleByIndex = +[](unsigned i, nvml::nvmlDevice_t* h) {
    *h = fake_nvml_handle(i);
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetName = +[](nvml::nvmlDevice_t h, char* out, unsigned len) {
    std::snprintf(out, len, "%s", fake_nvml_device(h).name.c_str());
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetUUID = +[](nvml::nvmlDevice_t h, char* out, unsigned len) {
    const unsigned char* b = fake_nvml_device(h).uuid;
    std::snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                  b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetPciInfo = +[](nvml::nvmlDevice_t h, nvml::nvmlPciInfo_t* pci) {
    std::snprintf(pci->busId, sizeof pci->busId, "%s", fake_nvml_device(h).nvml_bus_id.c_str());
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetCudaComputeCapability = +[](nvml::nvmlDevice_t h, int* major, int* minor) {
    *major = fake_nvml_device(h).cc_major;
    *minor = fake_nvml_device(h).cc_minor;
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetClockInfo = +[](nvml::nvmlDevice_t h, int type, unsigned* mhz) {
    const FakeDevice& d = fake_nvml_device(h);
    if (type != nvml::NVML_CLOCK_SM && type != nvml::NVML_CLOCK_MEM) return nvml::NVML_ERROR_NOT_SUPPORTED;
    *mhz = type == nvml::NVML_CLOCK_SM ? d.clock_sm : d.clock_mem;
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetMaxClockInfo = +[](nvml::nvmlDevice_t h, int type, unsigned* mhz) {
    const FakeDevice& d = fake_nvml_device(h);
    if (type != nvml::NVML_CLOCK_SM && type != nvml::NVML_CLOCK_MEM) return nvml::NVML_ERROR_NOT_SUPPORTED;
    *mhz = type == nvml::NVML_CLOCK_SM ? d.clock_sm_max : d.clock_mem_max;
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetMemoryInfo = +[](nvml::nvmlDevice_t h, nvml::nvmlMemory_t* m) {
    m->total = fake_nvml_device(h).nvml_total_bytes;
    m->free = fake_nvml_device(h).nvml_free_bytes;
    m->used = m->total - m->free;
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetEnforcedPowerLimit = +[](nvml::nvmlDevice_t h, unsigned* mw) {
    *mw = fake_nvml_device(h).power_limit_mw;
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetTopologyCommonAncestor = +[](nvml::nvmlDevice_t x, nvml::nvmlDevice_t y, int* level) {
    if (fake().ancestor_result != nvml::NVML_SUCCESS) return fake().ancestor_result;
    *level = fake_pair_value(fake().ancestors, x, y, fake().default_ancestor);
    return nvml::NVML_SUCCESS;
  };
  // As NVML: a GPU without NVLink answers NOT_SUPPORTED, a link past its last INVALID_ARGUMENT.
  a.nvmlDeviceGetNvLinkState = +[](nvml::nvmlDevice_t h, unsigned link, int* state) {
    fake().nvlink_state_calls.push_back(link);
    const auto& links = fake_nvml_device(h).nvlinks;
    if (links.empty()) return nvml::NVML_ERROR_NOT_SUPPORTED;
    if (link >= links.size()) return nvml::NVML_ERROR_INVALID_ARGUMENT;
    *state = links[link].active ? nvml::NVML_FEATURE_ENABLED : nvml::NVML_FEATURE_DISABLED;
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetNvLinkRemotePciInfo = +[](nvml::nvmlDevice_t h, unsigned link, nvml::nvmlPciInfo_t* pci) {
    const auto& links = fake_nvml_device(h).nvlinks;
    if (link >= links.size() || !links[link].active) return nvml::NVML_ERROR_INVALID_ARGUMENT;
    std::snprintf(pci->busId, sizeof pci->busId, "%s", links[link].remote_bus.c_str());
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetNvLinkRemoteDeviceType = +[](nvml::nvmlDevice_t h, unsigned link, int* type) {
    const auto& links = fake_nvml_device(h).nvlinks;
    if (link >= links.size() || !links[link].active) return nvml::NVML_ERROR_INVALID_ARGUMENT;
    *type = links[link].remote_type;
    return nvml::NVML_SUCCESS;
  };
  a.nvmlDeviceGetP2PStatus = +[](nvml::nvmlDevice_t x, nvml::nvmlDevice_t y, int index, int* status) {
    if (index != nvml::NVML_P2P_CAPS_INDEX_NVLINK) return nvml::NVML_ERROR_INVALID_ARGUMENT;
    *status = fake_pair_value(fake().p2p_nvlink, x, y, fake().default_p2p_nvlink);
    return nvml::NVML_SUCCESS;
  };
  return a;
}

inline cublaslt::Api fake_cublaslt_api() {
  namespace lt = cublaslt;
  lt::Api a{};
  a.cublasLtGetVersion = +[]() -> size_t { return 131000; };
  a.cublasLtGetStatusName = +[](lt::cublasStatus_t rc) -> const char* {
    return rc == lt::CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_UNKNOWN";
  };
  a.cublasLtGetStatusString = +[](lt::cublasStatus_t rc) -> const char* {
    return rc == lt::CUBLAS_STATUS_NOT_SUPPORTED ? "the functionality requested is not supported" : "unknown";
  };
  a.cublasLtCreate = +[](lt::cublasLtHandle_t* h) {
    ++fake().live_lt_objects;
    *h = reinterpret_cast<lt::cublasLtHandle_t>(0x11);
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtDestroy = +[](lt::cublasLtHandle_t) {
    --fake().live_lt_objects;
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatmulDescCreate = +[](lt::cublasLtMatmulDesc_t* d, int, int) {
    ++fake().live_lt_objects;
    *d = reinterpret_cast<lt::cublasLtMatmulDesc_t>(0x22);
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatmulDescDestroy = +[](lt::cublasLtMatmulDesc_t) {
    --fake().live_lt_objects;
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatmulDescSetAttribute = +[](lt::cublasLtMatmulDesc_t, int attr, const void* value, size_t size) {
    int64_t v = 0;
    if (size == 4) {
      int32_t i = 0;
      std::memcpy(&i, value, 4);
      v = i;
    } else if (size == 8) {
      std::memcpy(&v, value, 8);
    } else {
      return 7;  // CUBLAS_STATUS_INVALID_VALUE
    }
    fake().desc_attributes[attr] = v;
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatrixLayoutCreate = +[](lt::cublasLtMatrixLayout_t* l, int type, uint64_t rows, uint64_t cols,
                                     int64_t ld) {
    ++fake().live_lt_objects;
    fake().layouts.push_back({type, rows, cols, ld});
    *l = reinterpret_cast<lt::cublasLtMatrixLayout_t>(static_cast<uintptr_t>(0x30 + fake().layouts.size()));
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatrixLayoutDestroy = +[](lt::cublasLtMatrixLayout_t) {
    --fake().live_lt_objects;
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatmulPreferenceCreate = +[](lt::cublasLtMatmulPreference_t* p) {
    ++fake().live_lt_objects;
    *p = reinterpret_cast<lt::cublasLtMatmulPreference_t>(0x44);
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatmulPreferenceDestroy = +[](lt::cublasLtMatmulPreference_t) {
    --fake().live_lt_objects;
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatmulPreferenceSetAttribute = +[](lt::cublasLtMatmulPreference_t, int attr, const void* value,
                                               size_t size) {
    if (attr != lt::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || size != 8) return 7;
    std::memcpy(&fake().workspace_preference, value, 8);
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatmulAlgoGetHeuristic = +[](lt::cublasLtHandle_t, lt::cublasLtMatmulDesc_t, lt::cublasLtMatrixLayout_t,
                                         lt::cublasLtMatrixLayout_t, lt::cublasLtMatrixLayout_t,
                                         lt::cublasLtMatrixLayout_t, lt::cublasLtMatmulPreference_t, int requested,
                                         lt::cublasLtMatmulHeuristicResult_t* results, int* returned) {
    const auto& f = fake();
    *returned = std::min(requested, f.heuristic_count);
    for (int i = 0; i < *returned; ++i) {
      results[i] = {};
      results[i].algo.data[0] = 0xA160 + i;  // which algorithm, read back by cublasLtMatmul
      results[i].workspaceSize = size_t{1} << 20;
      results[i].state = i < static_cast<int>(f.heuristic_states.size()) ? f.heuristic_states[i]
                                                                           : lt::CUBLAS_STATUS_SUCCESS;
    }
    return *returned == 0 ? lt::CUBLAS_STATUS_NOT_SUPPORTED : lt::CUBLAS_STATUS_SUCCESS;
  };
  a.cublasLtMatmul = +[](lt::cublasLtHandle_t, lt::cublasLtMatmulDesc_t, const void*, const void*,
                         lt::cublasLtMatrixLayout_t, const void*, lt::cublasLtMatrixLayout_t, const void*, const void*,
                         lt::cublasLtMatrixLayout_t, void*, lt::cublasLtMatrixLayout_t,
                         const lt::cublasLtMatmulAlgo_t* algo, void*, size_t, cuda::CUstream) {
    auto& f = fake();
    ++f.matmul_calls;
    const int i = static_cast<int>(algo->data[0]) - 0xA160;
    if (f.matmul_result != lt::CUBLAS_STATUS_SUCCESS) return f.matmul_result;
    if (f.algo_matmul_results.count(i) != 0) return f.algo_matmul_results[i];
    const int call = f.algo_calls[i]++;
    const bool scripted = i >= 0 && i < static_cast<int>(f.algo_times_ms.size()) && !f.algo_times_ms[i].empty();
    f.clock_ms += scripted ? f.algo_times_ms[i][call % f.algo_times_ms[i].size()] : 1.0;
    f.matmul_algos.push_back(i);
    return lt::CUBLAS_STATUS_SUCCESS;
  };
  return a;
}

}  // namespace parallax::testing
