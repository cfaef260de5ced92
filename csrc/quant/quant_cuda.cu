// CUDA quantization kernels: see quant_cuda.h for the contract and README.md for the design.
//
// Work unit: a thread holds half a group of 16 (8 consecutive elements of a row: one 16-byte
// bf16 load or two float4 loads) and its partner lane (lane ^ 1) the other half, so a warp's
// loads and stores are contiguous and every per-group step that needs all 16 elements (the
// block amax, the Hadamard butterfly's stride 8) is one shuffle between the two lanes.
//   1x16  a warp iteration covers 16 consecutive groups (256 elements, contiguous);
//   16x16 a warp iteration covers one 16x16 tile: lane = 2 * row_in_tile + half, the tile
//         amax is a full-warp reduction.
// Loops are grid-stride and warp-uniform (every lane of a warp runs the same iterations,
// lanes past the end only take part in the shuffles), so the full-mask shuffles are safe.
#include "quant/quant_cuda.h"

#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "quant/qdq_math.h"

namespace {

namespace q = parallax::quant::qdq;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xFFFFFFFFu;

thread_local std::string g_error;

int fail(int status, std::string message) {
  g_error = std::move(message);
  return status;
}

int cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return kPxQuantOk;
  return fail(kPxQuantErrCuda, std::string(what) + ": " + cudaGetErrorString(e));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for a grid-stride launch over `units` warp iterations: at most 16 resident-sized
// waves of the device's SMs (the SM count is read once per device).
int grid_for(size_t units) {
  static std::atomic<int> sm_cache[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0;
  int sms = sm_cache[dev].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) sms = 132;
    sm_cache[dev].store(sms, std::memory_order_relaxed);
  }
  const size_t want = (units + kWarps - 1) / kWarps;
  const size_t cap = static_cast<size_t>(sms) * 16;
  return static_cast<int>(want < cap ? (want == 0 ? 1 : want) : cap);
}

// ---- loads and stores of 8 consecutive elements --------------------------------------------

template <typename T>
struct Io;

template <>
struct Io<float> {
  static __device__ __forceinline__ void load(const void* base, size_t i, float v[8]) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    const float4 a = __ldg(p), b = __ldg(p + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  }
  static __device__ __forceinline__ void store(void* base, size_t i, const float v[8]) {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + i);
    __stcs(p, make_float4(v[0], v[1], v[2], v[3]));
    __stcs(p + 1, make_float4(v[4], v[5], v[6], v[7]));
  }
  static __device__ __forceinline__ float load1(const void* base, size_t i) { return static_cast<const float*>(base)[i]; }
  static __device__ __forceinline__ void store1(void* base, size_t i, float v) { static_cast<float*>(base)[i] = v; }
};

template <>
struct Io<uint16_t> {  // bfloat16, as bits
  static __device__ __forceinline__ void load(const void* base, size_t i, float v[8]) {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i));
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = q::bf16_to_f32(static_cast<uint16_t>(u[k] & 0xFFFFu));
      v[2 * k + 1] = q::bf16_to_f32(static_cast<uint16_t>(u[k] >> 16));
    }
  }
  static __device__ __forceinline__ void store(void* base, size_t i, const float v[8]) {
    uint32_t u[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      u[k] = static_cast<uint32_t>(q::f32_to_bf16(v[2 * k])) | (static_cast<uint32_t>(q::f32_to_bf16(v[2 * k + 1])) << 16);
    __stcs(reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + i), make_uint4(u[0], u[1], u[2], u[3]));
  }
  static __device__ __forceinline__ float load1(const void* base, size_t i) {
    return q::bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
  }
  static __device__ __forceinline__ void store1(void* base, size_t i, float v) {
    static_cast<uint16_t*>(base)[i] = q::f32_to_bf16(v);
  }
};

// The Hadamard transform of the group whose half `half` this lane holds in v (partner: lane ^ 1).
// Signs: bit j of `neg_mask` set means s_j = -1. The butterfly strides 1, 2, 4 stay inside a
// half; stride 8 pairs element k of the low half (a) with element k of the high half (b):
// low gets a + b, high gets a - b, exactly qdq::hadamard16_group's order of operations.
__device__ __forceinline__ void hadamard_half(float v[8], int half, uint32_t neg_mask, bool inverse) {
  float s[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) s[k] = ((neg_mask >> (half * 8 + k)) & 1u) ? -1.0f : 1.0f;
  if (!inverse) {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = q::mul(v[k], s[k]);
  }
#pragma unroll
  for (int stride = 1; stride < 8; stride <<= 1) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if ((i & stride) == 0) {
        const float a = v[i], b = v[i + stride];
        v[i] = q::add(a, b);
        v[i + stride] = q::sub(a, b);
      }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float other = __shfl_xor_sync(kFull, v[k], 1);
    v[k] = half == 0 ? q::add(v[k], other) : q::sub(other, v[k]);
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float h = q::mul(v[k], 0.25f);
    v[k] = inverse ? q::mul(h, s[k]) : h;
  }
}

// Max of the finite |v| of 8 values; +inf when any is NaN/inf (marks a non-finite block).
__device__ __forceinline__ float half_amax(const float v[8], bool& nonfinite) {
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (q::is_finite(v[k]))
      m = fmaxf(m, q::abs_(v[k]));
    else
      nonfinite = true;
  }
  return m;
}

// ---- per-tensor amax -----------------------------------------------------------------------

// amax over the finite values of the (optionally transformed) tensor, into ws[0] (zeroed by the
// caller) with an atomic max on the bits: non-negative floats order like their bit patterns
// and max is exact, so the result does not depend on the order of the blocks.
template <typename T, bool kRht>
__global__ void __launch_bounds__(kThreads) amax_kernel(const void* __restrict__ x, size_t n, uint32_t neg_mask,
                                                       float* __restrict__ ws) {
  const int lane = threadIdx.x & 31;
  const size_t halves = n / 8;
  const size_t units = (halves + 31) / 32;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  float m = 0.0f;
  for (size_t u = warp; u < units; u += warps) {
    const size_t h = u * 32 + lane;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (h < halves) Io<T>::load(x, h * 8, v);
    if (kRht) hadamard_half(v, lane & 1, neg_mask, false);
    bool nonfinite = false;  // non-finite values are simply left out of the tensor amax
    m = fmaxf(m, half_amax(v, nonfinite));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
  __shared__ float part[kWarps];
  if (lane == 0) part[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.0f;
    for (int w = 0; w < kWarps; ++w) b = fmaxf(b, part[w]);
    atomicMax(reinterpret_cast<unsigned int*>(ws), q::f2u(b));
  }
}

// ---- NVFP4 quantize-dequantize ---------------------------------------------------------------

struct Nvfp4Args {
  const void* x;
  void* y;
  uint8_t* codes;
  uint8_t* scales;
  float* ws;
  size_t rows, cols;
  bool stochastic;
  uint64_t key;       // hash_key(seed)
  uint32_t neg_mask;  // Hadamard signs
  uint64_t seed;                  // with counter: the per-run seed ...
  const uint32_t* counter;        // ... and the device step counter (NULL: key as given)
};

template <typename T, bool kTile, bool kRht>
__global__ void __launch_bounds__(kThreads) nvfp4_kernel(Nvfp4Args a) {
  const int lane = threadIdx.x & 31, half = lane & 1;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  const float sg = q::global_scale(a.ws[0]);
  if (blockIdx.x == 0 && threadIdx.x == 0) a.ws[1] = sg;
  const size_t gpr = a.cols / 16;  // groups (and scale columns) per row
  const size_t units = kTile ? (a.rows / 16) * gpr : (a.rows * gpr + 15) / 16;
  const uint64_t key = a.counter ? q::hash_key(q::step_seed(a.seed, *a.counter)) : a.key;

  for (size_t u = warp; u < units; u += warps) {
    size_t i;          // index of this lane's first element
    size_t scale_at;   // index of the block's scale byte
    bool live = true;  // this lane holds real data (1x16 tail)
    if (kTile) {
      const size_t tr = u / gpr, tc = u % gpr;
      i = (tr * 16 + (lane >> 1)) * a.cols + tc * 16 + half * 8;
      scale_at = u;
    } else {
      const size_t g = u * 16 + (lane >> 1);
      live = g < a.rows * gpr;
      i = g * 16 + half * 8;
      scale_at = g;
    }
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (live) Io<T>::load(a.x, i, v);
    if (kRht) hadamard_half(v, half, a.neg_mask, false);
    bool nonfinite = false;
    float m = half_amax(v, nonfinite);
    if (nonfinite) m = __uint_as_float(0x7F800000u);
    m = fmaxf(m, __shfl_xor_sync(kFull, m, 1));
    if (kTile) {
#pragma unroll
      for (int o = 2; o < 32; o <<= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
    }
    const q::BlockScale b = q::block_scale(m, sg);
    uint32_t packed = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint8_t c = q::element_code(v[k], b, a.stochastic, key, i + k);
      packed |= static_cast<uint32_t>(c) << (4 * k);
      v[k] = q::element_value(c, b, sg);
    }
    if (!live) continue;
    if (a.y) Io<T>::store(a.y, i, v);
    if (a.codes) __stcs(reinterpret_cast<unsigned int*>(a.codes + i / 2), packed);
    if (a.scales && (kTile ? lane == 0 : half == 0)) a.scales[scale_at] = b.code;
  }
}

// ---- Hadamard transform alone ----------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kThreads) hadamard_kernel(const void* __restrict__ x, void* __restrict__ y, size_t n,
                                                           uint32_t neg_mask, bool inverse) {
  const int lane = threadIdx.x & 31;
  const size_t halves = n / 8, units = (halves + 31) / 32;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  for (size_t u = warp; u < units; u += warps) {
    const size_t h = u * 32 + lane;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (h < halves) Io<T>::load(x, h * 8, v);
    hadamard_half(v, lane & 1, neg_mask, inverse);
#pragma unroll
    for (int k = 0; k < 8; ++k)  // NaN payloads of GPU arithmetic differ from the CPU's: one NaN
      if (q::is_nan(v[k])) v[k] = __uint_as_float(q::kNanBits);
    if (h < halves) Io<T>::store(y, h * 8, v);
  }
}

// ---- FP8 quantize-dequantize -------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kThreads) fp8_kernel(const void* __restrict__ x, void* __restrict__ y,
                                                      uint8_t* __restrict__ codes, size_t n, q::Spec spec,
                                                      float scale, bool saturate) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t chunks = n / 8;
  for (size_t c = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks + 1; c += stride) {
    float v[8];
    const size_t i0 = c * 8;
    const int len = c < chunks ? 8 : static_cast<int>(n - i0);  // the last chunk: the n % 8 tail
    if (len == 8)
      Io<T>::load(x, i0, v);
    else
      for (int k = 0; k < len; ++k) v[k] = Io<T>::load1(x, i0 + k);
    uint8_t cd[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (k >= len) break;
      cd[k] = q::fp8_encode(q::div(v[k], scale), spec, saturate);
      const float d = q::fp8_decode(cd[k], spec);
      v[k] = q::is_nan(d) ? d : q::mul(d, scale);  // the reference's NaN keeps the decoded bits
    }
    if (len == 8) {
      if (y) Io<T>::store(y, i0, v);
      if (codes) {
        uint2 w;
        w.x = cd[0] | (cd[1] << 8) | (cd[2] << 16) | (static_cast<uint32_t>(cd[3]) << 24);
        w.y = cd[4] | (cd[5] << 8) | (cd[6] << 16) | (static_cast<uint32_t>(cd[7]) << 24);
        __stcs(reinterpret_cast<uint2*>(codes + i0), w);
      }
    } else {
      for (int k = 0; k < len; ++k) {
        if (y) Io<T>::store1(y, i0 + k, v[k]);
        if (codes) codes[i0 + k] = cd[k];
      }
    }
  }
}

uint32_t neg_mask_of(uint64_t seed) {
  const uint64_t key = q::hash_key(seed);
  uint32_t m = 0;
  for (int j = 0; j < 16; ++j)
    if (q::hash_keyed(key, static_cast<uint64_t>(j)) >> 31) m |= 1u << j;
  return m;
}

int check_common(const void* x, int dtype, const void* y, const void* codes, size_t n) {
  if (!x && n > 0) return fail(kPxQuantErrArg, "x is NULL");
  if (dtype != kPxQuantF32 && dtype != kPxQuantBF16)
    return fail(kPxQuantErrArg, "dtype must be 0 (float32) or 1 (bfloat16), got " + std::to_string(dtype));
  if (!aligned16(x) || (y && !aligned16(y)) || (codes && !aligned16(codes)))
    return fail(kPxQuantErrAlign, "x, y and codes must be 16-byte aligned");
  return kPxQuantOk;
}

template <typename T>
void launch_nvfp4(const Nvfp4Args& a, bool tile, bool rht, int grid, cudaStream_t s) {
  if (tile)
    rht ? nvfp4_kernel<T, true, true><<<grid, kThreads, 0, s>>>(a) : nvfp4_kernel<T, true, false><<<grid, kThreads, 0, s>>>(a);
  else
    rht ? nvfp4_kernel<T, false, true><<<grid, kThreads, 0, s>>>(a) : nvfp4_kernel<T, false, false><<<grid, kThreads, 0, s>>>(a);
}

}  // namespace

extern "C" {

int px_nvfp4_qdq_cuda(const void* x, int dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                      size_t rows, size_t cols, int mode_16x16, int stochastic, uint64_t seed, int rht,
                      uint64_t rht_seed, CUstream_st* stream) {
  return px_nvfp4_qdq_counter_cuda(x, dtype, y, codes, scales, scale_ws, rows, cols, mode_16x16, stochastic, seed,
                                   nullptr, rht, rht_seed, stream);
}

int px_nvfp4_qdq_counter_cuda(const void* x, int dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                              size_t rows, size_t cols, int mode_16x16, int stochastic, uint64_t seed,
                              const uint32_t* seed_counter, int rht, uint64_t rht_seed, CUstream_st* stream) {
  g_error.clear();
  if (int st = check_common(x, dtype, y, codes, rows * cols)) return st;
  if (!scale_ws) return fail(kPxQuantErrArg, "scale_ws (device float[2]) is required");
  if (cols % 16 != 0) return fail(kPxQuantErrShape, "nvfp4: cols (" + std::to_string(cols) + ") must be a multiple of 16");
  if (mode_16x16 && rows % 16 != 0)
    return fail(kPxQuantErrShape, "nvfp4: rows (" + std::to_string(rows) + ") must be a multiple of 16 for 16x16 blocks");
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const size_t n = rows * cols;
  const uint32_t mask = rht ? neg_mask_of(rht_seed) : 0;
  if (int st = cuda_status(cudaMemsetAsync(scale_ws, 0, 2 * sizeof(float), s), "cudaMemsetAsync")) return st;
  const int ga = grid_for((n / 8 + 31) / 32);
  if (dtype == kPxQuantBF16)
    rht ? amax_kernel<uint16_t, true><<<ga, kThreads, 0, s>>>(x, n, mask, scale_ws)
        : amax_kernel<uint16_t, false><<<ga, kThreads, 0, s>>>(x, n, mask, scale_ws);
  else
    rht ? amax_kernel<float, true><<<ga, kThreads, 0, s>>>(x, n, mask, scale_ws)
        : amax_kernel<float, false><<<ga, kThreads, 0, s>>>(x, n, mask, scale_ws);
  if (int st = cuda_status(cudaGetLastError(), "amax kernel launch")) return st;
  const Nvfp4Args a{x, y, codes, scales, scale_ws, rows, cols, stochastic != 0, q::hash_key(seed), mask, seed,
                    seed_counter};
  const size_t units = mode_16x16 ? (rows / 16) * (cols / 16) : (n / 16 + 15) / 16;
  const int gq = grid_for(units);
  if (dtype == kPxQuantBF16)
    launch_nvfp4<uint16_t>(a, mode_16x16 != 0, rht != 0, gq, s);
  else
    launch_nvfp4<float>(a, mode_16x16 != 0, rht != 0, gq, s);
  return cuda_status(cudaGetLastError(), "nvfp4 kernel launch");
}

int px_hadamard16_cuda(const void* x, int dtype, void* y, size_t rows, size_t cols, uint64_t seed, int inverse,
                       CUstream_st* stream) {
  g_error.clear();
  if (int st = check_common(x, dtype, y, nullptr, rows * cols)) return st;
  if (!y && rows * cols > 0) return fail(kPxQuantErrArg, "y is NULL");
  if (cols % 16 != 0) return fail(kPxQuantErrShape, "hadamard16: cols (" + std::to_string(cols) + ") must be a multiple of 16");
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const size_t n = rows * cols;
  const int g = grid_for((n / 8 + 31) / 32);
  const uint32_t mask = neg_mask_of(seed);
  if (dtype == kPxQuantBF16)
    hadamard_kernel<uint16_t><<<g, kThreads, 0, s>>>(x, y, n, mask, inverse != 0);
  else
    hadamard_kernel<float><<<g, kThreads, 0, s>>>(x, y, n, mask, inverse != 0);
  return cuda_status(cudaGetLastError(), "hadamard16 kernel launch");
}

int px_fp8_qdq_cuda(const void* x, int dtype, void* y, uint8_t* codes, size_t n, int fmt, float scale, int saturate,
                    CUstream_st* stream) {
  g_error.clear();
  if (int st = check_common(x, dtype, y, codes, n)) return st;
  if (fmt != 0 && fmt != 1) return fail(kPxQuantErrArg, "fmt must be 0 (e4m3) or 1 (e5m2), got " + std::to_string(fmt));
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const q::Spec spec = fmt == 0 ? q::e4m3_spec() : q::e5m2_spec();
  // One thread per 8 elements (units of 32 chunks per warp), the n % 8 tail in one extra chunk.
  const int g = grid_for((n / 8 + 1 + 31) / 32);
  if (dtype == kPxQuantBF16)
    fp8_kernel<uint16_t><<<g, kThreads, 0, s>>>(x, y, codes, n, spec, scale, saturate != 0);
  else
    fp8_kernel<float><<<g, kThreads, 0, s>>>(x, y, codes, n, spec, scale, saturate != 0);
  return cuda_status(cudaGetLastError(), "fp8 kernel launch");
}

const char* px_quant_cuda_error_message(void) { return g_error.c_str(); }

}  // extern "C"
