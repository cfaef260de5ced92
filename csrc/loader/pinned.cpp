#include "loader/pinned.h"

#include "common/dynlib.h"

namespace parallax::loader {

namespace {
// The few driver-API types and entry points used here (cuda.h is not needed to build).
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;
constexpr unsigned kRegisterPortable = 0x01;  // CU_MEMHOSTREGISTER_PORTABLE: every context
constexpr int kAttributeMemoryType = 2;        // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryTypeHost = 1;        // CU_MEMORYTYPE_HOST: page-locked host memory
}  // namespace

struct HostPinner::Driver {
  DynLib lib;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*cuMemHostRegister)(void*, size_t, unsigned) = nullptr;
  CUresult (*cuMemHostUnregister)(void*) = nullptr;
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr) = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;

  // Holds device 0's primary context current on this thread for one call.
  template <typename Call>
  CUresult in_context(Call call) {
    if (cuCtxPushCurrent(context) != 0) return -1;
    CUresult rc = call();
    CUcontext popped = nullptr;
    cuCtxPopCurrent(&popped);
    return rc;
  }
};

HostPinner::HostPinner(bool enabled) {
  if (!enabled) {
    status_ = "pageable (pinning disabled)";
    return;
  }
  auto d = std::make_unique<Driver>();
  if (!d->lib.open({"libcuda.so.1", "libcuda.so"})) {
    status_ = "pageable (no CUDA driver: " + d->lib.error() + ")";
    return;
  }
  SymbolBinder b(d->lib);  // newest name first, as cuda.h maps them
  b.bind(d->cuInit, {"cuInit"});
  b.bind(d->cuDeviceGetCount, {"cuDeviceGetCount"});
  b.bind(d->cuDeviceGet, {"cuDeviceGet"});
  b.bind(d->cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
  b.bind(d->cuDevicePrimaryCtxRelease, {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"});
  b.bind(d->cuCtxPushCurrent, {"cuCtxPushCurrent_v2", "cuCtxPushCurrent"});
  b.bind(d->cuCtxPopCurrent, {"cuCtxPopCurrent_v2", "cuCtxPopCurrent"});
  b.bind(d->cuMemHostRegister, {"cuMemHostRegister_v2", "cuMemHostRegister"});
  b.bind(d->cuMemHostUnregister, {"cuMemHostUnregister"});
  b.bind(d->cuPointerGetAttribute, {"cuPointerGetAttribute"});
  if (!b.complete()) {
    status_ = "pageable (the CUDA driver lacks a needed entry point: " + b.error() + ")";
    return;
  }
  int count = 0;
  CUresult rc = d->cuInit(0);
  if (rc == 0) rc = d->cuDeviceGetCount(&count);
  if (rc != 0 || count == 0) {
    status_ = "pageable (no CUDA device; cuInit/cuDeviceGetCount returned " + std::to_string(rc) + ")";
    return;
  }
  rc = d->cuDeviceGet(&d->device, 0);
  if (rc == 0) rc = d->cuDevicePrimaryCtxRetain(&d->context, d->device);
  if (rc != 0) {
    status_ = "pageable (cannot retain the primary context: CUDA error " + std::to_string(rc) + ")";
    return;
  }
  driver_ = std::move(d);
  status_ = "pinned (cuMemHostRegister)";
}

HostPinner::~HostPinner() {
  if (driver_) driver_->cuDevicePrimaryCtxRelease(driver_->device);
}

bool HostPinner::available() const { return driver_ != nullptr; }

bool HostPinner::pin(void* ptr, size_t bytes) {
  if (!driver_) return false;
  Driver& d = *driver_;
  CUresult rc = d.in_context([&] { return d.cuMemHostRegister(ptr, bytes, kRegisterPortable); });
  if (rc != 0) {
    status_ = "pageable (cuMemHostRegister returned CUDA error " + std::to_string(rc) + ")";
    return false;
  }
  return true;
}

void HostPinner::unpin(void* ptr) {
  if (!driver_) return;
  Driver& d = *driver_;
  d.in_context([&] { return d.cuMemHostUnregister(ptr); });
}

bool HostPinner::page_locked(const void* ptr, size_t bytes) const {
  if (!driver_ || ptr == nullptr || bytes == 0) return false;
  Driver& d = *driver_;
  auto is_host = [&](const void* p) {
    unsigned type = 0;
    // Memory the driver does not know (pageable) answers CUDA_ERROR_INVALID_VALUE.
    CUresult rc = d.in_context([&] {
      return d.cuPointerGetAttribute(&type, kAttributeMemoryType, reinterpret_cast<CUdeviceptr>(p));
    });
    return rc == 0 && type == kMemoryTypeHost;
  };
  const char* first = static_cast<const char*>(ptr);
  return is_host(first) && is_host(first + bytes - 1);
}

}  // namespace parallax::loader
