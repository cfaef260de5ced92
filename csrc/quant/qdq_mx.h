#pragma once
// MX block quantization (OCP Microscaling Formats v1.0), written once for host and device like
// qdq_math.h, whose minifloat encoders and hash it uses: the CUDA kernel (quant_cuda.cu
// mx_kernel) runs these functions, csrc/tests/quant_mx_test.cpp checks them on the host against
// the CPU reference (mx.h) bit for bit.
//
// A block is 32 consecutive elements of a row. Its scale is an E8M0 byte c, the value 2^(c - 127)
// (c = 0xFF: NaN); its elements are E4M3 or E5M2 (MXFP8) or E2M1 (MXFP4) codes of x / scale:
//   amax    max |x| over the block; a block holding a NaN or ±inf gets the NaN scale 0xFF
//   floor   (kMxFloor, the OCP rule) k = floor(log2(amax)) - emax_elem, emax_elem the exponent
//           of the element's largest normal (E4M3 8, E5M2 15, E2M1 2); values past the
//           element's max after scaling saturate
//   rceil   (kMxRceil, arXiv 2506.08027) k = ceil(log2(amax / max_elem)): the smallest power of
//           two that puts amax at or below max_elem, so nothing saturates. It is the floor rule
//           plus one exactly when amax's significand exceeds max_elem's (1.75 for E4M3/E5M2,
//           1.5 for E2M1): computed on the bits, exact
//   clamp   k to E8M0's [-127, 127]; amax = 0 gives k = -127 (code 0)
//   element v = x / 2^k (one IEEE division, exact for every finite x of a finite block);
//           RNE with saturation (E4M3 and E5M2 both clamp to ±max, E2M1 to ±6), or stochastic
//   value   y = decode(code) * 2^k; signed zeros kept; a NaN block: codes 0, every y NaN
// Stochastic rounding of v (mx_stochastic): |v| >= max_elem -> max_elem; else lo <= |v| < hi
// neighbouring magnitudes of the element grid, p = (|v| - lo) / (hi - lo) (float32), round to hi
// iff uniform(seed, i) < p, i the row-major element index; on-grid values never move.
#include "quant/qdq_math.h"

namespace parallax::quant::qdq {

constexpr int kMxBlock = 32;
enum MxElem : int { kMxE4M3 = 0, kMxE5M2 = 1, kMxE2M1 = 2 };
enum MxRule : int { kMxFloor = 0, kMxRceil = 1 };
constexpr uint8_t kE8M0Nan = 0xFF;

// An element format: its minifloat, the exponent of its largest normal, the 24-bit significand
// of its largest value (1.75 -> 0xE00000), and whether it is E2M1 (sign bit 0x8, not 0x80).
struct MxSpec {
  Spec spec;
  int emax;
  uint32_t max_sig;
  bool fp4;
};

PX_HD MxSpec mx_spec(int elem) {
  if (elem == kMxE5M2) return {e5m2_spec(), 15, 0xE00000u, false};
  if (elem == kMxE2M1) return {e2m1_spec(), 2, 0xC00000u, true};
  return {e4m3_spec(), 8, 0xE00000u, false};
}

PX_HD int clz32(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return __clz(v);
#else
  return v ? __builtin_clz(v) : 32;
#endif
}

// a = sig * 2^(e - 23) with 2^23 <= sig < 2^24, for a finite a > 0 (float subnormals included).
PX_HD void mx_normalize(float a, int& e, uint32_t& sig) {
  const uint32_t u = f2u(a) & 0x7FFFFFFFu, be = u >> 23;
  if (be) {
    e = static_cast<int>(be) - 127;
    sig = (u & 0x7FFFFFu) | 0x800000u;
    return;
  }
  const int sh = clz32(u) - 8;
  sig = u << sh;
  e = -126 - sh;
}

// The E8M0 scale code of a block whose amax is `amax` (+inf or NaN: a non-finite block).
PX_HD uint8_t mx_scale_code(float amax, const MxSpec& m, int rule) {
  if (!is_finite(amax) || is_nan(amax)) return kE8M0Nan;
  if (amax == 0.0f) return 0;
  int e;
  uint32_t sig;
  mx_normalize(amax, e, sig);
  int k = e - m.emax;
  if (rule == kMxRceil && sig > m.max_sig) ++k;
  k = k < -127 ? -127 : (k > 127 ? 127 : k);
  return static_cast<uint8_t>(k + 127);
}

// 2^(c - 127) as a float (code 0: the subnormal 2^-127), NaN for 0xFF.
PX_HD float e8m0_value(uint8_t c) {
  if (c == kE8M0Nan) return u2f(kNanBits);
  return c == 0 ? u2f(0x00400000u) : u2f(static_cast<uint32_t>(c) << 23);
}

PX_HD uint8_t mx_encode(float v, const MxSpec& m) { return m.fp4 ? e2m1_encode(v) : fp8_encode(v, m.spec, true); }
PX_HD float mx_decode(uint8_t c, const MxSpec& m) { return m.fp4 ? e2m1_decode(c) : fp8_decode(c, m.spec); }

// Magnitude code of m (finite, >= 0) rounded toward zero onto the grid (round_magnitude's
// truncation); may exceed max_finite for m past the largest value.
PX_HD uint32_t trunc_magnitude(float m, int mbits, int bias) {
  const uint32_t u = f2u(m);
  if (u == 0) return 0;
  const int be = static_cast<int>(u >> 23);
  const uint32_t sig = be == 0 ? (u & 0x7FFFFFu) : ((u & 0x7FFFFFu) | 0x800000u);
  const int e = be == 0 ? 1 : be;
  const int emin = 1 - bias;
  int ue = e - 127;
  if (ue < emin) ue = emin;
  const int sh = (ue - mbits) - (e - 150);
  const uint32_t q = sh < 24 ? sig >> sh : 0u;
  return (static_cast<uint32_t>(ue - emin) << mbits) + q;
}

// Stochastic rounding of v onto the element grid (header comment), saturating.
PX_HD uint8_t mx_stochastic(float v, const MxSpec& m, uint64_t key, uint64_t index) {
  if (is_nan(v)) return mx_encode(v, m);
  const uint32_t sign = (f2u(v) >> 31) ? (m.fp4 ? 0x8u : 0x80u) : 0u;
  const float a = abs_(v);
  const int mb = m.spec.mbits, bias = m.spec.bias;
  if (!(a < decode_magnitude(m.spec.max_finite, mb, bias))) return static_cast<uint8_t>(sign | m.spec.max_finite);
  const uint32_t lo = trunc_magnitude(a, mb, bias);
  const float glo = decode_magnitude(lo, mb, bias);
  if (glo == a) return static_cast<uint8_t>(sign | lo);
  const float p = div(sub(a, glo), sub(decode_magnitude(lo + 1, mb, bias), glo));
  return static_cast<uint8_t>(sign | (uniform_keyed(key, index) < p ? lo + 1 : lo));
}

// One block of n <= 32 values: its codes and dequantized values; returns the E8M0 scale code.
// key: hash_key(seed) of stochastic rounding, index0: the linear index of v[0].
PX_HD uint8_t mx_block(const float* v, int n, const MxSpec& m, int rule, bool stochastic, uint64_t key,
                       uint64_t index0, uint8_t* codes, float* y) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    finite = finite && is_finite(v[i]);
    if (is_finite(v[i])) amax = max_nonneg(amax, abs_(v[i]));
  }
  const uint8_t sc = mx_scale_code(finite ? amax : u2f(0x7F800000u), m, rule);
  if (sc == kE8M0Nan) {
    for (int i = 0; i < n; ++i) {
      codes[i] = 0;
      y[i] = u2f(kNanBits);
    }
    return sc;
  }
  const float s = e8m0_value(sc);
  for (int i = 0; i < n; ++i) {
    const float q = div(v[i], s);
    const uint8_t c = stochastic ? mx_stochastic(q, m, key, index0 + static_cast<uint64_t>(i)) : mx_encode(q, m);
    codes[i] = c;
    y[i] = mul(mx_decode(c, m), s);
  }
  return sc;
}

}  // namespace parallax::quant::qdq
