#pragma once
// Test matrices for the quantization kernels: random blocks of widely varying magnitude with
// the edge cases of nvfp4.h planted in them (shared by quant_qdq_math_test.cpp and the GPU
// test quant_cuda_test.cu).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace parallax::quant::testing {

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// rows x cols (cols % 16 == 0, rows % 16 == 0 for the planted tiles to stay inside): normal
// values whose scale changes per 16-block over 2^-30..2^30, then, block by block:
// an all-zero block, a block of -0.0, a NaN, +inf and -inf in three blocks, a block of float
// subnormals, a block 2^-40 below its neighbours (its E4M3 scale underflows), and a block of
// E2M1 midpoints (0.25, 0.75, ..., 5, and negatives) at block amax 6, which with a tensor
// amax of 2688 (planted too) is quantized with denominator exactly 1.
inline std::vector<float> edge_matrix(size_t rows, size_t cols, unsigned seed, bool plant_specials = true) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-30, 30);
  std::vector<float> x(rows * cols);
  for (size_t b = 0; b < x.size() / 16; ++b) {
    const float s = std::ldexp(1.0f, ex(g));
    for (size_t k = 0; k < 16; ++k) x[b * 16 + k] = nd(g) * s;
  }
  if (x.size() < 16 * 16) return x;
  auto block = [&](size_t b) { return x.data() + (b * 16) % x.size(); };
  const size_t nb = x.size() / 16;
  size_t at = 0;
  auto next = [&]() { at = (at + 7) % nb; return block(at); };
  x[0] = 2688.0f;  // tensor amax: s_global = 1
  {
    float* p = next();
    const float mid[8] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
    for (int k = 0; k < 16; ++k) p[k] = (k % 2 ? -1.0f : 1.0f) * mid[k / 2];
  }
  {
    float* p = next();  // a 16-block holding the grid, the midpoints' neighbours
    for (int k = 0; k < 16; ++k) p[k] = std::nextafter((k % 2 ? 2.5f : 0.75f), k < 8 ? 0.0f : 10.0f);
    p[15] = 6.0f;
  }
  for (int k = 0; k < 16; ++k) next()[k] = 0.0f;
  {
    float* p = next();
    for (int k = 0; k < 16; ++k) p[k] = -0.0f;
  }
  {
    float* p = next();
    for (int k = 0; k < 16; ++k) p[k] = bits_float(static_cast<uint32_t>(1 + k * 4099));  // float subnormals
  }
  {
    float* p = next();
    for (int k = 0; k < 16; ++k) p[k] = nd(g) * 1e-12f;  // far below the tensor amax: scale underflows
  }
  if (plant_specials) {
    next()[3] = std::numeric_limits<float>::quiet_NaN();
    next()[5] = std::numeric_limits<float>::infinity();
    next()[11] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// A matrix whose finite amax is itself subnormal (s_global underflows, block scales saturate).
inline std::vector<float> tiny_matrix(size_t rows, size_t cols, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<uint32_t> m(0, 0x7FFFFF);
  std::vector<float> x(rows * cols);
  for (float& v : x) v = bits_float(m(g) | ((g() & 1u) << 31));
  return x;
}

inline std::vector<float> transpose(const std::vector<float>& f, size_t rows, size_t cols) {
  std::vector<float> t(f.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = f[r * cols + c];
  return t;
}

// x [rows, cols] whose column blocks hold the planted cases (16x1): the transpose of an edge
// matrix (rows % 16 == 0).
inline std::vector<float> column_edge_matrix(size_t rows, size_t cols, unsigned seed) {
  return transpose(edge_matrix(cols, rows, seed), cols, rows);
}

}  // namespace parallax::quant::testing
