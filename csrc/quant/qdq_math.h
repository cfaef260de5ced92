#pragma once
// The per-element and per-block arithmetic of the CUDA quantization kernels (quant_cuda.cu),
// written once for host and device. On the host it is plain C++ (compiled with
// -ffp-contract=off) and csrc/tests/quant_qdq_math_test.cpp checks it against the CPU
// reference (minifloat.h, nvfp4.h) bit for bit; on the device every float operation is an
// explicit round-to-nearest intrinsic (__fmul_rn, __fdiv_rn, __fsub_rn, __fadd_rn), so nvcc
// cannot contract or approximate it either. What the GPU runs is therefore the code the CPU
// test has checked; only the kernels' indexing is left to the GPU test (quant_cuda_test.cu).
//
// Rounding to a minifloat is integer arithmetic on the float's bits (round_magnitude), the
// exact counterpart of the reference's double-precision frexp/nearbyint.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PX_HD __host__ __device__ __forceinline__
#define PX_HD_NOINLINE __host__ __device__ __noinline__
#define PX_UNROLL _Pragma("unroll")
#else
#define PX_HD inline
#define PX_HD_NOINLINE inline
#define PX_UNROLL
#endif

namespace parallax::quant::qdq {

PX_HD uint32_t f2u(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

PX_HD float u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// IEEE round-to-nearest float operations, never contracted into an FMA.
PX_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PX_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
PX_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
PX_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Classification and magnitude on the bits (no library calls whose device versions differ).
PX_HD bool is_nan(float x) { return (f2u(x) & 0x7FFFFFFFu) > 0x7F800000u; }
PX_HD bool is_finite(float x) { return (f2u(x) & 0x7F800000u) != 0x7F800000u; }
PX_HD float abs_(float x) { return u2f(f2u(x) & 0x7FFFFFFFu); }
// max of two non-negative, non-NaN floats (the bit patterns order like the values).
PX_HD float max_nonneg(float a, float b) { return f2u(a) >= f2u(b) ? a : b; }

// The NaN every kernel writes (the reference's NAN: positive quiet NaN, no payload), and the
// sign-carrying one the FP8 decode gives (-NAN for a code with the sign bit).
constexpr uint32_t kNanBits = 0x7FC00000u;

// bfloat16 <-> float. The float -> bf16 rounding is torch's and CUDA's __float2bfloat16_rn
// (round to nearest even, overflow to inf); NaN -> 0x7FC0.
PX_HD float bf16_to_f32(uint16_t h) { return u2f(static_cast<uint32_t>(h) << 16); }
PX_HD uint16_t f32_to_bf16(float x) {
  const uint32_t u = f2u(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// A sign-magnitude minifloat (minifloat.cpp's Spec).
struct Spec {
  int mbits, bias;
  uint32_t max_finite, overflow;
  bool has_inf;
};
// Functions, not namespace-scope objects: device code may not odr-use a host constexpr object.
PX_HD constexpr Spec e2m1_spec() { return {1, 1, 0x7, 0x7, false}; }
PX_HD constexpr Spec e4m3_spec() { return {3, 7, 0x7E, 0x7F, false}; }
PX_HD constexpr Spec e5m2_spec() { return {2, 15, 0x7B, 0x7C, true}; }

// Magnitude code of round-to-nearest-even(m), m finite and >= 0, possibly above max_finite.
// m = sig * 2^(e - 150) with sig < 2^24; the quantum of its binade in the format is
// 2^(max(ue, emin) - mbits) with ue = e - 127 the unbiased exponent and emin = 1 - bias.
PX_HD uint32_t round_magnitude(float m, int mbits, int bias) {
  const uint32_t u = f2u(m);
  if (u == 0) return 0;
  const int be = static_cast<int>(u >> 23);  // biased exponent, 0 for float subnormals
  const uint32_t sig = be == 0 ? (u & 0x7FFFFFu) : ((u & 0x7FFFFFu) | 0x800000u);
  const int e = be == 0 ? 1 : be;
  const int emin = 1 - bias;
  int ue = e - 127;
  if (ue < emin) ue = emin;
  // m / quantum = sig * 2^(e - 150 - (ue - mbits)) = sig >> sh, sh >= 23 - mbits > 0.
  const int sh = (ue - mbits) - (e - 150);
  uint32_t q = 0;
  if (sh < 25) {  // sh >= 25: sig / 2^sh < 1/2, rounds to 0
    q = sig >> sh;
    const uint32_t rem = sig & ((1u << sh) - 1u), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
  }
  return (static_cast<uint32_t>(ue - emin) << mbits) + q;
}

PX_HD float decode_magnitude(uint32_t mag, int mbits, int bias) {
  const uint32_t e = mag >> mbits, f = mag & ((1u << mbits) - 1u);
  if (e == 0)  // f * 2^(1 - bias - mbits): an exact product by a power of two
    return mul(static_cast<float>(f), u2f(static_cast<uint32_t>(127 + 1 - bias - mbits) << 23));
  return u2f((static_cast<uint32_t>(static_cast<int>(e) - bias + 127) << 23) | (f << (23 - mbits)));
}

// FP8 encode/decode (minifloat.cpp's encode_fp8/decode_fp8).
PX_HD uint8_t fp8_encode(float x, Spec s, bool saturate) {
  const uint8_t sign = (f2u(x) >> 31) ? 0x80 : 0x00;
  if (is_nan(x)) return sign | 0x7F;
  const uint32_t limit = saturate ? s.max_finite : s.overflow;
  if (!is_finite(x)) return static_cast<uint8_t>(sign | limit);
  uint32_t mag = round_magnitude(abs_(x), s.mbits, s.bias);
  if (mag > s.max_finite) mag = limit;
  return static_cast<uint8_t>(sign | mag);
}

PX_HD float fp8_decode(uint8_t code, Spec s) {
  const uint32_t mag = code & 0x7Fu, sign = static_cast<uint32_t>(code & 0x80) << 24;
  if (mag > s.max_finite) return u2f(sign | ((s.has_inf && mag == s.overflow) ? 0x7F800000u : kNanBits));
  return u2f(sign | f2u(decode_magnitude(mag, s.mbits, s.bias)));
}

PX_HD uint8_t e4m3_encode(float x) { return fp8_encode(x, e4m3_spec(), true); }
PX_HD float e4m3_decode(uint8_t c) { return fp8_decode(c, e4m3_spec()); }

// E2M1: NaN -> 0x7, ±inf and |x| > 6 -> ±6.
PX_HD uint8_t e2m1_encode(float x) {
  if (is_nan(x)) return 0x7;
  const uint8_t sign = (f2u(x) >> 31) ? 0x8 : 0x0;
  if (!is_finite(x)) return sign | 0x7;
  uint32_t mag = round_magnitude(abs_(x), 1, 1);
  if (mag > 7) mag = 7;
  return static_cast<uint8_t>(sign | mag);
}

PX_HD float e2m1_magnitude(uint32_t mag) { return decode_magnitude(mag & 7u, 1, 1); }
PX_HD float e2m1_decode(uint8_t code) {
  return u2f((static_cast<uint32_t>(code & 0x8) << 28) | f2u(e2m1_magnitude(code)));
}

// The counter-based hash (minifloat.h).
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
PX_HD uint64_t mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ULL;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z;
}
// hash32(seed, i) = hash_keyed(mix64(seed + G), i): the key is computed once per seed.
PX_HD uint64_t hash_key(uint64_t seed) { return mix64(seed + kGolden); }
// The stochastic-rounding seed of training step `counter` for an operand whose per-run seed is
// `seed` (the emulated NVFP4 recipes, parallax/precision/nvfp4_scheme.py): the counter is a
// runtime value (a device scalar inside compiled graphs), so the mix happens here, in one place
// for the CPU, the CUDA kernels and both frameworks.
PX_HD uint64_t step_seed(uint64_t seed, uint32_t counter) {
  return mix64(seed + (static_cast<uint64_t>(counter) + 1) * kGolden);
}
PX_HD uint32_t hash_keyed(uint64_t key, uint64_t index) {
  return static_cast<uint32_t>(mix64(key + index * kGolden) >> 32);
}
PX_HD float uniform_keyed(uint64_t key, uint64_t index) {
  return mul(static_cast<float>(hash_keyed(key, index) >> 8), 1.0f / 16777216.0f);
}

// nvfp4.cpp's e2m1_stochastic, with the hash key precomputed.
PX_HD uint8_t e2m1_stochastic(float v, uint64_t key, uint64_t index) {
  if (is_nan(v)) return 0x7;
  const uint8_t sign = (f2u(v) >> 31) ? 0x8 : 0x0;
  const float m = abs_(v);
  if (m >= 6.0f) return sign | 0x7;
  uint32_t lo = 0;
  while (lo < 7 && e2m1_magnitude(lo + 1) <= m) ++lo;
  const float glo = e2m1_magnitude(lo);
  if (glo == m) return static_cast<uint8_t>(sign | lo);
  const float p = div(sub(m, glo), sub(e2m1_magnitude(lo + 1), glo));
  const float u = uniform_keyed(key, index);
  return static_cast<uint8_t>(sign | (u < p ? lo + 1 : lo));
}

// NVFP4 scales (nvfp4.h). amax: finite tensor amax -> s_global.
PX_HD float global_scale(float amax) { return amax == 0.0f ? 1.0f : div(amax, 2688.0f); }

// The scale of a block with finite amax amax_b; sets denom = d * s_global (0 when d == 0).
struct BlockScale {
  uint8_t code;  // E4M3 byte (0x7F for a non-finite block)
  float d;       // e4m3_decode(code); 0 for an all-zero or underflowing block
  float denom;   // d * s_global
};

// amax_b: the block's finite amax, or +inf when the block holds any NaN/inf.
PX_HD BlockScale block_scale(float amax_b, float sg) {
  if (!is_finite(amax_b)) return {0x7F, 0.0f, 0.0f};
  const uint8_t sc = e4m3_encode(div(div(amax_b, 6.0f), sg));
  const float d = e4m3_decode(sc);
  if (d == 0.0f) return {0, 0.0f, 0.0f};
  return {sc, d, mul(d, sg)};
}

// One element of a block with scale b: its E2M1 code and dequantized value (NaN for a
// non-finite block, +0 for a zero block, as nvfp4.h states).
PX_HD uint8_t element_code(float x, const BlockScale& b, bool stochastic, uint64_t key, uint64_t index) {
  if (b.code == 0x7F || b.d == 0.0f) return 0;
  const float v = div(x, b.denom);
  return stochastic ? e2m1_stochastic(v, key, index) : e2m1_encode(v);
}

PX_HD float element_value(uint8_t code, const BlockScale& b, float sg) {
  if (b.code == 0x7F) return u2f(kNanBits);
  return mul(mul(e2m1_decode(code), b.d), sg);
}

// The 16 Hadamard signs of a seed (+1/-1), and the butterfly of nvfp4.cpp's hadamard16.
PX_HD float hadamard_sign(uint64_t key, int j) { return (hash_keyed(key, static_cast<uint64_t>(j)) >> 31) ? -1.0f : 1.0f; }

// In place on v[16]: forward v <- H16 (s ⊙ v), inverse v <- s ⊙ (H16 v).
PX_HD void hadamard16_group(float v[16], const float s[16], bool inverse) {
  if (!inverse) {
    PX_UNROLL
    for (int j = 0; j < 16; ++j) v[j] = mul(v[j], s[j]);
  }
  PX_UNROLL
  for (int stride = 1; stride < 16; stride <<= 1) {
    PX_UNROLL
    for (int i = 0; i < 16; ++i)
      if ((i & stride) == 0) {
        const float a = v[i], b = v[i + stride];
        v[i] = add(a, b);
        v[i + stride] = sub(a, b);
      }
  }
  PX_UNROLL
  for (int j = 0; j < 16; ++j) {
    const float h = mul(v[j], 0.25f);
    v[j] = inverse ? mul(h, s[j]) : h;
  }
}

// ==== The kernels' fast paths ==================================================================
//
// What quant_cuda.cu's NVFP4 kernels run per block and per element, written here so that the
// host test (quant_qdq_math_test.cpp) runs the same code against the functions above. The
// results are those of block_scale / element_code / element_value bit for bit; what changes is
// how they are obtained:
//
//  * No division per element for round-to-nearest. For a block with d > 0 and a denominator
//    denom = d * s_global >= 2^-120, the E2M1 magnitude of RN(x / denom) is the number of k
//    with bits(|x|) > thr[k] (e2m1_threshold). Why that is exact: RN is monotone, so RN(q)
//    crosses an E2M1 decision point t (0.25, 0.75, ..., 5, ties to the even code) exactly when
//    the real quotient q crosses the midpoint between t and its float neighbour (t has an even
//    last bit, so the tie of that midpoint goes back to t): RN(q) > t <=> q > t + ulp/2 for the
//    strict cuts, RN(q) >= t <=> q >= t - ulp/2 for the others (e2m1_cut, 25-bit dyadics).
//    q > c <=> |x| > c * denom, a product exact in double (25 + 24 bits); and for a float |x|,
//    |x| > A <=> |x| > RD(A), |x| >= A <=> |x| >= RU(A), rounded to float. The sign is x's.
//  * The dequantized value depends on the magnitude only: a table of the 8 values per scale
//    code (element_value of codes 0..7; the negative codes are their negation, RN being
//    symmetric), looked up with byte permutes (prmt).
//  * Per thread block, one table of 128 entries (FastScale, one per E4M3 scale code) for the
//    tensor's s_global, so a block costs its amax, block_code and one shared-memory row.
//  * Blocks outside the fast path (an E4M3 scale whose d * s_global < 2^-120, which needs a
//    tensor amax below ~1e-30) take the generic path, element_code / element_value as before.
//
// Device-only instructions have host twins here: prmt (__byte_perm), gt_mask2
// (set.gt.u32.bf16x2), max_u16x2 and max_s16x2. Each twin states the domain the kernels call it
// on; outside it the twin and the instruction may differ (see gt_mask2).

// PTX prmt.b32 in its default mode, for selectors whose nibbles are all 0..7 (no sign
// replication); like the instruction it reads only the low 16 bits of sel.
PX_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, sel);
#else
  const uint64_t v = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((v >> (8 * ((sel >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  return r;
#endif
}

// Per 16-bit lane: 0xFFFF where a > t, else 0. The device compares the lanes as bfloat16
// (set.gt.u32.bf16x2, one instruction; integer SIMD compares are emulated on sm_90+), the host
// as unsigned integers. They agree on the lanes the kernels compare: a is a magnitude (sign
// clear) and, where t is a positive normal bf16, a is finite (a live block); the other t is
// 0x7FFF, a NaN that no comparison exceeds and no 15-bit integer exceeds either. A subnormal a
// is below every normal t whether or not the hardware flushes it.
PX_HD uint32_t gt_mask2(uint32_t a, uint32_t t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("set.gt.u32.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(t));
  return d;
#elif defined(__CUDA_ARCH__)
  return __vcmpgtu2(a, t);
#else
  return ((a & 0xFFFFu) > (t & 0xFFFFu) ? 0x0000FFFFu : 0u) | ((a >> 16) > (t >> 16) ? 0xFFFF0000u : 0u);
#endif
}

// Per 16-bit lane maxima, unsigned and signed.
PX_HD uint32_t max_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#elif defined(__CUDA_ARCH__)
  return __vmaxu2(a, b);
#else
  const uint32_t lo = (a & 0xFFFFu) > (b & 0xFFFFu) ? (a & 0xFFFFu) : (b & 0xFFFFu);
  const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
  return lo | (hi << 16);
#endif
}
PX_HD uint32_t max_s16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("max.s16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#elif defined(__CUDA_ARCH__)
  return __vmaxs2(a, b);
#else
  const int16_t al = static_cast<int16_t>(a & 0xFFFFu), bl = static_cast<int16_t>(b & 0xFFFFu);
  const int16_t ah = static_cast<int16_t>(a >> 16), bh = static_cast<int16_t>(b >> 16);
  return static_cast<uint16_t>(al > bl ? al : bl) | (static_cast<uint32_t>(static_cast<uint16_t>(ah > bh ? ah : bh)) << 16);
#endif
}

// -- Round to nearest without dividing ------------------------------------------------------

// The cut c_k on the real quotient q = |x| / denom above which (k even: q > c_k) or from which
// (k odd: q >= c_k) RN(q) has E2M1 magnitude > k. t_k = 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 are
// the RNE decision points of the grid 0, 0.5, 1, 1.5, 2, 3, 4, 6 (round_magnitude; a tie goes to
// the even code: down at 0.25, 1.25, 2.5, 5, up at 0.75, 1.75, 3.5), moved by half a float ulp
// of t_k's binade toward the side RN(q) = t_k belongs to.
PX_HD double e2m1_cut(int k) {
  switch (k) {
    case 0: return 0.25 + 0x1p-26;
    case 1: return 0.75 - 0x1p-25;
    case 2: return 1.25 + 0x1p-24;
    case 3: return 1.75 - 0x1p-24;
    case 4: return 2.5 + 0x1p-23;
    case 5: return 3.5 - 0x1p-23;
    default: return 5.0 + 0x1p-22;
  }
}

// a > 0 and its float roundings normal: the float at or below / at or above a.
PX_HD float f32_round_down(double a) {
  const float f = static_cast<float>(a);  // round to nearest
  return static_cast<double>(f) > a ? u2f(f2u(f) - 1u) : f;
}
PX_HD float f32_round_up(double a) {
  const float f = static_cast<float>(a);
  return static_cast<double>(f) < a ? u2f(f2u(f) + 1u) : f;
}

// The least denominator of the fast path: every threshold is then a normal float (>= 2^-122)
// and so is every bf16 threshold (its high half).
PX_HD float fast_min_denom() { return u2f(static_cast<uint32_t>(127 - 120) << 23); }

// thr_k for denom >= fast_min_denom(): bits(|x|) > thr_k <=> the E2M1 magnitude of
// RN(|x| / denom) is > k. denom * c_k is exact in double (a 24-bit by a 25-bit significand).
PX_HD uint32_t e2m1_threshold(float denom, int k) {
  const double a = static_cast<double>(denom) * e2m1_cut(k);
  return (k & 1) ? f2u(f32_round_up(a)) - 1u : f2u(f32_round_down(a));
}

// #{k : a > thr[k]} for ascending thresholds, as a 3-step binary search.
PX_HD uint32_t mag_from_thresholds(uint32_t a, const uint32_t thr[7]) {
  const bool b2 = a > thr[3];
  const bool b1 = a > (b2 ? thr[5] : thr[1]);
  const bool b0 = a > (b2 ? (b1 ? thr[6] : thr[4]) : (b1 ? thr[2] : thr[0]));
  return (b2 ? 4u : 0u) | (b1 ? 2u : 0u) | (b0 ? 1u : 0u);
}

// -- Per scale code: the block's table row ------------------------------------------------------

constexpr uint32_t kFlagLive = 0xFFFFFFFFu;  // a fast block: signs kept
constexpr uint32_t kFlagDead = 0u;           // a NaN (scale 0x7F) or zero (scale 0) block: constant output
constexpr uint32_t kFlagGeneric = 1u;        // anything else: element_code / element_value

struct alignas(16) FastScale {
  uint32_t thr[7];  // thresholds: f32 bits, or (bf16_pairs) their high halves in both 16-bit lanes
  uint32_t flags;
  uint32_t tab[8];  // the values of the magnitudes 0..7: bf16 (bf16_out: tab[0..3]) or f32 byte planes
  float denom;      // d * s_global (stochastic rounding divides by it)
  uint32_t csign;   // flags & 0x88888888: the sign bits a half's code word keeps
  uint32_t ysign;   // flags & the output's sign bits (0x80008000 bf16 pairs, 0x80000000 f32)
  uint32_t pad;     // 80 bytes: an odd number of 16-byte chunks, so rows of different codes spread
};                  // over the shared-memory banks

// The row of scale code sc (0..0x7F) for s_global sg; bf16_pairs: thresholds for gt_mask2,
// bf16_out: a bf16 value table (else f32); thresholds are left out when !want_thresholds.
PX_HD FastScale fast_scale(uint32_t sc, float sg, bool bf16_pairs, bool bf16_out, bool want_thresholds) {
  FastScale e{};
  BlockScale b{static_cast<uint8_t>(sc), 0.0f, 0.0f};
  if (sc != 0x7Fu) {
    b.d = e4m3_decode(static_cast<uint8_t>(sc));
    b.denom = b.d == 0.0f ? 0.0f : mul(b.d, sg);
  }
  e.denom = b.denom;
  const bool dead = sc == 0x7Fu || b.d == 0.0f;  // block_scale's NaN and zero blocks
  e.flags = dead ? kFlagDead : (b.denom >= fast_min_denom() ? kFlagLive : kFlagGeneric);
  e.csign = e.flags == kFlagLive ? 0x88888888u : 0u;
  e.ysign = e.flags == kFlagLive ? (bf16_out ? 0x80008000u : 0x80000000u) : 0u;
  for (int k = 0; k < 7; ++k) {
    uint32_t t = 0x7FFFFFFFu;  // nothing exceeds it (dead, generic or not wanted)
    if (e.flags == kFlagLive && want_thresholds) t = e2m1_threshold(b.denom, k);
    e.thr[k] = bf16_pairs ? (t >> 16) * 0x00010001u : t;
  }
  uint32_t v[8];
  for (uint32_t c = 0; c < 8; ++c) {
    const float f = element_value(static_cast<uint8_t>(dead ? 0u : c), b, sg);
    v[c] = bf16_out ? f32_to_bf16(f) : f2u(f);
  }
  if (bf16_out) {
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 2; ++j) {  // tab[2h + j]: byte h (low/high) of the values 4j..4j+3
        uint32_t w = 0;
        for (int c = 0; c < 4; ++c) w |= ((v[4 * j + c] >> (8 * h)) & 0xFFu) << (8 * c);
        e.tab[2 * h + j] = w;
      }
  } else {
    for (int p = 0; p < 4; ++p)
      for (int j = 0; j < 2; ++j) {  // tab[2p + j]: byte p of the values 4j..4j+3
        uint32_t w = 0;
        for (int c = 0; c < 4; ++c) w |= ((v[4 * j + c] >> (8 * p)) & 0xFFu) << (8 * c);
        e.tab[2 * p + j] = w;
      }
  }
  return e;
}

// e4m3_encode (round to nearest even, saturating) from the float's bits, without
// round_magnitude's general shifts: an E4M3 normal (|x| >= 2^-6) is the float's exponent and
// top 3 mantissa bits rounded to nearest even (a carry runs into the exponent: the next code),
// rebased from bias 127 to 7; a subnormal (quantum 2^-9) is RNE(|x| * 512), the scaling exact
// and the rounding that of adding 2^23. Above 448 (and +-inf) it saturates to 0x7E, NaN -> 0x7F.
PX_HD uint8_t e4m3_encode_fast(float x) {
  const uint32_t u = f2u(x), sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
  // both candidates, then a select: a branch here let nvcc duplicate the caller's divisions
  const uint32_t normal = ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
  const uint32_t subnormal = f2u(add(mul(u2f(a), 512.0f), 8388608.0f)) - 0x4B000000u;
  uint32_t mag = a >= 0x3C800000u ? (normal > 0x7Eu ? 0x7Eu : normal) : subnormal;
  if (a > 0x7F800000u) mag = 0x7Fu;
  return static_cast<uint8_t>(sign | mag);
}

// The E4M3 code of a block whose largest magnitude has the float bits amax_bits (>= 0x7F800000:
// the block holds a NaN or inf): block_scale(amax_b, sg).code.
PX_HD uint32_t block_code(uint32_t amax_bits, float sg) {
  if (amax_bits >= 0x7F800000u) return 0x7Fu;
  return e4m3_encode_fast(div(div(u2f(amax_bits), 6.0f), sg));
}

// -- Values by table ---------------------------------------------------------------------------

// The bf16 values (two per word, the even element low) of the 4 elements whose magnitudes are
// the nibbles of sel (element k in nibble k), without sign.
PX_HD void lookup_bf16x4(const uint32_t tab[4], uint32_t sel, uint32_t& y01, uint32_t& y23) {
  const uint32_t lo = prmt(tab[0], tab[1], sel), hi = prmt(tab[2], tab[3], sel);
  y01 = prmt(lo, hi, 0x5140u);
  y23 = prmt(lo, hi, 0x7362u);
}
// The same as f32 bits, one word per element.
PX_HD void lookup_f32x4(const uint32_t tab[8], uint32_t sel, uint32_t y[4]) {
  const uint32_t p0 = prmt(tab[0], tab[1], sel), p1 = prmt(tab[2], tab[3], sel);
  const uint32_t p2 = prmt(tab[4], tab[5], sel), p3 = prmt(tab[6], tab[7], sel);
  const uint32_t t0 = prmt(p0, p1, 0x5140u), t1 = prmt(p2, p3, 0x5140u);
  const uint32_t t2 = prmt(p0, p1, 0x7362u), t3 = prmt(p2, p3, 0x7362u);
  y[0] = prmt(t0, t1, 0x5410u);
  y[1] = prmt(t0, t1, 0x7632u);
  y[2] = prmt(t2, t3, 0x5410u);
  y[3] = prmt(t2, t3, 0x7632u);
}

// -- Eight elements at a time ------------------------------------------------------------------
//
// A "half" is 8 consecutive elements: its codes are one word (element k in nibble k, as the
// packed output), its magnitudes the same without the sign bits.

// bf16 input: the words w[0..3] (element 2j low in w[j]) as the pairs (e_j, e_{j+4}) with the
// sign cleared, so that a lane's result lands in the nibble of its element (pair j, lane l:
// nibble j + 4l); and the sign bits at bit 4k + 3.
PX_HD void split_bf16x8(const uint32_t w[4], uint32_t a[4], uint32_t& signs) {
  const uint32_t x0 = prmt(w[0], w[2], 0x5410u), x1 = prmt(w[0], w[2], 0x7632u);
  const uint32_t x2 = prmt(w[1], w[3], 0x5410u), x3 = prmt(w[1], w[3], 0x7632u);
  a[0] = x0 & 0x7FFF7FFFu;
  a[1] = x1 & 0x7FFF7FFFu;
  a[2] = x2 & 0x7FFF7FFFu;
  a[3] = x3 & 0x7FFF7FFFu;
  signs = ((x0 >> 12) & 0x00080008u) | ((x1 >> 8) & 0x00800080u) | ((x2 >> 4) & 0x08000800u) | (x3 & 0x80008000u);
}

// The magnitude nibbles of split_bf16x8's pairs for the paired thresholds p (fast_scale with
// bf16_pairs): per lane the binary search of mag_from_thresholds, with lane masks.
PX_HD uint32_t mags_bf16x8(const uint32_t a[4], const uint32_t p[7]) {
  uint32_t mags = 0;
  PX_UNROLL
  for (int j = 0; j < 4; ++j) {
    const uint32_t m2 = gt_mask2(a[j], p[3]);
    const uint32_t m1 = gt_mask2(a[j], (m2 & p[5]) | (~m2 & p[1]));
    const uint32_t t0 = (m1 & p[6]) | (~m1 & p[4]), t1 = (m1 & p[2]) | (~m1 & p[0]);
    const uint32_t m0 = gt_mask2(a[j], (m2 & t0) | (~m2 & t1));
    mags |= m2 & (0x00040004u << (4 * j));
    mags |= m1 & (0x00020002u << (4 * j));
    mags |= m0 & (0x00010001u << (4 * j));
  }
  return mags;
}

// f32 magnitudes (|x| bits) of 8 elements: magnitude nibbles for f32 thresholds.
PX_HD uint32_t mags_f32x8(const uint32_t a[8], const uint32_t thr[7]) {
  uint32_t mags = 0;
  PX_UNROLL
  for (int k = 0; k < 8; ++k) mags |= mag_from_thresholds(a[k], thr) << (4 * k);
  return mags;
}

// Sign bits (bit 4k + 3) of 8 f32 elements.
PX_HD uint32_t signs_f32x8(const uint32_t u[8]) {
  uint32_t s = 0;
  PX_UNROLL
  for (int k = 0; k < 8; ++k) s |= (u[k] >> 31) << (4 * k + 3);
  return s;
}

// -- One group of 16 in a fast or dead block -----------------------------------------------------
//
// codes: two words (elements 0..7, 8..15); y: the output words, bf16 pairs (8) or f32 bits (16).

// The largest magnitude of 16 bf16 values from split_bf16x8's pairs a[0..7], as float bits
// (>= 0x7F800000 for a NaN or inf).
PX_HD uint32_t amax_bits_pairs(const uint32_t a[8]) {
  uint32_t m = a[0];
  PX_UNROLL
  for (int j = 1; j < 8; ++j) m = max_u16x2(m, a[j]);
  const uint32_t lo = m & 0xFFFFu, hi = m >> 16;
  return (lo > hi ? lo : hi) << 16;
}
// The same from f32 bits.
PX_HD uint32_t amax_bits_f32(const uint32_t u[16]) {
  uint32_t m = 0;
  PX_UNROLL
  for (int k = 0; k < 16; ++k) {
    const uint32_t a = u[k] & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m;
}

// Round to nearest, bf16 in and out, no transform: w as loaded, a/signs from split_bf16x8.
PX_HD void group_rne_pairs(const uint32_t w[8], const uint32_t a[8], const uint32_t signs[2], const FastScale& e,
                           uint32_t codes[2], uint32_t y[8]) {
  uint32_t thr[7], tab[4];
  PX_UNROLL
  for (int k = 0; k < 7; ++k) thr[k] = e.thr[k];
  PX_UNROLL
  for (int k = 0; k < 4; ++k) tab[k] = e.tab[k];
  const uint32_t csign = e.csign, ysign = e.ysign;
  PX_UNROLL
  for (int h = 0; h < 2; ++h) {
    const uint32_t mags = mags_bf16x8(a + 4 * h, thr);
    codes[h] = mags | (signs[h] & csign);
    lookup_bf16x4(tab, mags & 0xFFFFu, y[4 * h], y[4 * h + 1]);
    lookup_bf16x4(tab, mags >> 16, y[4 * h + 2], y[4 * h + 3]);
    PX_UNROLL
    for (int j = 0; j < 4; ++j) y[4 * h + j] |= w[4 * h + j] & ysign;
  }
}

// The values of a half from its magnitudes, with the signs of its f32 elements u[0..7].
template <bool kBf16Out>
PX_HD void half_values(const uint32_t tab[8], uint32_t mags, const uint32_t u[8], uint32_t ysign, uint32_t* y) {
  if (kBf16Out) {
    lookup_bf16x4(tab, mags & 0xFFFFu, y[0], y[1]);
    lookup_bf16x4(tab, mags >> 16, y[2], y[3]);
    PX_UNROLL
    for (int j = 0; j < 4; ++j) y[j] |= prmt(u[2 * j], u[2 * j + 1], 0x7430u) & ysign;  // signs to bits 15, 31
  } else {
    lookup_f32x4(tab, mags & 0xFFFFu, y);
    lookup_f32x4(tab, mags >> 16, y + 4);
    PX_UNROLL
    for (int k = 0; k < 8; ++k) y[k] |= u[k] & ysign;
  }
}

// Round to nearest from the f32 bits u of the 16 values (after the transform, if any).
template <bool kBf16Out>
PX_HD void group_rne_f32(const uint32_t u[16], const FastScale& e, uint32_t codes[2], uint32_t* y) {
  uint32_t thr[7], tab[8];
  PX_UNROLL
  for (int k = 0; k < 7; ++k) thr[k] = e.thr[k];
  PX_UNROLL
  for (int k = 0; k < (kBf16Out ? 4 : 8); ++k) tab[k] = e.tab[k];
  const uint32_t csign = e.csign, ysign = e.ysign;
  PX_UNROLL
  for (int h = 0; h < 2; ++h) {
    uint32_t a[8];
    PX_UNROLL
    for (int k = 0; k < 8; ++k) a[k] = u[8 * h + k] & 0x7FFFFFFFu;
    const uint32_t mags = mags_f32x8(a, thr);
    codes[h] = mags | (signs_f32x8(u + 8 * h) & csign);
    half_values<kBf16Out>(tab, mags, u + 8 * h, ysign, y + (kBf16Out ? 4 : 8) * h);
  }
}

// -- Stochastic rounding -----------------------------------------------------------------------

// e2m1_magnitude for mag 0..7, from the bits: 0, 0.5, then (mag + 252) << 22 = 1, 1.5, ..., 6.
PX_HD float e2m1_magnitude_bits(uint32_t mag) {
  return u2f(mag >= 2u ? (mag + 252u) << 22 : (mag == 1u ? 0x3F000000u : 0u));
}

// e2m1_stochastic without its search loop or division: lo by comparisons, and p's divisor
// (the grid step 0.5, 1 or 2, a power of two) as a product with its exact reciprocal, the same
// real number and so the same rounding. An on-grid value has p = 0 and never moves (u >= 0).
PX_HD uint8_t e2m1_stochastic_fast(float v, uint64_t key, uint64_t index) {
  const float m = abs_(v);
  const uint32_t lo = (m >= 0.5f ? 1u : 0u) + (m >= 1.0f ? 1u : 0u) + (m >= 1.5f ? 1u : 0u) + (m >= 2.0f ? 1u : 0u) +
                      (m >= 3.0f ? 1u : 0u) + (m >= 4.0f ? 1u : 0u);
  const float inv_step = lo >= 6u ? 0.5f : (lo >= 4u ? 1.0f : 2.0f);
  const float p = mul(sub(m, e2m1_magnitude_bits(lo)), inv_step);
  const uint32_t mag = m >= 6.0f ? 7u : lo + (uniform_keyed(key, index) < p ? 1u : 0u);
  if (is_nan(v)) return 0x7;
  return static_cast<uint8_t>(((f2u(v) >> 31) << 3) | mag);
}

// The previous kernels' stochastic rounding of a group (group_sr below, element by element
// through e2m1_stochastic_fast): kept for the benchmark's old-versus-new measurement
// (px_quant_cuda_set_legacy) and as the host tests' twin of the new path.
template <bool kBf16Out>
PX_HD void group_sr_v1(const uint32_t u[16], const FastScale& e, uint64_t key, uint64_t index0, uint32_t codes[2],
                       uint32_t* y) {
  uint32_t tab[8];
  PX_UNROLL
  for (int k = 0; k < (kBf16Out ? 4 : 8); ++k) tab[k] = e.tab[k];
  const float denom = e.denom;
  const uint32_t flags = e.flags, ysign = e.ysign;
  PX_UNROLL
  for (int h = 0; h < 2; ++h) {
    uint32_t c = 0;
    PX_UNROLL
    for (int k = 0; k < 8; ++k)
      c |= static_cast<uint32_t>(e2m1_stochastic_fast(div(u2f(u[8 * h + k]), denom), key,
                                                      index0 + static_cast<uint64_t>(8 * h + k)))
           << (4 * k);
    codes[h] = c & flags;
    half_values<kBf16Out>(tab, c & flags & 0x77777777u, u + 8 * h, ysign, y + (kBf16Out ? 4 : 8) * h);
  }
}

// -- Stochastic rounding by integers ----------------------------------------------------------
//
// e2m1_stochastic_fast's codes with about half its instructions (the per-element division
// x / denom stays: the spec's quotient, IEEE):
//  * The draw. uniform_keyed(key, i) = k * 2^-24 with k = hash32 >> 8, and hash32 is the high
//    word of mix64(key + i * G). For i = index0 + j, key + i * G = (key + index0 * G) + j * G
//    (mod 2^64): the base once per group of 16, then a constant added per element. mix64's last
//    step (z ^= z >> 31) changes only bit 0 of the high word, which >> 8 drops, so k = (z * C2) >> 40
//    after the second multiply. 64-bit multiplies per element: 3 (i * G and mix64's two) -> 2.
//  * The decision u < p, i.e. k < P with P = p * 2^24 (both sides scaled exactly by 2^24), on m's
//    bits (e2m1_sr_code) instead of the comparison chain, the grid value and the float draw.

// key + index0 * G: the hash argument of index index0, from which sr_draw steps.
PX_HD uint64_t sr_base(uint64_t key, uint64_t index0) { return key + index0 * kGolden; }

// hash_keyed(key, index0 + j) >> 8 for base = sr_base(key, index0): 24 bits, 0 <= k < 2^24.
PX_HD uint32_t sr_draw(uint64_t base, uint32_t j) {
  uint64_t z = base + static_cast<uint64_t>(j) * kGolden;
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ULL;
  z ^= z >> 27;
  return static_cast<uint32_t>((z * 0x94D049BB133111EBULL) >> 40);
}

// The E2M1 code (sign | magnitude) that stochastic rounding gives v (not NaN) for the draw k
// (sr_draw): e2m1_stochastic(v, seed, i) where hash32(seed, i) >> 8 == k. With m = |v| =
// 2^e (1 + f 2^-23), the reference's lo, p and u < p (u = k 2^-24) are:
//  * m in [1, 6): lo = (bits(m) >> 22) - 252 (exponent and top mantissa bit index the grid 1, 1.5,
//    2, 3, 4), the step is 2^(e-1), so p = (f mod 2^22) 2^-22 and P = 4 (f mod 2^22), an integer:
//    k < P <=> k' = 2^24 - 1 - k >= 2^24 - P <=> (f mod 2^22) + (k' >> 2) >= 2^22. So adding k' >> 2
//    to m's bits carries into bit 22 exactly when m rounds up, and (bits >> 22) - 252 after the
//    add is the magnitude. From [4, 6) the carry reaches index 7 (6.0); m >= 6 is 7 or more
//    already: clamped to 7 (the reference's m >= 6 -> 7, and its on-grid values: f mod 2^22 = 0,
//    no carry).
//  * m in [0.5, 1): lo = 1, step 0.5, P = 2 f: k < P <=> f + (k' >> 1) >= 2^23, a carry into the
//    exponent: magnitude (bits >> 23) - 125, 1 or 2.
//  * m < 0.5: lo = 0, p = 2 m: k < m 2^25, compared as floats (k < 2^24 and m 2^25 are exact).
PX_HD uint32_t e2m1_sr_code(float v, uint32_t k) {
  const uint32_t b = f2u(v), mb = b & 0x7FFFFFFFu, kc = k ^ 0xFFFFFFu;
  const uint32_t hi = (mb + (kc >> 2)) >> 22;
  const uint32_t top = hi < 259u ? hi - 252u : 7u;
  const uint32_t mid = ((mb + (kc >> 1)) >> 23) - 125u;
  const uint32_t low = static_cast<float>(k) < mul(u2f(mb), 33554432.0f) ? 1u : 0u;
  const uint32_t mag = mb >= 0x3F800000u ? top : (mb >= 0x3F000000u ? mid : low);
  return ((b >> 28) & 8u) | mag;
}

// Stochastic rounding from the f32 bits u: per element e2m1_sr_code(x / denom) with the draw of
// index index0 + k; a dead block's codes are 0 (flags) and its values the row's constant (a dead
// block's quotients are meaningless, NaN included, and masked).
template <bool kBf16Out>
PX_HD void group_sr(const uint32_t u[16], const FastScale& e, uint64_t key, uint64_t index0, uint32_t codes[2],
                    uint32_t* y) {
  uint32_t tab[8];
  PX_UNROLL
  for (int k = 0; k < (kBf16Out ? 4 : 8); ++k) tab[k] = e.tab[k];
  const float denom = e.denom;
  const uint32_t flags = e.flags, ysign = e.ysign;
  const uint64_t base = sr_base(key, index0);
  PX_UNROLL
  for (int h = 0; h < 2; ++h) {
    uint32_t c = 0;
    PX_UNROLL
    for (int k = 0; k < 8; ++k)
      c |= e2m1_sr_code(div(u2f(u[8 * h + k]), denom), sr_draw(base, static_cast<uint32_t>(8 * h + k))) << (4 * k);
    codes[h] = c & flags;
    half_values<kBf16Out>(tab, c & flags & 0x77777777u, u + 8 * h, ysign, y + (kBf16Out ? 4 : 8) * h);
  }
}

// -- Blocks that are not fast ------------------------------------------------------------------

// The codes (a word per 8 elements) and values of one group of 16 in a generic block, by
// element_code / element_value exactly as before; index0: the linear index of v[0].
PX_HD void generic_group(const float v[16], uint32_t amax_bits, float sg, bool stochastic, uint64_t key,
                         uint64_t index0, uint32_t codes[2], float y[16]) {
  const BlockScale b = block_scale(amax_bits >= 0x7F800000u ? u2f(0x7F800000u) : u2f(amax_bits), sg);
  codes[0] = codes[1] = 0;
  for (int k = 0; k < 16; ++k) {
    const uint8_t c = element_code(v[k], b, stochastic, key, index0 + static_cast<uint64_t>(k));
    codes[k >> 3] |= static_cast<uint32_t>(c) << (4 * (k & 7));
    y[k] = element_value(c, b, sg);
  }
}

}  // namespace parallax::quant::qdq
