#include "probe/gemm.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <functional>

#include "probe/gemm_inputs.h"
#include "probe/try.h"

namespace parallax {

namespace {

namespace lt = cublaslt;
using cuda::CUdeviceptr;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kUploadChunkBytes = size_t{16} << 20;
constexpr int kRequestedAlgos = 8;

struct PrecisionSpec {
  const char* name;
  Element element;  // of both operands
  int data_type;    // cudaDataType_t of both operands
  bool tensor_scale;
  bool block_scale;
  int min_major, min_minor;
  const char* requirement;
};

const PrecisionSpec kSpecs[] = {
    {"bf16", Element::bf16, lt::CUDA_R_16BF, false, false, 8, 0, "bf16 GEMMs need compute capability 8.0+ (Ampere)"},
    {"fp8", Element::e4m3, lt::CUDA_R_8F_E4M3, true, false, 8, 9,
     "fp8 GEMMs need compute capability 8.9+ (Ada or Hopper)"},
    {"nvfp4", Element::e2m1, lt::CUDA_R_4F_E2M1, false, true, 10, 0,
     "nvfp4 GEMMs need compute capability 10.0+ (Blackwell)"},
};

const PrecisionSpec* find_spec(const std::string& name) {
  for (const auto& spec : kSpecs)
    if (name == spec.name) return &spec;
  return nullptr;
}

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// A VEC16_UE4M3 scale tensor for `rows` rows of `k` elements: one byte per 16 elements, laid
// out by cuBLASLt in atoms of 128 rows × 4 blocks, so both extents are padded.
size_t block_scale_bytes(int64_t rows, int64_t k) {
  return static_cast<size_t>(round_up(rows, 128) * round_up((k + 15) / 16, 4));
}

void* as_pointer(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

std::string check_request(const GemmRequest& r, const PrecisionSpec* spec) {
  if (spec == nullptr) return "unknown precision '" + r.precision + "'; choose one of: bf16, fp8, nvfp4";
  if (r.m <= 0 || r.n <= 0 || r.k <= 0)
    return "GEMM dimensions must be positive, got m=" + std::to_string(r.m) + " n=" + std::to_string(r.n) +
           " k=" + std::to_string(r.k);
  if (r.iters < 1) return "iters must be at least 1, got " + std::to_string(r.iters);
  if (r.warmup < 0) return "warmup must not be negative, got " + std::to_string(r.warmup);
  if (r.tune_iters < 0) return "tune_iters must not be negative, got " + std::to_string(r.tune_iters);
  if (r.rest_ms < 0) return "rest_ms must not be negative, got " + std::to_string(r.rest_ms);
  if (r.tune_warmup < 0) return "tune_warmup must not be negative, got " + std::to_string(r.tune_warmup);
  return "";
}

#define PX_TRY_LT(call, expr)                                                       \
  do {                                                                              \
    const lt::cublasStatus_t rc_ = (expr);                                          \
    if (rc_ != lt::CUBLAS_STATUS_SUCCESS) return lt::call_error(lt_, call, rc_);    \
  } while (0)

// The GPU resources of one measurement, released in reverse order of acquisition.
class GemmSession {
 public:
  GemmSession(const cuda::Api& cu, const lt::Api& lt, const PrecisionSpec& spec, const GemmRequest& req,
              cuda::CUdevice device)
      : cu_(cu), lt_(lt), spec_(spec), req_(req), device_(device) {}
  GemmSession(const GemmSession&) = delete;
  GemmSession& operator=(const GemmSession&) = delete;

  ~GemmSession() {
    if (stream_ != nullptr) cu_.cuStreamSynchronize(stream_);
    for (auto it = cleanup_.rbegin(); it != cleanup_.rend(); ++it) (*it)();
  }

  // Empty on success; then `times_ms` holds the chosen algorithm's timed calls. The algorithm
  // fields of `out` are filled as far as the run got.
  std::string run(GemmResult& out, std::vector<double>& times_ms) {
    PX_TRY(enter_context());
    PX_TRY(prepare_operands());
    PX_TRY(describe_matmul());
    PX_TRY(find_algorithms(out.algo_count));
    PX_TRY(choose_algorithm(out));
    if (req_.tune_iters > 0 && req_.rest_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(req_.rest_ms));
    return time_calls(algo_, req_.warmup, req_.iters, times_ms);
  }

 private:
  // The primary context is the one torch and JAX use; the caller's current context is restored.
  std::string enter_context() {
    cuda::CUcontext previous = nullptr, context = nullptr;
    PX_TRY_CU("cuCtxGetCurrent", cu_.cuCtxGetCurrent(&previous));
    PX_TRY_CU("cuDevicePrimaryCtxRetain", cu_.cuDevicePrimaryCtxRetain(&context, device_));
    cleanup_.push_back([this] { cu_.cuDevicePrimaryCtxRelease(device_); });
    PX_TRY_CU("cuCtxSetCurrent", cu_.cuCtxSetCurrent(context));
    cleanup_.push_back([this, previous] { cu_.cuCtxSetCurrent(previous); });
    PX_TRY_CU("cuStreamCreate", cu_.cuStreamCreate(&stream_, cuda::CU_STREAM_DEFAULT));
    cleanup_.push_back([this] { cu_.cuStreamDestroy(stream_); });
    return "";
  }

  std::string allocate(CUdeviceptr& ptr, size_t bytes) {
    PX_TRY_CU("cuMemAlloc", cu_.cuMemAlloc(&ptr, bytes));
    cleanup_.push_back([this, ptr] { cu_.cuMemFree(ptr); });
    return "";
  }

  // One random host chunk (at most 16 MiB) tiled over the buffer: large operands upload fast.
  std::string upload_random(CUdeviceptr ptr, size_t bytes, Element element, uint64_t seed) {
    std::vector<unsigned char> chunk(std::min(bytes, kUploadChunkBytes));
    fill_random(element, chunk.data(), chunk.size(), seed);
    for (size_t offset = 0; offset < bytes; offset += chunk.size()) {
      const size_t n = std::min(chunk.size(), bytes - offset);
      PX_TRY_CU("cuMemcpyHtoD", cu_.cuMemcpyHtoD(ptr + offset, chunk.data(), n));
    }
    return "";
  }

  std::string prepare_operands() {
    const int64_t m = req_.m, n = req_.n, k = req_.k;
    const size_t a_bytes = element_bytes(spec_.element, n * k);  // W [n, k]
    const size_t b_bytes = element_bytes(spec_.element, m * k);  // X [m, k]
    PX_TRY(allocate(a_, a_bytes));
    PX_TRY(allocate(b_, b_bytes));
    PX_TRY(allocate(d_, element_bytes(Element::bf16, m * n)));
    PX_TRY(allocate(workspace_, kWorkspaceBytes));
    PX_TRY(upload_random(a_, a_bytes, spec_.element, 1));
    PX_TRY(upload_random(b_, b_bytes, spec_.element, 2));
    if (spec_.tensor_scale) {
      const float one = 1.0f;
      PX_TRY(allocate(a_scale_, sizeof one));
      PX_TRY_CU("cuMemcpyHtoD", cu_.cuMemcpyHtoD(a_scale_, &one, sizeof one));
      b_scale_ = a_scale_;
    }
    if (spec_.block_scale) {
      PX_TRY(allocate(a_scale_, block_scale_bytes(n, k)));
      PX_TRY(allocate(b_scale_, block_scale_bytes(m, k)));
      PX_TRY(upload_random(a_scale_, block_scale_bytes(n, k), Element::ue4m3, 3));
      PX_TRY(upload_random(b_scale_, block_scale_bytes(m, k), Element::ue4m3, 4));
    }
    // Uploads go through the legacy stream; finish them before the measuring stream reads.
    PX_TRY_CU("cuCtxSynchronize", cu_.cuCtxSynchronize());
    return "";
  }

  std::string set_desc(const char* attribute, int attr, const void* value, size_t size) {
    const std::string call = std::string("cublasLtMatmulDescSetAttribute(") + attribute + ")";
    PX_TRY_LT(call.c_str(), lt_.cublasLtMatmulDescSetAttribute(desc_, attr, value, size));
    return "";
  }

  std::string make_layout(lt::cublasLtMatrixLayout_t& layout, int type, int64_t rows, int64_t cols) {
    PX_TRY_LT("cublasLtMatrixLayoutCreate",
              lt_.cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(cols), rows));
    cleanup_.push_back([this, layout] { lt_.cublasLtMatrixLayoutDestroy(layout); });
    return "";
  }

  // Column-major Dᵀ[n, m] = Wᵀ-op(A = W stored k×n) · (B = X stored k×m): transa = T, transb = N.
  std::string describe_matmul() {
    PX_TRY_LT("cublasLtCreate", lt_.cublasLtCreate(&handle_));
    cleanup_.push_back([this] { lt_.cublasLtDestroy(handle_); });
    PX_TRY_LT("cublasLtMatmulDescCreate",
              lt_.cublasLtMatmulDescCreate(&desc_, lt::CUBLAS_COMPUTE_32F, lt::CUDA_R_32F));
    cleanup_.push_back([this] { lt_.cublasLtMatmulDescDestroy(desc_); });
    const int32_t op_t = lt::CUBLAS_OP_T, op_n = lt::CUBLAS_OP_N;
    PX_TRY(set_desc("TRANSA", lt::CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t));
    PX_TRY(set_desc("TRANSB", lt::CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n));
    if (spec_.block_scale) {
      const int32_t mode = lt::CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
      PX_TRY(set_desc("A_SCALE_MODE", lt::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
      PX_TRY(set_desc("B_SCALE_MODE", lt::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
    }
    if (spec_.tensor_scale || spec_.block_scale) {
      void* a_scale = as_pointer(a_scale_);
      void* b_scale = as_pointer(b_scale_);
      PX_TRY(set_desc("A_SCALE_POINTER", lt::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
      PX_TRY(set_desc("B_SCALE_POINTER", lt::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
    }
    PX_TRY(make_layout(a_layout_, spec_.data_type, req_.k, req_.n));
    PX_TRY(make_layout(b_layout_, spec_.data_type, req_.k, req_.m));
    PX_TRY(make_layout(d_layout_, lt::CUDA_R_16BF, req_.n, req_.m));
    return "";
  }

  std::string find_algorithms(int& count) {
    lt::cublasLtMatmulPreference_t pref = nullptr;
    PX_TRY_LT("cublasLtMatmulPreferenceCreate", lt_.cublasLtMatmulPreferenceCreate(&pref));
    cleanup_.push_back([this, pref] { lt_.cublasLtMatmulPreferenceDestroy(pref); });
    const uint64_t workspace = kWorkspaceBytes;
    PX_TRY_LT("cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
              lt_.cublasLtMatmulPreferenceSetAttribute(pref, lt::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace, sizeof workspace));
    candidates_.assign(kRequestedAlgos, {});
    count = 0;
    PX_TRY_LT("cublasLtMatmulAlgoGetHeuristic",
              lt_.cublasLtMatmulAlgoGetHeuristic(handle_, desc_, a_layout_, b_layout_, d_layout_, d_layout_, pref,
                                                 kRequestedAlgos, candidates_.data(), &count));
    if (count <= 0) return "cublasLtMatmulAlgoGetHeuristic offered no algorithm for this GEMM";
    candidates_.resize(std::min(count, kRequestedAlgos));
    return "";
  }

  // cuBLASLt fills a result's other fields only when its state is success.
  std::string candidate_error(size_t i) const {
    const lt::cublasStatus_t state = candidates_[i].state;
    return state == lt::CUBLAS_STATUS_SUCCESS
               ? ""
               : lt::call_error(lt_, "cublasLtMatmulAlgoGetHeuristic (this algorithm)", state);
  }

  std::string choose_algorithm(GemmResult& out) {
    if (req_.tune_iters == 0) {
      PX_TRY(candidate_error(0));
      algo_ = candidates_[0].algo;
      out.algo_index = 0;
      return "";
    }
    for (size_t i = 0; i < candidates_.size(); ++i) {
      out.algo_trials.push_back({static_cast<int>(i), std::nullopt, ""});
      out.algos_tried = static_cast<int>(out.algo_trials.size());
      PX_TRY(time_candidate(i, out.algo_trials.back()));
    }
    const AlgoTrial* best = nullptr;
    for (const AlgoTrial& t : out.algo_trials)
      if (t.median_ms && (best == nullptr || *t.median_ms < *best->median_ms)) best = &t;
    if (best == nullptr)
      return "every algorithm the heuristic offered failed; algorithm 0: " + out.algo_trials[0].error;
    algo_ = candidates_[best->index].algo;
    out.algo_index = best->index;
    return "";
  }

  // A failing cublasLtMatmul rules this algorithm out (recorded in `trial`); a failing CUDA
  // call is returned and ends the measurement.
  std::string time_candidate(size_t i, AlgoTrial& trial) {
    trial.error = candidate_error(i);
    if (!trial.error.empty()) return "";
    // The first candidate that runs also takes the measurement's warm-up: no candidate is
    // judged on a GPU still leaving idle clocks.
    const int warmup = req_.tune_warmup + (gpu_warm_ ? 0 : req_.warmup);
    std::vector<double> times;
    const std::string error = time_calls(candidates_[i].algo, warmup, req_.tune_iters, times);
    if (!error.empty() && !matmul_failed_) return error;
    if (!error.empty()) {
      trial.error = error;
      return "";
    }
    trial.median_ms = summarize_times(times).median;
    gpu_warm_ = true;
    return "";
  }

  std::string matmul(const lt::cublasLtMatmulAlgo_t& algo) {
    const float alpha = 1.0f, beta = 0.0f;
    const lt::cublasStatus_t rc =
        lt_.cublasLtMatmul(handle_, desc_, &alpha, as_pointer(a_), a_layout_, as_pointer(b_), b_layout_, &beta,
                           as_pointer(d_), d_layout_, as_pointer(d_), d_layout_, &algo, as_pointer(workspace_),
                           kWorkspaceBytes, stream_);
    matmul_failed_ = rc != lt::CUBLAS_STATUS_SUCCESS;
    return matmul_failed_ ? lt::call_error(lt_, "cublasLtMatmul", rc) : "";
  }

  // Events are created once, as many pairs as the longest timed run needs, and reused.
  std::string ensure_events(int pairs) {
    while (static_cast<int>(start_.size()) < pairs) {
      cuda::CUevent start = nullptr, stop = nullptr;
      PX_TRY_CU("cuEventCreate", cu_.cuEventCreate(&start, cuda::CU_EVENT_DEFAULT));
      cleanup_.push_back([this, start] { cu_.cuEventDestroy(start); });
      start_.push_back(start);
      PX_TRY_CU("cuEventCreate", cu_.cuEventCreate(&stop, cuda::CU_EVENT_DEFAULT));
      cleanup_.push_back([this, stop] { cu_.cuEventDestroy(stop); });
      stop_.push_back(stop);
    }
    return "";
  }

  // All calls are queued back to back; each timed one sits between its own pair of events.
  std::string time_calls(const lt::cublasLtMatmulAlgo_t& algo, int warmup, int iters, std::vector<double>& times_ms) {
    matmul_failed_ = false;
    PX_TRY(ensure_events(iters));
    for (int i = 0; i < warmup; ++i) PX_TRY(matmul(algo));
    for (int i = 0; i < iters; ++i) {
      PX_TRY_CU("cuEventRecord", cu_.cuEventRecord(start_[i], stream_));
      PX_TRY(matmul(algo));
      PX_TRY_CU("cuEventRecord", cu_.cuEventRecord(stop_[i], stream_));
    }
    PX_TRY_CU("cuEventSynchronize", cu_.cuEventSynchronize(stop_[iters - 1]));
    times_ms.clear();
    for (int i = 0; i < iters; ++i) {
      float ms = 0;
      PX_TRY_CU("cuEventElapsedTime", cu_.cuEventElapsedTime(&ms, start_[i], stop_[i]));
      times_ms.push_back(ms);
    }
    return "";
  }

  const cuda::Api& cu_;
  const lt::Api& lt_;
  const PrecisionSpec& spec_;
  const GemmRequest& req_;
  const cuda::CUdevice device_;
  std::vector<std::function<void()>> cleanup_;
  cuda::CUstream stream_ = nullptr;
  CUdeviceptr a_ = 0, b_ = 0, d_ = 0, a_scale_ = 0, b_scale_ = 0, workspace_ = 0;
  lt::cublasLtHandle_t handle_ = nullptr;
  lt::cublasLtMatmulDesc_t desc_ = nullptr;
  lt::cublasLtMatrixLayout_t a_layout_ = nullptr, b_layout_ = nullptr, d_layout_ = nullptr;
  std::vector<lt::cublasLtMatmulHeuristicResult_t> candidates_;
  lt::cublasLtMatmulAlgo_t algo_{};
  std::vector<cuda::CUevent> start_, stop_;
  bool matmul_failed_ = false;  // the last error came from cublasLtMatmul, not from CUDA
  bool gpu_warm_ = false;       // a candidate has run its calls
};

// Empty when the device can run `spec`; otherwise why not (asks the driver only, no GPU work).
std::string check_device(const cuda::Api& cu, const PrecisionSpec& spec, int ordinal, cuda::CUdevice& device) {
  cuda::CUresult rc = cu.cuInit(0);
  if (rc != cuda::CUDA_SUCCESS) return cuda::call_error(cu, "cuInit", rc);
  rc = cu.cuDeviceGet(&device, ordinal);
  if (rc != cuda::CUDA_SUCCESS) return cuda::call_error(cu, "cuDeviceGet", rc);
  int major = 0, minor = 0;
  rc = cu.cuDeviceGetAttribute(&major, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  if (rc == cuda::CUDA_SUCCESS)
    rc = cu.cuDeviceGetAttribute(&minor, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  if (rc != cuda::CUDA_SUCCESS) return cuda::call_error(cu, "cuDeviceGetAttribute", rc);
  if (major < spec.min_major || (major == spec.min_major && minor < spec.min_minor))
    return std::string(spec.requirement) + "; this GPU is " + std::to_string(major) + "." + std::to_string(minor);
  return "";
}

#undef PX_TRY_LT

}  // namespace

const std::vector<std::string>& gemm_precisions() {
  static const std::vector<std::string> names = {"bf16", "fp8", "nvfp4"};
  return names;
}

TimeSummary summarize_times(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  const double median = n % 2 == 1 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  return {median, times.front(), times.back()};
}

GemmResult measure_gemm(const LoadedApi<cuda::Api>& driver, const LoadedApi<cublaslt::Api>& cublaslt,
                        const GemmRequest& req) {
  GemmResult out;
  out.precision = req.precision;
  out.m = req.m, out.n = req.n, out.k = req.k;
  out.warmup = req.warmup, out.iters = req.iters;
  out.tune_warmup = req.tune_warmup, out.tune_iters = req.tune_iters, out.rest_ms = req.rest_ms;
  out.flops = 2.0 * static_cast<double>(req.m) * static_cast<double>(req.n) * static_cast<double>(req.k);
  const PrecisionSpec* spec = find_spec(req.precision);
  out.error = check_request(req, spec);
  if (!out.error.empty()) return out;
  if (driver.api == nullptr) {
    out.error = driver.error;
    return out;
  }
  cuda::CUdevice device = 0;
  out.error = check_device(*driver.api, *spec, req.device, device);
  if (!out.error.empty()) return out;
  if (cublaslt.api == nullptr) {
    out.error = cublaslt.error;
    return out;
  }
  out.library = cublaslt.library;
  out.cublaslt_version = static_cast<int64_t>(cublaslt.api->cublasLtGetVersion());
  std::vector<double> times;
  {
    GemmSession session(*driver.api, *cublaslt.api, *spec, req, device);
    out.error = session.run(out, times);
  }
  if (!out.error.empty()) return out;
  const TimeSummary t = summarize_times(times);
  if (!(t.median > 0)) {
    out.error = "CUDA events timed the GEMM at " + std::to_string(t.median) + " ms; no throughput can follow";
    return out;
  }
  out.median_ms = t.median, out.min_ms = t.min, out.max_ms = t.max;
  out.tflops = out.flops / (t.median * 1e-3) / 1e12;
  if (t.min > 0) out.tflops_best = out.flops / (t.min * 1e-3) / 1e12;
  return out;
}

GemmResult measure_gemm(const GemmRequest& request) {
  return measure_gemm(cuda::driver(), cublaslt::library(), request);
}

}  // namespace parallax
