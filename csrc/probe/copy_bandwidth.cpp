#include "probe/copy_bandwidth.h"

#include <functional>
#include <vector>

#include "probe/gemm.h"  // summarize_times
#include "probe/try.h"

namespace parallax {

namespace {

using cuda::CUdeviceptr;


std::string check_request(const CopyRequest& r) {
  if (r.bytes <= 0) return "copy size must be positive, got " + std::to_string(r.bytes) + " bytes";
  if (r.iters < 1) return "iters must be at least 1, got " + std::to_string(r.iters);
  if (r.warmup < 0) return "warmup must not be negative, got " + std::to_string(r.warmup);
  return "";
}

// The GPU resources of one measurement, released in reverse order of acquisition; the caller's
// current context is restored.
class CopySession {
 public:
  CopySession(const cuda::Api& cu, const CopyRequest& req) : cu_(cu), req_(req) {}
  CopySession(const CopySession&) = delete;
  CopySession& operator=(const CopySession&) = delete;
  ~CopySession() {
    if (stream_ != nullptr) cu_.cuStreamSynchronize(stream_);
    for (auto it = cleanup_.rbegin(); it != cleanup_.rend(); ++it) (*it)();
  }

  std::string run(std::vector<double>& times_ms) {
    PX_TRY_CU("cuInit", cu_.cuInit(0));
    cuda::CUdevice device = 0;
    PX_TRY_CU("cuDeviceGet", cu_.cuDeviceGet(&device, req_.device));
    cuda::CUcontext previous = nullptr, context = nullptr;
    PX_TRY_CU("cuCtxGetCurrent", cu_.cuCtxGetCurrent(&previous));
    PX_TRY_CU("cuDevicePrimaryCtxRetain", cu_.cuDevicePrimaryCtxRetain(&context, device));
    cleanup_.push_back([this, device] { cu_.cuDevicePrimaryCtxRelease(device); });
    PX_TRY_CU("cuCtxSetCurrent", cu_.cuCtxSetCurrent(context));
    cleanup_.push_back([this, previous] { cu_.cuCtxSetCurrent(previous); });
    PX_TRY_CU("cuStreamCreate", cu_.cuStreamCreate(&stream_, cuda::CU_STREAM_DEFAULT));
    cleanup_.push_back([this] { cu_.cuStreamDestroy(stream_); });
    CUdeviceptr src = 0, dst = 0;
    PX_TRY(allocate(src));
    PX_TRY(allocate(dst));
    for (int i = 0; i < req_.warmup; ++i) PX_TRY(copy(src, dst));
    std::vector<cuda::CUevent> starts, stops;
    for (int i = 0; i < req_.iters; ++i) {
      PX_TRY(event(starts));
      PX_TRY(event(stops));
    }
    for (int i = 0; i < req_.iters; ++i) {
      PX_TRY_CU("cuEventRecord", cu_.cuEventRecord(starts[i], stream_));
      PX_TRY(copy(src, dst));
      PX_TRY_CU("cuEventRecord", cu_.cuEventRecord(stops[i], stream_));
    }
    PX_TRY_CU("cuEventSynchronize", cu_.cuEventSynchronize(stops.back()));
    for (int i = 0; i < req_.iters; ++i) {
      float ms = 0;
      PX_TRY_CU("cuEventElapsedTime", cu_.cuEventElapsedTime(&ms, starts[i], stops[i]));
      times_ms.push_back(ms);
    }
    return "";
  }

 private:
  std::string allocate(CUdeviceptr& ptr) {
    PX_TRY_CU("cuMemAlloc", cu_.cuMemAlloc(&ptr, static_cast<size_t>(req_.bytes)));
    cleanup_.push_back([this, ptr] { cu_.cuMemFree(ptr); });
    return "";
  }
  std::string copy(CUdeviceptr src, CUdeviceptr dst) {
    PX_TRY_CU("cuMemcpyDtoDAsync", cu_.cuMemcpyDtoDAsync(dst, src, static_cast<size_t>(req_.bytes), stream_));
    return "";
  }
  std::string event(std::vector<cuda::CUevent>& into) {
    cuda::CUevent e = nullptr;
    PX_TRY_CU("cuEventCreate", cu_.cuEventCreate(&e, cuda::CU_EVENT_DEFAULT));
    cleanup_.push_back([this, e] { cu_.cuEventDestroy(e); });
    into.push_back(e);
    return "";
  }

  const cuda::Api& cu_;
  const CopyRequest& req_;
  cuda::CUstream stream_ = nullptr;
  std::vector<std::function<void()>> cleanup_;
};


}  // namespace

double copy_bytes_per_s(int64_t bytes, double ms) { return 2.0 * static_cast<double>(bytes) / (ms * 1e-3); }

CopyResult measure_copy(const LoadedApi<cuda::Api>& driver, const CopyRequest& req) {
  CopyResult out;
  out.bytes = req.bytes, out.warmup = req.warmup, out.iters = req.iters;
  out.error = check_request(req);
  if (!out.error.empty()) return out;
  if (driver.api == nullptr) {
    out.error = driver.error;
    return out;
  }
  std::vector<double> times;
  {
    CopySession session(*driver.api, req);
    out.error = session.run(times);
  }
  if (!out.error.empty()) return out;
  const TimeSummary t = summarize_times(times);
  if (!(t.median > 0)) {
    out.error = "CUDA events timed the copy at " + std::to_string(t.median) + " ms; no bandwidth can follow";
    return out;
  }
  out.median_ms = t.median, out.min_ms = t.min, out.max_ms = t.max;
  out.bytes_per_s = copy_bytes_per_s(req.bytes, t.median);
  if (t.min > 0) out.bytes_per_s_best = copy_bytes_per_s(req.bytes, t.min);
  return out;
}

CopyResult measure_copy(const CopyRequest& request) { return measure_copy(cuda::driver(), request); }

}  // namespace parallax
