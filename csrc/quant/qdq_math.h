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
#else
#define PX_HD inline
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
  if (!inverse)
    for (int j = 0; j < 16; ++j) v[j] = mul(v[j], s[j]);
  for (int stride = 1; stride < 16; stride <<= 1)
    for (int i = 0; i < 16; ++i)
      if ((i & stride) == 0) {
        const float a = v[i], b = v[i + stride];
        v[i] = add(a, b);
        v[i + stride] = sub(a, b);
      }
  for (int j = 0; j < 16; ++j) {
    const float h = mul(v[j], 0.25f);
    v[j] = inverse ? mul(h, s[j]) : h;
  }
}

}  // namespace parallax::quant::qdq
