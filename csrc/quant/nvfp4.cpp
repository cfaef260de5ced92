#include "quant/nvfp4.h"

#include <cmath>

#include "quant/minifloat.h"

namespace parallax::quant {
namespace {

constexpr float kGrid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

void check_shape(size_t rows, size_t cols, Nvfp4Mode mode, const char* what) {
  if (cols % 16 != 0)
    throw QuantError(std::string(what) + ": cols (" + std::to_string(cols) + ") must be a multiple of 16");
  if (mode == Nvfp4Mode::k16x16 && rows % 16 != 0)
    throw QuantError(std::string(what) + ": rows (" + std::to_string(rows) +
                     ") must be a multiple of 16 for 16x16 blocks");
}

void set_code(std::vector<uint8_t>& packed, size_t i, uint8_t code) {
  uint8_t& b = packed[i / 2];
  if (i % 2 == 0)
    b = static_cast<uint8_t>((b & 0xF0) | code);
  else
    b = static_cast<uint8_t>((b & 0x0F) | (code << 4));
}

uint8_t get_code(const std::vector<uint8_t>& packed, size_t i) {
  const uint8_t b = packed[i / 2];
  return (i % 2 == 0) ? (b & 0x0F) : (b >> 4);
}

}  // namespace

float nvfp4_global_scale(const float* x, size_t n) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(x[i])) amax = std::fmax(amax, std::fabs(x[i]));
  return amax == 0.0f ? 1.0f : amax / 2688.0f;
}

uint8_t e2m1_stochastic(float v, uint64_t seed, uint64_t index) {
  if (std::isnan(v)) return 0x7;
  const uint8_t sign = std::signbit(v) ? 0x8 : 0x0;
  float m = std::fabs(v);
  if (m >= 6.0f) return sign | 0x7;
  uint8_t lo = 0;
  while (lo < 7 && kGrid[lo + 1] <= m) ++lo;
  if (kGrid[lo] == m) return sign | lo;
  const float p = (m - kGrid[lo]) / (kGrid[lo + 1] - kGrid[lo]);
  const float u = uniform01(seed, index);
  return sign | static_cast<uint8_t>(u < p ? lo + 1 : lo);
}

Nvfp4Tensor nvfp4_quantize(const float* x, size_t rows, size_t cols, const Nvfp4Options& o) {
  check_shape(rows, cols, o.mode, "nvfp4_quantize");
  Nvfp4Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.mode = o.mode;
  const size_t bh = o.mode == Nvfp4Mode::k16x16 ? 16 : 1;  // block height
  t.scale_rows = rows / bh;
  t.scale_cols = cols / 16;
  t.codes.assign(rows * cols / 2, 0);
  t.scales.assign(t.scale_rows * t.scale_cols, 0);
  const float sg = nvfp4_global_scale(x, rows * cols);
  t.global_scale = sg;

  for (size_t br = 0; br < t.scale_rows; ++br) {
    for (size_t bc = 0; bc < t.scale_cols; ++bc) {
      float amax = 0.0f;
      bool finite = true;
      for (size_t r = br * bh; r < (br + 1) * bh; ++r)
        for (size_t c = bc * 16; c < (bc + 1) * 16; ++c) {
          const float v = x[r * cols + c];
          if (!std::isfinite(v))
            finite = false;
          else
            amax = std::fmax(amax, std::fabs(v));
        }
      uint8_t& sc = t.scales[br * t.scale_cols + bc];
      if (!finite) {
        sc = 0x7F;  // codes stay 0; decode gives NaN through the scale
        continue;
      }
      sc = e4m3_encode((amax / 6.0f) / sg, /*saturate=*/true);
      const float d = e4m3_decode(sc);
      if (d == 0.0f) {
        sc = 0;
        continue;
      }
      const float denom = d * sg;
      for (size_t r = br * bh; r < (br + 1) * bh; ++r)
        for (size_t c = bc * 16; c < (bc + 1) * 16; ++c) {
          const size_t i = r * cols + c;
          const float v = x[i] / denom;
          set_code(t.codes, i, o.stochastic ? e2m1_stochastic(v, o.seed, i) : e2m1_encode(v));
        }
    }
  }
  return t;
}

void nvfp4_dequantize(const Nvfp4Tensor& t, float* out) {
  const size_t bh = t.mode == Nvfp4Mode::k16x16 ? 16 : 1;
  for (size_t r = 0; r < t.rows; ++r)
    for (size_t c = 0; c < t.cols; ++c) {
      const size_t i = r * t.cols + c;
      const float d = e4m3_decode(t.scales[(r / bh) * t.scale_cols + c / 16]);
      out[i] = (e2m1_decode(get_code(t.codes, i)) * d) * t.global_scale;
    }
}

void hadamard16_signs(uint64_t seed, float signs[16]) {
  for (uint64_t j = 0; j < 16; ++j) signs[j] = (hash32(seed, j) >> 31) ? -1.0f : 1.0f;
}

void hadamard16(const float* in, float* out, size_t rows, size_t cols, uint64_t seed, bool inverse) {
  check_shape(rows, cols, Nvfp4Mode::k1x16, "hadamard16");
  float s[16];
  hadamard16_signs(seed, s);
  for (size_t g = 0; g < rows * cols; g += 16) {
    float v[16];
    for (int j = 0; j < 16; ++j) v[j] = inverse ? in[g + j] : in[g + j] * s[j];
    for (int stride = 1; stride < 16; stride <<= 1)
      for (int i = 0; i < 16; ++i)
        if ((i & stride) == 0) {
          const float a = v[i], b = v[i + stride];
          v[i] = a + b;
          v[i + stride] = a - b;
        }
    for (int j = 0; j < 16; ++j) {
      const float h = v[j] * 0.25f;
      out[g + j] = inverse ? h * s[j] : h;
    }
  }
}

}  // namespace parallax::quant
