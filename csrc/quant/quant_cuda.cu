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

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "quant/qdq_columns.h"
#include "quant/qdq_math.h"
#include "quant/qdq_mx.h"
#include "quant/qdq_schedule.h"

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

// The device's SM count (read once per device).
int sm_count() {
  static std::atomic<int> sm_cache[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0;
  int sms = sm_cache[dev].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) sms = 132;
    sm_cache[dev].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

// Blocks for a grid-stride launch over `units` warp iterations: at most 16 resident-sized
// waves of the device's SMs.
int grid_for(size_t units) {
  const size_t want = (units + kWarps - 1) / kWarps;
  const size_t cap = static_cast<size_t>(sm_count()) * 16;
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

// ---- NVFP4: groups of 16 -------------------------------------------------------------------
//
// The NVFP4 kernels give each thread one group of 16 consecutive elements of a row (one 1x16
// block, or one row of a 16x16 tile): two 16-byte loads for bf16, four for float32, and every
// per-block step in registers. See qdq_math.h's "fast paths" for the arithmetic.

// How a group's 16-byte loads treat the caches: streamed (kStream, __ldcs: read once, the
// quantize passes), through the read-only path (kKeep, __ldg: the amax pass, whose lines the
// quantize pass reads again from L2), or marked to stay in L2 (kLast: the single-read kernel's
// first pass over the groups it does not keep in shared memory, with an evict_last policy).
enum Load { kStream, kKeep, kLast };

__device__ __forceinline__ uint64_t evict_last_policy() {
  uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}

template <Load kLoad>
__device__ __forceinline__ uint4 load16(const uint4* p, uint64_t pol) {
  if constexpr (kLoad == kKeep) return __ldg(p);
  else if constexpr (kLoad == kStream) return __ldcs(p);
  else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p), "l"(pol));
    return r;
#else
    return __ldg(p);
#endif
  }
}

// A group of 16 in registers as loaded: kWords 16-byte words, word k read and written whole
// (load, and the single-read kernel's copies to and from shared memory).
template <typename T>
struct Group;

template <>
struct Group<uint16_t> {  // bfloat16: 8 words, element 2j in the low half of w[j]
  static constexpr int kWords = 2;
  uint32_t w[8];
  template <Load kLoad = kStream>
  __device__ __forceinline__ void load(const void* base, size_t i, uint64_t pol = 0) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i);
#pragma unroll
    for (int k = 0; k < kWords; ++k) set_word(k, load16<kLoad>(p + k, pol));
  }
  __device__ __forceinline__ uint4 word(int k) const { return make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]); }
  __device__ __forceinline__ void set_word(int k, uint4 a) {
    w[4 * k] = a.x; w[4 * k + 1] = a.y; w[4 * k + 2] = a.z; w[4 * k + 3] = a.w;
  }
  __device__ __forceinline__ void to_float(float v[16]) const {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[2 * j] = __uint_as_float(w[j] << 16);
      v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
    }
  }
};

template <>
struct Group<float> {
  static constexpr int kWords = 4;
  float v[16];
  template <Load kLoad = kStream>
  __device__ __forceinline__ void load(const void* base, size_t i, uint64_t pol = 0) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const float*>(base) + i);
#pragma unroll
    for (int k = 0; k < kWords; ++k) set_word(k, load16<kLoad>(p + k, pol));
  }
  __device__ __forceinline__ uint4 word(int k) const {
    return make_uint4(__float_as_uint(v[4 * k]), __float_as_uint(v[4 * k + 1]), __float_as_uint(v[4 * k + 2]),
                      __float_as_uint(v[4 * k + 3]));
  }
  __device__ __forceinline__ void set_word(int k, uint4 a) {
    v[4 * k] = __uint_as_float(a.x); v[4 * k + 1] = __uint_as_float(a.y);
    v[4 * k + 2] = __uint_as_float(a.z); v[4 * k + 3] = __uint_as_float(a.w);
  }
  __device__ __forceinline__ void to_float(float o[16]) const {
#pragma unroll
    for (int k = 0; k < 16; ++k) o[k] = v[k];
  }
};

// Output words of a group: 8 (bf16 pairs) or 16 (float32 bits).
template <typename T>
constexpr int kOutWords = sizeof(T) == 2 ? 8 : 16;

template <typename T>
__device__ __forceinline__ void store_group(void* base, size_t i, const uint32_t y[kOutWords<T>]) {
  uint4* p = reinterpret_cast<uint4*>(static_cast<T*>(base) + i);
#pragma unroll
  for (int k = 0; k < kOutWords<T> / 4; ++k) __stcs(p + k, make_uint4(y[4 * k], y[4 * k + 1], y[4 * k + 2], y[4 * k + 3]));
}

// Programmatic dependent launch (sm_90+): the amax kernel lets the quantize kernel be launched at
// once; the quantize kernel issues its first loads (the input is not written by the amax kernel)
// and then waits for the amax kernel to complete and its memory to be visible before it reads
// the amax. Without the launch attribute both are no-ops.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The Hadamard signs (+1/-1) as kernel parameters: read from the constant bank, no registers.
struct Signs {
  float s[16];
};

// ---- per-tensor amax -----------------------------------------------------------------------

// The thread block's largest of its warps' maxima m (float bits of a magnitude) into ws[0] by an
// atomic max on the bits (every thread of the block calls it once).
__device__ __forceinline__ void block_max_into(uint32_t m, float* ws) {
  __shared__ uint32_t part[kWarps];
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t b = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) b = max(b, part[w]);
    if (b) atomicMax(reinterpret_cast<unsigned int*>(ws), b);
  }
}

// The amax over the finite values of groups (optionally transformed), as integer keys that
// put NaN and inf below every finite value: float32, max of bits + 2^23 (a non-finite magnitude
// >= 0x7F800000 then has the sign bit, so a signed max drops it); bfloat16 without the
// transform, per 16-bit lane max of bits + 0x80 (two lanes per instruction).
template <typename T, bool kRht>
struct AmaxAcc {
  static constexpr bool kLanes = sizeof(T) == 2 && !kRht;
  int32_t key = 0;     // float32 key: max of bits + 0x00800000 over finite magnitudes
  uint32_t lanes = 0;  // bf16 keys, two s16 lanes

  __device__ __forceinline__ void add(const Group<T>& in, const Signs& sgn) {
    if constexpr (kLanes) {
#pragma unroll
      for (int j = 0; j < 8; ++j) lanes = q::max_s16x2(lanes, (in.w[j] & 0x7FFF7FFFu) + 0x00800080u);
    } else {
      float v[16];
      in.to_float(v);
      if (kRht) q::hadamard16_group(v, sgn.s, false);
#pragma unroll
      for (int k = 0; k < 16; ++k) key = max(key, static_cast<int32_t>((__float_as_uint(v[k]) & 0x7FFFFFFFu) + 0x00800000u));
    }
  }

  // The float bits of the largest finite magnitude added (0 if none).
  __device__ __forceinline__ uint32_t bits() const {
    if constexpr (kLanes) {
      const int32_t l = max(static_cast<int32_t>(static_cast<int16_t>(lanes & 0xFFFFu)),
                            static_cast<int32_t>(static_cast<int16_t>(lanes >> 16)));
      return l > 0x80 ? static_cast<uint32_t>(l - 0x80) << 16 : 0u;
    } else {
      return key > 0x00800000 ? static_cast<uint32_t>(key - 0x00800000) : 0u;
    }
  }
};

// The element offset of group g in a tensor of that layout: dense tensors may have 2^32 groups
// or more, strided ones (px_nvfp4_qdq_parts_cuda) fewer than 2^31 (checked by the host).
__device__ __forceinline__ size_t group_offset(const q::GroupLayout& l, size_t g) {
  return l.dense ? g * 16 : l.offset(static_cast<uint32_t>(g));
}

// amax over the finite values of the (optionally transformed) tensor, into ws[0] (zeroed by the
// caller) with an atomic max on the bits: non-negative floats order like their bit patterns
// and max is exact, so the result does not depend on the order of the blocks. kV1: the previous
// kernel (one group a thread in flight), px_quant_cuda_set_legacy's.
template <typename T, bool kRht, bool kV1 = false>
__global__ void __launch_bounds__(kThreads) amax_kernel(const void* __restrict__ x, size_t groups,
                                                       const q::GroupLayout layout, const Signs sgn,
                                                       float* __restrict__ ws) {
  pdl_launch_dependents();
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  AmaxAcc<T, kRht> acc;
  // two groups a thread in flight (bf16 without the transform: 64 bytes), both loads issued before
  // either is reduced: the profile of 2026-12-02-h200-c had this kernel at 75% of DRAM peak with
  // every warp waiting on its one group (80 of 93 cycles between instructions)
  constexpr bool kPair = sizeof(T) == 2 && !kRht && !kV1;
  for (size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += kPair ? 2 * stride : stride) {
    Group<T> in, next;
    in.template load<kKeep>(x, group_offset(layout, g));
    const bool second = kPair && g + stride < groups;
    if (second) next.template load<kKeep>(x, group_offset(layout, g + stride));
    acc.add(in, sgn);
    if (second) acc.add(next, sgn);
  }
  block_max_into(__reduce_max_sync(kFull, acc.bits()), ws);
}

// ---- NVFP4 quantize-dequantize ---------------------------------------------------------------

struct Nvfp4Args {
  const void* x;
  void* y;
  uint8_t* codes;
  uint8_t* scales;
  float* ws;
  size_t rows, cols;
  uint32_t groups;            // 1x16: the groups of this launch (a chunk of < 2^32 of them) ...
  uint64_t index_base;        // ... and the tensor index of its first element (x, y, codes, scales offset to it)
  uint64_t key;               // hash_key(seed)
  uint64_t seed;              // with counter: the per-run seed ...
  const uint32_t* counter;    // ... and the device step counter (NULL: key as given)
  Signs sgn;                  // Hadamard signs
  q::GroupLayout layout{};    // rows of x and y layout.ld elements apart (cols, or more); 1x16: group g's offset
};

// The generic path (qdq::generic_group), out of line: it is rare (only tensors whose amax is
// below ~1e-30 have such blocks) and its 16 divisions would otherwise take registers and
// instruction cache from the fast path. It stores the group's outputs itself, so that the fast
// path's stay in registers.
template <typename T>
__device__ __noinline__ void generic_group_store(const float v[16], uint32_t amax_bits, float sg, bool stochastic,
                                                  uint64_t key, size_t yi, size_t i, uint64_t index, void* y,
                                                  uint8_t* codes_out) {
  float yf[16];
  uint32_t codes[2], w[kOutWords<T>];
  q::generic_group(v, amax_bits, sg, stochastic, key, index, codes, yf);
  if (sizeof(T) == 2) {
    for (int j = 0; j < 8; ++j) w[j] = q::f32_to_bf16(yf[2 * j]) | (static_cast<uint32_t>(q::f32_to_bf16(yf[2 * j + 1])) << 16);
  } else {
    for (int k = 0; k < 16; ++k) w[k] = __float_as_uint(yf[k]);
  }
  if (y) store_group<T>(y, yi, w);
  if (codes_out) __stcs(reinterpret_cast<uint2*>(codes_out + i / 2), make_uint2(codes[0], codes[1]));
}

// One group through qdq_math.h's fast paths: prepare() (the transform, the magnitudes and the
// group's amax), then generic_store() or quantize() for the block's scale code. kV1: stochastic
// rounding by the previous kernels' path (group_sr_v1; px_quant_cuda_set_legacy), same bits.
template <typename T, bool kRht, bool kSr, bool kV1 = false>
struct GroupQdq {
  static constexpr bool kBf16 = sizeof(T) == 2;
  static constexpr bool kPairs = kBf16 && !kRht && !kSr;  // RNE compares on the bf16 lanes
  uint32_t a[8];    // kPairs: split_bf16x8's magnitude pairs
  uint32_t signs[2];
  uint32_t u[16];   // !kPairs: the f32 bits of the (transformed) values
  uint32_t amax_bits;

  __device__ __forceinline__ void prepare(const Group<T>& in, const Signs& sgn) {
    if constexpr (kPairs) {
      q::split_bf16x8(in.w, a, signs[0]);
      q::split_bf16x8(in.w + 4, a + 4, signs[1]);
      amax_bits = q::amax_bits_pairs(a);
    } else {
      float v[16];
      in.to_float(v);
      if (kRht) q::hadamard16_group(v, sgn.s, false);
#pragma unroll
      for (int k = 0; k < 16; ++k) u[k] = __float_as_uint(v[k]);
      amax_bits = q::amax_bits_f32(u);
    }
  }

  // Whether the block of scale code sc takes the generic path.
  static __device__ __forceinline__ bool generic(const q::FastScale* table, uint32_t sc) {
    return sc > 0x7Fu || table[sc].flags == q::kFlagGeneric;
  }

  // The generic path: stores the group's values (at element yi of y) and codes (of the group
  // whose index in its tensor is i).
  __device__ __forceinline__ void generic_store(const Group<T>& in, uint32_t amax_b, float sg, uint64_t key, size_t yi,
                                                size_t i, uint64_t index, const Nvfp4Args& args) const {
    float v[16];
    if constexpr (kPairs) {
      in.to_float(v);
    } else {
#pragma unroll
      for (int k = 0; k < 16; ++k) v[k] = __uint_as_float(u[k]);
    }
    generic_group_store<T>(v, amax_b, sg, kSr, key, yi, i, index, args.y, args.codes);
  }

  // Codes and output words of a fast or dead block (generic() false) of scale code sc.
  __device__ __forceinline__ void quantize(const Group<T>& in, const q::FastScale* table, uint32_t sc, uint64_t key,
                                           size_t index0, uint32_t codes[2], uint32_t y[kOutWords<T>]) const {
    const q::FastScale& e = table[sc];
    if constexpr (kPairs) q::group_rne_pairs(in.w, a, signs, e, codes, y);
    else if constexpr (kSr && kV1) q::group_sr_v1<kBf16>(u, e, key, index0, codes, y);
    else if constexpr (kSr) q::group_sr<kBf16>(u, e, key, index0, codes, y);
    else q::group_rne_f32<kBf16>(u, e, codes, y);
  }
};

// The scale table of this thread block: row sc for every E4M3 scale code.
template <typename T, bool kRht, bool kSr>
__device__ __forceinline__ void build_table(q::FastScale* table, float sg) {
  using G = GroupQdq<T, kRht, kSr>;
  if (threadIdx.x < 128) table[threadIdx.x] = q::fast_scale(threadIdx.x, sg, G::kPairs, G::kBf16, !kSr);
}

__device__ __forceinline__ uint64_t sr_key(const Nvfp4Args& a) {
  return a.counter ? q::hash_key(q::step_seed(a.seed, *a.counter)) : a.key;
}

// Resident thread blocks per SM to ask of ptxas (__launch_bounds__; 0: none, ptxas's own
// allocation), where a register cap is worth it: the bf16 round-to-nearest 16x16 and 1x16
// kernels fit 48 registers without spilling in their loops (5 blocks of 256 per SM instead of 4:
// 55 and 59 registers uncapped; 1x16 holds two groups, the one quantized and the next loading).
// A minimum of 1 would let ptxas take more registers than it does by itself.
template <typename T, bool kTile, bool kRht, bool kSr>
constexpr int kMinBlocks = (sizeof(T) == 2 && !kRht && !kSr) ? 5 : 0;

// One 1x16 group g (its index in the launch's chunk; its 16 elements start at element off of x
// and of y): the scale, the codes and the values written.
template <typename T, bool kRht, bool kSr, bool kV1 = false>
__device__ __forceinline__ void qdq_1x16_group(const Group<T>& in, uint32_t g, size_t off, const q::FastScale* table,
                                               float sg, uint64_t key, const Nvfp4Args& a) {
  using G = GroupQdq<T, kRht, kSr, kV1>;
  const size_t i = static_cast<size_t>(g) * 16;
  G r;
  r.prepare(in, a.sgn);
  const uint32_t sc = q::block_code(r.amax_bits, sg);
  if (a.scales) a.scales[g] = static_cast<uint8_t>(sc);
  if (G::generic(table, sc)) {
    r.generic_store(in, r.amax_bits, sg, key, off, i, a.index_base + i, a);
  } else {
    uint32_t codes[2], y[kOutWords<T>];
    r.quantize(in, table, sc, key, a.index_base + i, codes, y);
    if (a.y) store_group<T>(a.y, off, y);
    if (a.codes) __stcs(reinterpret_cast<uint2*>(a.codes + i / 2), make_uint2(codes[0], codes[1]));
  }
}

// The tensor's s_global from the amax in ws[0] (block 0 records it in ws[1]) and this block's
// scale table; the stochastic-rounding key of the launch.
template <typename T, bool kRht, bool kSr>
__device__ __forceinline__ float start_quantize(const Nvfp4Args& a, q::FastScale* table, uint64_t& key) {
  const float sg = q::global_scale(__ldcg(a.ws));
  if (blockIdx.x == 0 && threadIdx.x == 0) a.ws[1] = sg;
  build_table<T, kRht, kSr>(table, sg);
  __syncthreads();
  key = kSr ? sr_key(a) : 0;
  return sg;
}

// 1x16: thread t of the grid takes groups G-1-t, G-1-t-stride, ...: the reverse of the amax
// kernel's order, so that the first groups read here are the last it read (still in L2). Group
// indices are 32-bit (the host splits larger tensors into launches of < 2^32 groups). The next
// group's loads are issued before the current group is quantized (bf16), so a thread's
// quantization overlaps its next DRAM (or L2) round trip (the profile of 2026-12-02-h200-c: 43%
// of the kernel's stalls waited on those loads). kV1: the previous kernel (the load after the
// quantization; group_sr_v1), for the benchmark's old-versus-new measurement.
template <typename T, bool kRht, bool kSr, bool kV1>
__global__ void __launch_bounds__(kThreads, (kMinBlocks<T, false, kRht, kSr>)) nvfp4_1x16_kernel(const Nvfp4Args a) {
  __shared__ q::FastScale table[128];
  const uint32_t groups = a.groups;
  const uint32_t stride = gridDim.x * blockDim.x;  // groups + stride < 2^32: groups < 2^31 per launch
  uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  Group<T> in;
  if (t < groups) in.load(a.x, group_offset(a.layout, groups - 1 - t));  // in flight while the amax completes
  pdl_wait();
  uint64_t key;
  const float sg = start_quantize<T, kRht, kSr>(a, table, key);
  if constexpr (kV1 || sizeof(T) != 2) {  // float32: one group (16 registers) at a time
    while (t < groups) {
      const uint32_t g = groups - 1 - t;
      qdq_1x16_group<T, kRht, kSr, kV1>(in, g, group_offset(a.layout, g), table, sg, key, a);
      t += stride;
      if (t < groups) in.load(a.x, group_offset(a.layout, groups - 1 - t));
    }
  } else {
    // two buffers, the loop unrolled twice so that neither is copied into the other
    Group<T> other;
    while (t < groups) {
      uint32_t g = groups - 1 - t;
      t += stride;
      if (t < groups) other.load(a.x, group_offset(a.layout, groups - 1 - t));
      qdq_1x16_group<T, kRht, kSr>(in, g, group_offset(a.layout, g), table, sg, key, a);
      if (t >= groups) break;
      g = groups - 1 - t;
      t += stride;
      if (t < groups) in.load(a.x, group_offset(a.layout, groups - 1 - t));
      qdq_1x16_group<T, kRht, kSr>(other, g, group_offset(a.layout, g), table, sg, key, a);
    }
  }
}

// ---- NVFP4 1x16 in one read of x (opt-in: px_quant_cuda_set_schedule) ------------------------
//
// The two-kernel path reads x twice: the amax kernel, then the quantize kernel (the per-tensor
// scale must be known before any block is quantized). This kernel reads it once from DRAM: a
// cooperative launch of as many blocks as are resident; each block takes a contiguous run of
// groups (qdq::FusedSplit), keeps the first `hold_cap` of them in shared memory as it reads them
// for the amax, reads the rest with an L2 evict_last policy, and after a grid-wide barrier (the
// amax complete) quantizes the rest again, last read first (from L2, where they fit), then the
// kept ones from shared memory. The same block reads its groups again, so they are found in its
// own L2 partition. Bit for bit the two-kernel path's output: the amax is an order-independent
// max, every group goes through the same qdq_1x16_group. Not the default: it is no faster than
// the two kernels yet (its first pass runs at half the amax kernel's occupancy:
// docs/results/2026-12-02-h200-c/), and a cooperative
// launch waits for the whole GPU, which other streams' kernels (NCCL) may hold.

template <typename T>
__device__ __forceinline__ void keep_group(const Group<T>& in, uint4* held, uint32_t j) {
#pragma unroll
  for (int k = 0; k < Group<T>::kWords; ++k) held[q::held_slot(j, k, Group<T>::kWords, kThreads)] = in.word(k);
}

template <typename T>
__device__ __forceinline__ void recall_group(Group<T>& in, const uint4* held, uint32_t j) {
#pragma unroll
  for (int k = 0; k < Group<T>::kWords; ++k) in.set_word(k, held[q::held_slot(j, k, Group<T>::kWords, kThreads)]);
}

template <typename T, bool kRht, bool kSr>
__global__ void __launch_bounds__(kThreads) nvfp4_1x16_fused_kernel(const Nvfp4Args a, uint32_t hold_cap) {
  extern __shared__ uint4 held[];
  __shared__ q::FastScale table[128];
  const uint32_t t = threadIdx.x;
  const q::FusedSplit s = q::FusedSplit::of(a.groups, gridDim.x, blockIdx.x, hold_cap);
  const uint64_t pol = evict_last_policy();
  AmaxAcc<T, kRht> acc;
#pragma unroll 4
  for (uint32_t j = t; j < s.hold; j += kThreads) {
    Group<T> in;
    in.load(a.x, group_offset(a.layout, s.begin + j));
    keep_group(in, held, j);
    acc.add(in, a.sgn);
  }
#pragma unroll 4
  for (uint32_t j = s.hold + t; j < s.size(); j += kThreads) {
    Group<T> in;
    in.template load<kLast>(a.x, group_offset(a.layout, s.begin + j), pol);
    acc.add(in, a.sgn);
  }
  block_max_into(__reduce_max_sync(kFull, acc.bits()), a.ws);
  // the second pass over the groups not kept, last first, with the next group's load in flight
  // while one is quantized (the first issued before the barrier: x does not depend on the amax)
  uint32_t m = s.visits(s.hold, t, kThreads);
  const uint32_t first = s.begin + s.hold + t;
  Group<T> in;
  if (m > 0) in.load(a.x, group_offset(a.layout, first + (m - 1) * kThreads));
  cooperative_groups::this_grid().sync();
  uint64_t key;
  const float sg = start_quantize<T, kRht, kSr>(a, table, key);
  while (m-- > 0) {
    const uint32_t g = first + m * kThreads;
    Group<T> next;
    if (m > 0) next.load(a.x, group_offset(a.layout, g - kThreads));
    qdq_1x16_group<T, kRht, kSr>(in, g, group_offset(a.layout, g), table, sg, key, a);
    in = next;
  }
  for (uint32_t j = t; j < s.hold; j += kThreads) {
    Group<T> in;
    recall_group(in, held, j);
    const uint32_t g = s.begin + j;
    qdq_1x16_group<T, kRht, kSr>(in, g, group_offset(a.layout, g), table, sg, key, a);
  }
}

// 16x16: a warp takes two neighbouring tiles of a band of 16 rows: lane = 2 * row + tile, so a
// row's two groups are 64 contiguous bytes (bf16); the tile amax is a reduction over the 16
// lanes of one tile. Units (tile pairs) in reverse order, as 1x16; warp-uniform, so the
// shuffles are full-warp (lanes of a missing second tile take part with amax 0).
template <typename T, bool kRht, bool kSr>
__global__ void __launch_bounds__(kThreads, (kMinBlocks<T, true, kRht, kSr>)) nvfp4_16x16_kernel(const Nvfp4Args a) {
  __shared__ q::FastScale table[128];
  using G = GroupQdq<T, kRht, kSr>;
  const int lane = threadIdx.x & 31, row = lane >> 1, side = lane & 1;
  const uint32_t gpr = static_cast<uint32_t>(a.cols / 16), pairs = (gpr + 1) / 2, units = a.groups;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  uint32_t t = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  // unit u = units - 1 - t = band * pairs + pair, kept as (band, pair) and stepped without dividing
  uint32_t band = 0, pair = 0;
  const uint32_t dband = pairs ? warps / pairs : 0, dpair = pairs ? warps % pairs : 0;
  if (t < units) {
    band = (units - 1 - t) / pairs;
    pair = (units - 1 - t) % pairs;
  }
  // the group's index in its tensor (i: codes, SR) and its offset in x and y (off: rows ld apart)
  auto at = [&](uint32_t b, uint32_t p, bool& live, size_t& off) {
    const uint32_t tile = 2 * p + side;
    live = tile < gpr;
    const size_t r = static_cast<size_t>(b) * 16 + row, c = static_cast<size_t>(tile) * 16;
    off = r * a.layout.ld + c;
    return r * a.cols + c;
  };
  bool live = false;
  size_t i = 0, off = 0;
  Group<T> in;
  if (t < units) {
    i = at(band, pair, live, off);
    if (live) in.load(a.x, off);
  }
  pdl_wait();
  uint64_t key;
  const float sg = start_quantize<T, kRht, kSr>(a, table, key);
  const bool want_y = a.y != nullptr, want_codes = a.codes != nullptr, want_scales = a.scales != nullptr && row == 0;
  while (t < units) {
    G r;
    if (live) {
      r.prepare(in, a.sgn);
    } else {
      r.amax_bits = 0;
    }
    uint32_t m = r.amax_bits;
#pragma unroll
    for (int o = 2; o < 32; o <<= 1) m = max(m, __shfl_xor_sync(kFull, m, o));
    const uint32_t sc = q::block_code(m, sg);
    if (live) {
      if (want_scales) a.scales[static_cast<size_t>(band) * gpr + 2 * pair + side] = static_cast<uint8_t>(sc);
      if (G::generic(table, sc)) {
        r.generic_store(in, m, sg, key, off, i, i, a);
      } else {
        uint32_t codes[2], y[kOutWords<T>];
        r.quantize(in, table, sc, key, i, codes, y);
        if (want_y) store_group<T>(a.y, off, y);
        if (want_codes) __stcs(reinterpret_cast<uint2*>(a.codes + i / 2), make_uint2(codes[0], codes[1]));
      }
    }
    t += warps;
    if (t < units) {  // (band, pair) -= (dband, dpair) with a borrow
      if (pair < dpair) {
        pair += pairs - dpair;
        band -= dband + 1;
      } else {
        pair -= dpair;
        band -= dband;
      }
      i = at(band, pair, live, off);
      if (live) in.load(a.x, off);
    }
  }
}

// ---- NVFP4 16x1: the 1x16 blocks of xᵀ in x's layout (qdq_columns.h) --------------------------
//
// A thread takes one unit (a band of 16 rows x a pair of neighbouring columns) per iteration;
// consecutive threads take consecutive pairs of a band, so a warp reads and writes 128 (bf16)
// or 256 (float32) contiguous bytes of each of the band's 16 rows. Units in plain order (the
// tensor amax pass before it is the plain amax kernel without the transform, this one's twin
// below with it).

// Unit u as (row0, col) of its band and column pair: pairs = cols / 2 units a band; a 32-bit
// division without dividing where the units are fewer than 2^31 (every tensor in practice).
struct UnitGrid {
  size_t pairs, units;
  q::FastDiv per_band;
  __device__ __forceinline__ void at(size_t u, size_t& row0, size_t& col) const {
    const size_t band = units < (size_t{1} << 31) ? per_band.div(static_cast<uint32_t>(u)) : u / pairs;
    row0 = band * 16;
    col = (u - band * pairs) * 2;
  }
};

UnitGrid unit_grid(size_t rows, size_t cols) {
  const size_t pairs = cols / 2;
  return UnitGrid{pairs, rows / 16 * pairs, q::FastDiv::of(pairs && pairs < (size_t{1} << 31) ? static_cast<uint32_t>(pairs) : 1u)};
}

template <typename T, bool kRht>
__global__ void __launch_bounds__(kThreads) amax_16x1_kernel(const void* __restrict__ x, const UnitGrid grid, size_t ld,
                                                            const Signs sgn, float* __restrict__ ws) {
  pdl_launch_dependents();
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  int32_t key = 0;
  for (size_t u = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < grid.units; u += stride) {
    size_t row0, col;
    grid.at(u, row0, col);
    key = q::unit_amax_key<sizeof(T) == 2, kRht>(x, ld, row0, col, sgn.s, key);
  }
  block_max_into(__reduce_max_sync(kFull, q::amax_of_key(key)), ws);
}

// bf16: at most 64 registers (4 blocks of 256 per SM; the transform's variants take 70 uncapped).
template <typename T, bool kRht, bool kSr, bool kV1>
__global__ void __launch_bounds__(kThreads, (sizeof(T) == 2 ? 4 : 0)) nvfp4_16x1_kernel(const Nvfp4Args a,
                                                                                     const UnitGrid grid) {
  __shared__ q::FastScale table[128];
  pdl_wait();
  const float sg = q::global_scale(__ldcg(a.ws));
  if (blockIdx.x == 0 && threadIdx.x == 0) a.ws[1] = sg;
  if (threadIdx.x < 128) table[threadIdx.x] = q::fast_scale(threadIdx.x, sg, false, sizeof(T) == 2, !kSr);
  __syncthreads();
  const uint64_t key = kSr ? sr_key(a) : 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t u = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < grid.units; u += stride) {
    size_t row0, col;
    grid.at(u, row0, col);
    q::unit_qdq<sizeof(T) == 2, kRht, kSr, kV1>(a.x, a.y, a.rows, a.layout.ld, row0, col, a.sgn.s, table, sg, key);
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

// ---- MX quantize-dequantize (qdq_mx.h) ---------------------------------------------------------
//
// A thread per block of 32 (four 8-element loads), grid-stride; the per-block arithmetic is
// qdq_mx.h's mx_block, which the host test checks against the CPU reference. Emulation speed, not
// tuned: the recipes' cost, labelled as emulation.

template <typename T>
__global__ void __launch_bounds__(kThreads) mx_kernel(const void* __restrict__ x, void* __restrict__ y,
                                                     uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                                                     size_t blocks, int elem, int rule, bool sr, uint64_t seed,
                                                     const uint32_t* __restrict__ seed_counter) {
  const q::MxSpec m = q::mx_spec(elem);
  const uint64_t key = q::hash_key(seed_counter ? q::step_seed(seed, *seed_counter) : seed);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t b = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    float v[q::kMxBlock], out[q::kMxBlock];
    uint8_t c[q::kMxBlock];
#pragma unroll
    for (int k = 0; k < 4; ++k) Io<T>::load(x, b * q::kMxBlock + 8 * k, v + 8 * k);
    const uint8_t sc = q::mx_block(v, q::kMxBlock, m, rule, sr, key, b * q::kMxBlock, c, out);
    if (scales) scales[b] = sc;
    if (codes) {
      uint32_t w[8];
#pragma unroll
      for (int k = 0; k < 8; ++k)
        w[k] = c[4 * k] | (c[4 * k + 1] << 8) | (c[4 * k + 2] << 16) | (static_cast<uint32_t>(c[4 * k + 3]) << 24);
      uint4* p = reinterpret_cast<uint4*>(codes + b * q::kMxBlock);
      __stcs(p, make_uint4(w[0], w[1], w[2], w[3]));
      __stcs(p + 1, make_uint4(w[4], w[5], w[6], w[7]));
    }
    if (y) {
#pragma unroll
      for (int k = 0; k < 4; ++k) Io<T>::store(y, b * q::kMxBlock + 8 * k, out + 8 * k);
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

Signs signs_of(uint64_t seed) {
  Signs s;
  const uint64_t key = q::hash_key(seed);
  for (int j = 0; j < 16; ++j) s.s[j] = q::hadamard_sign(key, j);
  return s;
}

int check_common(const void* x, int dtype, const void* y, const void* codes, size_t n) {
  if (!x && n > 0) return fail(kPxQuantErrArg, "x is NULL");
  if (dtype != kPxQuantF32 && dtype != kPxQuantBF16)
    return fail(kPxQuantErrArg, "dtype must be 0 (float32) or 1 (bfloat16), got " + std::to_string(dtype));
  if (!aligned16(x) || (y && !aligned16(y)) || (codes && !aligned16(codes)))
    return fail(kPxQuantErrAlign, "x, y and codes must be 16-byte aligned");
  return kPxQuantOk;
}

// Blocks for a persistent launch of kernel K over `threads` threads of work: no more than are
// resident at once (occupancy, read once per kernel and device), so that a thread block builds
// its scale table once and then loops.
template <auto K>
int persistent_grid(size_t threads) {
  static std::atomic<int> cache[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0;
  int per_sm = cache[dev].load(std::memory_order_relaxed);
  if (per_sm == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, K, kThreads, 0) != cudaSuccess || per_sm <= 0) per_sm = 1;
    cache[dev].store(per_sm, std::memory_order_relaxed);
  }
  const size_t want = (threads + kThreads - 1) / kThreads;
  const size_t cap = static_cast<size_t>(sm_count()) * static_cast<size_t>(per_sm);
  return static_cast<int>(want < cap ? (want == 0 ? 1 : want) : cap);
}

// Whether the quantize kernel is launched as a programmatic dependent of the amax kernel (its
// launch and first loads overlap the amax kernel's tail). PARALLAX_QUANT_PDL=0 turns it off.
bool use_pdl() {
  static const bool on = [] {
    const char* v = std::getenv("PARALLAX_QUANT_PDL");
    return !(v && v[0] == '0');
  }();
  return on;
}

// Launches kernel k (kThreads a block) with one launch attribute; the runtime's answer.
template <typename K, typename... Args>
cudaError_t launch_with(cudaLaunchAttribute attr, K k, unsigned grid, size_t smem, cudaStream_t st,
                        const Args&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, k, args...);
}

// Launches kernel k over grid with args; with programmatic stream serialization when
// use_pdl(), falling back to a plain launch if the runtime refuses the attribute.
template <typename K, typename... Args>
void launch_dependent(K k, int grid, cudaStream_t st, const Args&... args) {
  if (use_pdl()) {
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    if (launch_with(attr, k, static_cast<unsigned>(grid), 0, st, args...) == cudaSuccess) return;
    (void)cudaGetLastError();  // not sticky: a launch-configuration error
  }
  k<<<grid, kThreads, 0, st>>>(args...);
}

// ---- the 1x16 schedule: one read (cooperative) or two kernels ----------------------------------

std::atomic<int> g_fused{-1};  // -1: the environment's (PARALLAX_QUANT_FUSED=1: on), read at the next call
std::atomic<int> g_hold{1};
thread_local int g_last_schedule = -1;

bool use_fused() {
  int f = g_fused.load(std::memory_order_relaxed);
  if (f < 0) {
    const char* v = std::getenv("PARALLAX_QUANT_FUSED");
    f = (v && v[0] == '1') ? 1 : 0;
    int expected = -1;
    g_fused.compare_exchange_strong(expected, f);
    f = g_fused.load(std::memory_order_relaxed);
  }
  return f != 0;
}

// How the single-read kernel K runs on this device: resident blocks (0: it cannot, the device
// has no cooperative launch) and the groups each may keep in shared memory (a multiple of one
// pass of its threads), from the shared memory an SM has beside K's own, split evenly among the
// blocks that its registers let reside. Measured once per device and kernel.
struct FusedLaunch {
  int blocks = 0;
  uint32_t hold_cap = 0;
};

template <auto K>
FusedLaunch measure_fused(size_t group_bytes) {
  FusedLaunch f;
  int dev = 0, coop = 0, per_sm = 0, smem_sm = 0, optin = 0, reserved = 0;
  cudaFuncAttributes fa{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess ||
      !coop || cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, K, kThreads, 0) != cudaSuccess || per_sm <= 0 ||
      cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
      cudaFuncGetAttributes(&fa, K) != cudaSuccess) {
    (void)cudaGetLastError();
    return f;
  }
  const size_t pass = group_bytes * kThreads, own = fa.sharedSizeBytes + static_cast<size_t>(reserved);
  size_t share = static_cast<size_t>(smem_sm) / static_cast<size_t>(per_sm);
  share = share > own ? share - own : 0;
  const size_t cap = static_cast<size_t>(optin) > fa.sharedSizeBytes ? optin - fa.sharedSizeBytes : 0;
  size_t smem = (share < cap ? share : cap) / pass * pass;
  if (smem > 0 && (cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess ||
                   cudaFuncSetAttribute(K, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared) !=
                       cudaSuccess)) {
    (void)cudaGetLastError();
    smem = 0;
  }
  int with_smem = 0;  // the blocks that still reside with it (else keep none)
  if (smem > 0 && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&with_smem, K, kThreads, smem) != cudaSuccess ||
                   with_smem < per_sm)) {
    (void)cudaGetLastError();
    smem = 0;
  }
  f.blocks = per_sm * sm_count();
  f.hold_cap = static_cast<uint32_t>(smem / group_bytes);
  return f;
}

template <auto K>
const FusedLaunch& fused_launch(size_t group_bytes) {
  static FusedLaunch cache[64];
  static std::atomic<bool> ready[64];
  static std::mutex measuring;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) dev = 0;
  if (!ready[dev].load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(measuring);
    if (!ready[dev].load(std::memory_order_relaxed)) {
      cache[dev] = measure_fused<K>(group_bytes);
      ready[dev].store(true, std::memory_order_release);
    }
  }
  return cache[dev];
}

// The single-read 1x16 kernel as a cooperative launch; false (nothing queued) where it cannot run.
template <typename T, bool kRht, bool kSr>
bool launch_fused_1x16(const Nvfp4Args& a, cudaStream_t st) {
  constexpr auto k = nvfp4_1x16_fused_kernel<T, kRht, kSr>;
  constexpr size_t group_bytes = sizeof(Group<T>);
  const FusedLaunch& f = fused_launch<k>(group_bytes);
  if (f.blocks == 0) return false;
  const uint32_t passes = (a.groups + kThreads - 1) / kThreads;  // no block without a group
  const uint32_t blocks = passes < static_cast<uint32_t>(f.blocks) ? (passes ? passes : 1) : f.blocks;
  const uint32_t hold = g_hold.load(std::memory_order_relaxed) ? f.hold_cap : 0;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  if (launch_with(attr, k, blocks, hold * group_bytes, st, a, hold) == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

// The previous kernels for bf16 inputs (px_quant_cuda_set_legacy): the benchmark's old side.
// -1 until the first call: then the environment's (PARALLAX_QUANT_LEGACY=1: on), so that a whole
// training run (both frameworks call these entry points) can be timed with the old kernels.
std::atomic<int> g_legacy{-1};

template <typename T>
bool use_legacy() {
  if (sizeof(T) != 2) return false;
  int v = g_legacy.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("PARALLAX_QUANT_LEGACY");
    int expected = -1;
    g_legacy.compare_exchange_strong(expected, (e && e[0] == '1') ? 1 : 0);
    v = g_legacy.load(std::memory_order_relaxed);
  }
  return v != 0;
}

template <typename T, bool kRht>
void launch_amax(const void* x, size_t groups, const q::GroupLayout& layout, const Signs& s, float* ws,
                 cudaStream_t st) {
  if constexpr (sizeof(T) == 2 && !kRht) {
    if (use_legacy<T>()) {
      constexpr auto k = amax_kernel<T, kRht, true>;
      return k<<<persistent_grid<k>(groups), kThreads, 0, st>>>(x, groups, layout, s, ws);
    }
  }
  constexpr auto k = amax_kernel<T, kRht>;
  k<<<persistent_grid<k>(groups), kThreads, 0, st>>>(x, groups, layout, s, ws);
}

// The 1x16 quantize kernel K in chunks of < 2^31 groups (one, but for tensors of more than 2^35
// elements; dense).
template <typename T, auto K>
void launch_1x16_chunks(const Nvfp4Args& a, cudaStream_t st) {
  constexpr size_t kChunk = size_t{1} << 31;
  const size_t groups = a.rows * (a.cols / 16), esize = sizeof(T);
  size_t g0 = 0;
  do {  // an empty tensor too: its launch writes ws[1]
    Nvfp4Args c = a;
    const size_t n = groups - g0 < kChunk ? groups - g0 : kChunk;
    c.groups = static_cast<uint32_t>(n);
    c.index_base = g0 * 16;
    c.x = static_cast<const char*>(a.x) + g0 * 16 * esize;
    if (a.y) c.y = static_cast<char*>(a.y) + g0 * 16 * esize;
    if (a.codes) c.codes = a.codes + g0 * 8;
    if (a.scales) c.scales = a.scales + g0;
    if (g0 == 0) launch_dependent(K, persistent_grid<K>(n), st, c);
    else K<<<persistent_grid<K>(n), kThreads, 0, st>>>(c);
    g0 += n;
  } while (g0 < groups);
}

template <typename T, bool kTile, bool kRht, bool kSr>
void launch_nvfp4_as(const Nvfp4Args& a, cudaStream_t st) {
  if constexpr (kTile) {
    constexpr auto k = nvfp4_16x16_kernel<T, kRht, kSr>;
    const size_t units = (a.rows / 16) * ((a.cols / 16 + 1) / 2);  // tile pairs, < 2^32 (2^41 elements)
    Nvfp4Args c = a;
    c.groups = static_cast<uint32_t>(units);
    launch_dependent(k, persistent_grid<k>(units * 32), st, c);
  } else {
    if constexpr (sizeof(T) == 2) {
      if (use_legacy<T>()) return launch_1x16_chunks<T, nvfp4_1x16_kernel<T, kRht, kSr, true>>(a, st);
    }
    launch_1x16_chunks<T, nvfp4_1x16_kernel<T, kRht, kSr, false>>(a, st);
  }
}

template <typename T>
void launch_nvfp4(const Nvfp4Args& a, bool tile, bool rht, bool sr, cudaStream_t s) {
  const int v = (tile ? 4 : 0) | (rht ? 2 : 0) | (sr ? 1 : 0);
  switch (v) {
    case 0: launch_nvfp4_as<T, false, false, false>(a, s); break;
    case 1: launch_nvfp4_as<T, false, false, true>(a, s); break;
    case 2: launch_nvfp4_as<T, false, true, false>(a, s); break;
    case 3: launch_nvfp4_as<T, false, true, true>(a, s); break;
    case 4: launch_nvfp4_as<T, true, false, false>(a, s); break;
    case 5: launch_nvfp4_as<T, true, false, true>(a, s); break;
    case 6: launch_nvfp4_as<T, true, true, false>(a, s); break;
    default: launch_nvfp4_as<T, true, true, true>(a, s); break;
  }
}

template <typename T>
bool launch_fused(const Nvfp4Args& a, bool rht, bool sr, cudaStream_t s) {
  const int v = (rht ? 2 : 0) | (sr ? 1 : 0);
  switch (v) {
    case 0: return launch_fused_1x16<T, false, false>(a, s);
    case 1: return launch_fused_1x16<T, false, true>(a, s);
    case 2: return launch_fused_1x16<T, true, false>(a, s);
    default: return launch_fused_1x16<T, true, true>(a, s);
  }
}

// 1x16 or 16x16 of one tensor (dense, or a column part of a wider one: layout.ld > cols): the
// single-read kernel for 1x16 where that schedule is asked for and can run, else the amax kernel
// and the quantize kernel.
template <typename T>
void launch_rows(const Nvfp4Args& a, bool tile, bool rht, bool sr, cudaStream_t s) {
  const size_t groups = a.rows * (a.cols / 16);
  if (!tile && groups < (size_t{1} << 31) && use_fused()) {
    Nvfp4Args c = a;
    c.groups = static_cast<uint32_t>(groups);
    if (launch_fused<T>(c, rht, sr, s)) {
      g_last_schedule = 1;
      return;
    }
  }
  if (!tile) g_last_schedule = 0;
  rht ? launch_amax<T, true>(a.x, groups, a.layout, a.sgn, a.ws, s)
      : launch_amax<T, false>(a.x, groups, a.layout, a.sgn, a.ws, s);
  launch_nvfp4<T>(a, tile, rht, sr, s);
}

template <typename T, bool kRht, bool kSr>
void launch_16x1_as(const Nvfp4Args& a, const UnitGrid& g, cudaStream_t st) {
  if constexpr (sizeof(T) == 2) {
    if (use_legacy<T>()) {
      constexpr auto k = nvfp4_16x1_kernel<T, kRht, kSr, true>;
      return launch_dependent(k, persistent_grid<k>(g.units), st, a, g);
    }
  }
  constexpr auto k = nvfp4_16x1_kernel<T, kRht, kSr, false>;
  launch_dependent(k, persistent_grid<k>(g.units), st, a, g);
}

template <typename T, bool kRht>
void launch_amax_16x1(const Nvfp4Args& a, const UnitGrid& g, cudaStream_t st) {
  constexpr auto k = amax_16x1_kernel<T, kRht>;
  k<<<persistent_grid<k>(g.units), kThreads, 0, st>>>(a.x, g, a.layout.ld, a.sgn, a.ws);
}

// 16x1: the amax (the plain kernel where the layout allows, the tensor's amax not depending on
// it), then the quantize kernel.
template <typename T>
void launch_16x1(const Nvfp4Args& a, bool rht, bool sr, cudaStream_t s) {
  const UnitGrid g = unit_grid(a.rows, a.cols);
  if (rht) {
    launch_amax_16x1<T, true>(a, g, s);
    sr ? launch_16x1_as<T, true, true>(a, g, s) : launch_16x1_as<T, true, false>(a, g, s);
    return;
  }
  if (a.layout.dense) launch_amax<T, false>(a.x, a.rows * a.cols / 16, a.layout, a.sgn, a.ws, s);
  else launch_amax_16x1<T, false>(a, g, s);
  sr ? launch_16x1_as<T, false, true>(a, g, s) : launch_16x1_as<T, false, false>(a, g, s);
}

// The shape checks of one tensor (or column part) of width cols; kPxQuantOk or the error.
int check_nvfp4_shape(const Nvfp4Args& a, int mode) {
  if (mode < 0 || mode > 2)
    return fail(kPxQuantErrArg, "nvfp4: mode must be 0 (1x16), 1 (16x16) or 2 (16x1), got " + std::to_string(mode));
  if (mode == 2) {
    if (a.codes || a.scales)
      return fail(kPxQuantErrArg, "nvfp4 16x1: gives the dequantized values only (codes and scales must be NULL)");
    if (!a.y && a.rows * a.cols > 0) return fail(kPxQuantErrArg, "nvfp4 16x1: y is NULL");
    if (a.rows % 16 != 0)
      return fail(kPxQuantErrShape, "nvfp4 16x1: rows (" + std::to_string(a.rows) + ") must be a multiple of 16");
    if (a.cols % 2 != 0) return fail(kPxQuantErrShape, "nvfp4 16x1: cols (" + std::to_string(a.cols) + ") must be even");
    return kPxQuantOk;
  }
  if (a.cols % 16 != 0) return fail(kPxQuantErrShape, "nvfp4: cols (" + std::to_string(a.cols) + ") must be a multiple of 16");
  if (mode == 1 && a.rows % 16 != 0)
    return fail(kPxQuantErrShape, "nvfp4: rows (" + std::to_string(a.rows) + ") must be a multiple of 16 for 16x16 blocks");
  return kPxQuantOk;
}

// One tensor or column part (its rows ld elements apart), checked: its workspace zeroed, then its
// kernels queued.
int nvfp4_one(Nvfp4Args a, size_t ld, int dtype, int mode, bool rht, bool sr, cudaStream_t s) {
  if (int st = check_nvfp4_shape(a, mode)) return st;
  a.layout = q::GroupLayout::of(a.cols, ld);
  if (int st = cuda_status(cudaMemsetAsync(a.ws, 0, 2 * sizeof(float), s), "cudaMemsetAsync")) return st;
  const bool bf16 = dtype == kPxQuantBF16;
  if (mode == 2) bf16 ? launch_16x1<uint16_t>(a, rht, sr, s) : launch_16x1<float>(a, rht, sr, s);
  else bf16 ? launch_rows<uint16_t>(a, mode == 1, rht, sr, s) : launch_rows<float>(a, mode == 1, rht, sr, s);
  return cuda_status(cudaGetLastError(), "nvfp4 kernel launch");
}

}  // namespace

extern "C" {

int px_nvfp4_qdq_cuda(const void* x, int dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                      size_t rows, size_t cols, int mode, int stochastic, uint64_t seed, int rht,
                      uint64_t rht_seed, CUstream_st* stream) {
  return px_nvfp4_qdq_counter_cuda(x, dtype, y, codes, scales, scale_ws, rows, cols, mode, stochastic, seed,
                                   nullptr, rht, rht_seed, stream);
}

int px_nvfp4_qdq_counter_cuda(const void* x, int dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                              size_t rows, size_t cols, int mode, int stochastic, uint64_t seed,
                              const uint32_t* seed_counter, int rht, uint64_t rht_seed, CUstream_st* stream) {
  g_error.clear();
  if (int st = check_common(x, dtype, y, codes, rows * cols)) return st;
  if (!scale_ws) return fail(kPxQuantErrArg, "scale_ws (device float[2]) is required");
  const Signs sg = rht ? signs_of(rht_seed) : Signs{};
  const Nvfp4Args a{x, y, codes, scales, scale_ws, rows, cols, 0, 0, q::hash_key(seed), seed, seed_counter, sg};
  return nvfp4_one(a, cols, dtype, mode, rht != 0, stochastic != 0, reinterpret_cast<cudaStream_t>(stream));
}

int px_nvfp4_qdq_parts_cuda(const void* x, int dtype, void* y, float* scale_ws, size_t rows, size_t cols, size_t parts,
                            int mode, int stochastic, const uint64_t* seeds, const uint32_t* seed_counter, int rht,
                            uint64_t rht_seed, CUstream_st* stream) {
  g_error.clear();
  if (int st = check_common(x, dtype, y, nullptr, rows * cols)) return st;
  if (!scale_ws) return fail(kPxQuantErrArg, "scale_ws (device float[2 * parts]) is required");
  if (!y && rows * cols > 0) return fail(kPxQuantErrArg, "nvfp4 parts: y is NULL");
  if (parts == 0 || !seeds) return fail(kPxQuantErrArg, "nvfp4 parts: parts must be >= 1, with one seed each");
  if (cols % parts != 0)
    return fail(kPxQuantErrShape, "nvfp4 parts: cols (" + std::to_string(cols) + ") must split into " +
                                      std::to_string(parts) + " equal parts");
  const size_t w = cols / parts, esize = dtype == kPxQuantBF16 ? 2 : 4;
  if ((w * esize) % 16 != 0)
    return fail(kPxQuantErrAlign, "nvfp4 parts: a part's row (" + std::to_string(w) + " elements) must be a multiple of 16 bytes");
  if (parts > 1 && mode != 2 && rows * (w / 16) >= (size_t{1} << 31))
    return fail(kPxQuantErrShape, "nvfp4 parts: a part of more than 2^31 groups of 16 (split it by rows)");
  const Signs sg = rht ? signs_of(rht_seed) : Signs{};
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  for (size_t p = 0; p < parts; ++p) {
    Nvfp4Args a{static_cast<const char*>(x) + p * w * esize, y ? static_cast<char*>(y) + p * w * esize : nullptr,
                nullptr, nullptr, scale_ws + 2 * p, rows, w, 0, 0, q::hash_key(seeds[p]), seeds[p], seed_counter, sg};
    if (int st = nvfp4_one(a, cols, dtype, mode, rht != 0, stochastic != 0, s)) return st;
  }
  return kPxQuantOk;
}

int px_quant_cuda_set_schedule(int fused, int hold) {
  g_fused.store(fused < 0 ? -1 : (fused ? 1 : 0), std::memory_order_relaxed);
  g_hold.store(hold < 0 ? 1 : (hold ? 1 : 0), std::memory_order_relaxed);
  return kPxQuantOk;
}

int px_quant_cuda_last_schedule(void) { return g_last_schedule; }

int px_quant_cuda_set_legacy(int on) {
  g_legacy.store(on ? 1 : 0, std::memory_order_relaxed);
  return kPxQuantOk;
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

int px_mx_qdq_cuda(const void* x, int dtype, void* y, uint8_t* codes, uint8_t* scales, size_t rows, size_t cols,
                   int elem, int rule, int stochastic, uint64_t seed, const uint32_t* seed_counter,
                   CUstream_st* stream) {
  g_error.clear();
  if (int st = check_common(x, dtype, y, codes, rows * cols)) return st;
  if (elem < 0 || elem > 2)
    return fail(kPxQuantErrArg, "mx: elem must be 0 (e4m3), 1 (e5m2) or 2 (e2m1), got " + std::to_string(elem));
  if (rule != 0 && rule != 1) return fail(kPxQuantErrArg, "mx: rule must be 0 (floor) or 1 (rceil), got " + std::to_string(rule));
  if (cols % q::kMxBlock != 0)
    return fail(kPxQuantErrShape, "mx: cols (" + std::to_string(cols) + ") must be a multiple of 32");
  const size_t blocks = rows * cols / q::kMxBlock;
  if (blocks == 0) return kPxQuantOk;
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  const int g = grid_for((blocks + 31) / 32);
  if (dtype == kPxQuantBF16)
    mx_kernel<uint16_t><<<g, kThreads, 0, s>>>(x, y, codes, scales, blocks, elem, rule, stochastic != 0, seed, seed_counter);
  else
    mx_kernel<float><<<g, kThreads, 0, s>>>(x, y, codes, scales, blocks, elem, rule, stochastic != 0, seed, seed_counter);
  return cuda_status(cudaGetLastError(), "mx kernel launch");
}

const char* px_quant_cuda_error_message(void) { return g_error.c_str(); }

}  // extern "C"
