#include "quant/mx.h"

#include <cmath>
#include <string>

#include "quant/minifloat.h"

namespace parallax::quant {
namespace {

constexpr size_t kBlock = 32;

int emax_of(MxElem e) { return e == MxElem::kE4M3 ? 8 : (e == MxElem::kE5M2 ? 15 : 2); }
double max_of(MxElem e) { return e == MxElem::kE4M3 ? 448.0 : (e == MxElem::kE5M2 ? 57344.0 : 6.0); }

uint8_t encode(float v, MxElem e) {
  if (e == MxElem::kE2M1) return e2m1_encode(v);
  return fp8_encode(v, e == MxElem::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2, true);
}

float decode(uint8_t c, MxElem e) {
  if (e == MxElem::kE2M1) return e2m1_decode(c);
  return fp8_decode(c, e == MxElem::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
}

uint8_t sign_bit(MxElem e) { return e == MxElem::kE2M1 ? 0x8 : 0x80; }

// The magnitude code below or at m: RNE's code, one step down when it rounded up.
uint8_t floor_code(float m, MxElem e) {
  uint8_t c = encode(m, e);
  if (decode(c, e) > m) --c;
  return c;
}

uint8_t stochastic(float v, MxElem e, uint64_t seed, uint64_t index) {
  if (std::isnan(v)) return encode(v, e);
  const uint8_t sign = std::signbit(v) ? sign_bit(e) : 0;
  const float m = std::fabs(v);
  if (m >= static_cast<float>(max_of(e))) return sign | encode(static_cast<float>(max_of(e)), e);
  const uint8_t lo = floor_code(m, e);
  const float glo = decode(lo, e);
  if (glo == m) return sign | lo;
  const float p = (m - glo) / (decode(static_cast<uint8_t>(lo + 1), e) - glo);
  return sign | (uniform01(seed, index) < p ? static_cast<uint8_t>(lo + 1) : lo);
}

}  // namespace

uint8_t mx_scale_code_ref(float amax, MxElem elem, MxRule rule) {
  if (!std::isfinite(amax)) return 0xFF;
  if (amax == 0.0f) return 0;
  int e2 = 0;
  std::frexp(static_cast<double>(amax), &e2);  // amax = f * 2^e2, f in [0.5, 1)
  int k = (e2 - 1) - emax_of(elem);
  if (rule == MxRule::kRceil && std::ldexp(max_of(elem), k) < static_cast<double>(amax)) ++k;
  if (k < -127) k = -127;
  if (k > 127) k = 127;
  return static_cast<uint8_t>(k + 127);
}

float e8m0_decode(uint8_t code) {
  if (code == 0xFF) return NAN;
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

MxTensor mx_quantize(const float* x, size_t rows, size_t cols, const MxOptions& o) {
  if (cols % kBlock != 0)
    throw QuantError("mx: cols (" + std::to_string(cols) + ") must be a multiple of 32 (MX blocks; no padding)");
  MxTensor t;
  t.rows = rows;
  t.cols = cols;
  t.elem = o.elem;
  t.codes.assign(rows * cols, 0);
  t.scales.assign(rows * cols / kBlock, 0);
  for (size_t b = 0; b < rows * cols / kBlock; ++b) {
    const float* v = x + b * kBlock;
    float amax = 0.0f;
    bool finite = true;
    for (size_t i = 0; i < kBlock; ++i) {
      finite = finite && std::isfinite(v[i]);
      if (std::isfinite(v[i])) amax = std::fmax(amax, std::fabs(v[i]));
    }
    const uint8_t sc = finite ? mx_scale_code_ref(amax, o.elem, o.rule) : 0xFF;
    t.scales[b] = sc;
    if (sc == 0xFF) continue;
    const float s = e8m0_decode(sc);
    for (size_t i = 0; i < kBlock; ++i) {
      const float q = v[i] / s;
      const uint64_t index = b * kBlock + i;
      t.codes[index] = o.stochastic ? stochastic(q, o.elem, o.seed, index) : encode(q, o.elem);
    }
  }
  return t;
}

void mx_dequantize(const MxTensor& t, float* out) {
  for (size_t i = 0; i < t.codes.size(); ++i) {
    const uint8_t sc = t.scales[i / kBlock];
    out[i] = sc == 0xFF ? NAN : decode(t.codes[i], t.elem) * e8m0_decode(sc);
  }
}

}  // namespace parallax::quant
