#include "quant/minifloat.h"

#include <cmath>
#include <cstring>

namespace parallax::quant {
namespace {

// A sign-magnitude minifloat with `ebits` exponent bits, `mbits` mantissa bits and bias `bias`.
// Finite codes are laid out so that the magnitude code is monotone in the value, which lets
// the rounding carry of the mantissa flow into the exponent field by plain addition.
struct Spec {
  int ebits, mbits, bias;
  uint32_t max_finite;  // magnitude code of the largest finite value
  uint32_t overflow;    // FP8: the magnitude code an unsaturated overflow takes (inf, or NaN without inf)
  bool has_inf;         // FP8: `overflow` is infinity (else every code above max_finite is NaN)
};

constexpr Spec kE2M1{2, 1, 1, 0x7, 0x7, false};
constexpr Spec kE4M3{4, 3, 7, 0x7E, 0x7F, false};
constexpr Spec kE5M2{5, 2, 15, 0x7B, 0x7C, true};

bool sign_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b >> 31) != 0;
}

// Magnitude code of round-to-nearest-even(|x|), finite |x|, possibly above max_finite.
uint32_t round_magnitude(double m, const Spec& s) {
  if (m == 0.0) return 0;
  const int emin = 1 - s.bias;  // exponent of the smallest normal
  int e;
  std::frexp(m, &e);  // m = f * 2^e, f in [0.5, 1): unbiased exponent is e - 1
  int ue = e - 1;
  if (ue < emin) ue = emin;  // subnormal range shares the quantum of the smallest normal binade
  const double quantum = std::ldexp(1.0, ue - s.mbits);
  const double q = std::nearbyint(m / quantum);  // exact division by a power of two; RNE
  const uint32_t r = static_cast<uint32_t>(q);
  // Subnormal (ue == emin and r < 2^mbits): code = r. Normal: code = (ue + bias) << mbits
  // + (r - 2^mbits). Both are (ue - emin) << mbits + r, and r == 2^(mbits+1) carries into
  // the next exponent.
  return (static_cast<uint32_t>(ue - emin) << s.mbits) + r;
}

double decode_magnitude(uint32_t mag, const Spec& s) {
  const uint32_t e = mag >> s.mbits;
  const uint32_t f = mag & ((1u << s.mbits) - 1);
  const int emin = 1 - s.bias;
  if (e == 0) return std::ldexp(static_cast<double>(f), emin - s.mbits);
  return std::ldexp(static_cast<double>((1u << s.mbits) + f), static_cast<int>(e) - s.bias - s.mbits);
}

// FP8 (sign bit 0x80, magnitude 0x7F): NaN -> 0x7F | sign; ±inf and overflow -> max finite
// when saturating, else the format's `overflow` code (E5M2 inf, E4M3 NaN).
uint8_t encode_fp8(float x, bool saturate, const Spec& s) {
  const uint8_t sign = sign_of(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const uint32_t limit = saturate ? s.max_finite : s.overflow;
  if (std::isinf(x)) return static_cast<uint8_t>(sign | limit);
  uint32_t mag = round_magnitude(std::fabs(static_cast<double>(x)), s);
  if (mag > s.max_finite) mag = limit;
  return static_cast<uint8_t>(sign | mag);
}

float decode_fp8(uint8_t code, const Spec& s) {
  const uint32_t mag = code & 0x7Fu;
  const bool neg = (code & 0x80) != 0;
  if (mag > s.max_finite) {
    const float special = (s.has_inf && mag == s.overflow) ? INFINITY : NAN;
    return neg ? -special : special;
  }
  const double v = decode_magnitude(mag, s);
  return static_cast<float>(neg ? -v : v);
}

}  // namespace

uint8_t e2m1_encode(float x) {
  const uint8_t sign = sign_of(x) ? 0x8 : 0x0;
  if (std::isnan(x)) return 0x7;
  if (std::isinf(x)) return sign | 0x7;
  uint32_t mag = round_magnitude(std::fabs(static_cast<double>(x)), kE2M1);
  if (mag > kE2M1.max_finite) mag = kE2M1.max_finite;
  return static_cast<uint8_t>(sign | mag);
}

float e2m1_decode(uint8_t code) {
  const double v = decode_magnitude(code & 0x7u, kE2M1);
  return static_cast<float>((code & 0x8) ? -v : v);
}

uint8_t e4m3_encode(float x, bool saturate) { return encode_fp8(x, saturate, kE4M3); }
float e4m3_decode(uint8_t code) { return decode_fp8(code, kE4M3); }
uint8_t e5m2_encode(float x, bool saturate) { return encode_fp8(x, saturate, kE5M2); }
float e5m2_decode(uint8_t code) { return decode_fp8(code, kE5M2); }

uint8_t fp8_encode(float x, Fp8Format f, bool saturate) {
  return f == Fp8Format::kE4M3 ? e4m3_encode(x, saturate) : e5m2_encode(x, saturate);
}

float fp8_decode(uint8_t code, Fp8Format f) { return f == Fp8Format::kE4M3 ? e4m3_decode(code) : e5m2_decode(code); }

bool fp8_default_saturate(Fp8Format f) { return f == Fp8Format::kE4M3; }

uint64_t quant_mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ULL;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z;
}

uint32_t hash32(uint64_t seed, uint64_t index) {
  constexpr uint64_t G = 0x9E3779B97F4A7C15ULL;
  return static_cast<uint32_t>(quant_mix64(quant_mix64(seed + G) + index * G) >> 32);
}

float uniform01(uint64_t seed, uint64_t index) {
  return static_cast<float>(hash32(seed, index) >> 8) * (1.0f / 16777216.0f);
}

}  // namespace parallax::quant
