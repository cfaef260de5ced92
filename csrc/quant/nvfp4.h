#pragma once
// NVFP4 quantize-dequantize on the CPU: the arithmetic a later CUDA kernel must match bit for
// bit. Every step below is one float32 operation, evaluated left to right, no FMA contraction.
//
// Tensor: row-major [rows, cols] float32. cols % 16 == 0 (1x16) and also rows % 16 == 0
// (16x16), else QuantError; there is no padding. rows == 0 gives empty outputs.
//
//   amax      max |x| over the FINITE elements of the tensor (NaN/inf are skipped)
//   s_global  amax / 2688.0f  (2688 = 6 * 448);  amax == 0 (all-zero tensor) -> s_global = 1
//   block     1x16: 16 consecutive elements of a row; 16x16: a 16x16 tile (weights)
//   amax_b    max |x| over the finite elements of the block
//   scale     sc = e4m3_encode((amax_b / 6.0f) / s_global), RNE, saturating at 448;
//             d  = e4m3_decode(sc)
//   element   denom = d * s_global;  v = x / denom;  code = e2m1_encode(v)  (RNE) or
//             e2m1_stochastic(v, seed, row * cols + col)
//   output    y = (e2m1_decode(code) * d) * s_global
//
// Special cases (documented choices):
//   all-zero block, or a block whose scale rounds to E4M3 zero (amax_b far below amax):
//             sc = 0, every code 0, y = 0 (signed zeros as in x are NOT kept: code 0 = +0)
//   non-finite block: a block with any NaN or ±inf gets sc = 0x7F (E4M3 NaN), every code of
//             the block is 0, and all 16 (256) outputs are NaN. Other blocks are unaffected.
//
// Outputs: y; packed codes, 2 per byte in row-major element order, element 2k in the low
// nibble of byte k; scale bytes, [rows, cols/16] for 1x16 or [rows/16, cols/16] for 16x16.
//
// Stochastic rounding of v (|v| first clamped to 6): lo <= |v| <= hi neighbouring E2M1
// magnitudes; p = (|v| - lo) / (hi - lo); u = uniform01(seed, index) (minifloat.h); round
// to hi when u < p, else lo; the sign of v is kept. Values on the grid (p == 0) never move;
// NaN v -> code 0x7 as in RNE.
//
// Random Hadamard transform (hadamard16): per group of 16 consecutive elements of a row,
//   forward  y = H16 (s ⊙ x),   inverse  x = s ⊙ (H16 y),   H16 = Sylvester Hadamard / 4
// with s_j = (hash32(seed, j) >> 31) ? -1 : +1 for j = 0..15 (one sign vector per seed).
// H16 v is computed as the in-place butterfly over strides 1, 2, 4, 8 (a, b) -> (a + b, a - b)
// on elements i and i + stride (i with bit `stride` clear), then multiplied by 0.25f (exact).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace parallax::quant {

class QuantError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Nvfp4Mode { k1x16, k16x16 };

struct Nvfp4Options {
  Nvfp4Mode mode = Nvfp4Mode::k1x16;
  bool stochastic = false;
  uint64_t seed = 0;
};

struct Nvfp4Tensor {
  size_t rows = 0, cols = 0;
  Nvfp4Mode mode = Nvfp4Mode::k1x16;
  float global_scale = 1.0f;
  std::vector<uint8_t> codes;   // rows * cols / 2 bytes
  std::vector<uint8_t> scales;  // scale_rows * scale_cols E4M3 bytes
  size_t scale_rows = 0, scale_cols = 0;
};

float nvfp4_global_scale(const float* x, size_t n);
uint8_t e2m1_stochastic(float v, uint64_t seed, uint64_t index);

Nvfp4Tensor nvfp4_quantize(const float* x, size_t rows, size_t cols, const Nvfp4Options& o);
void nvfp4_dequantize(const Nvfp4Tensor& t, float* out);  // out: rows * cols floats

// The 16 signs of a seed and the transform (in == out allowed). cols % 16 == 0 else QuantError.
void hadamard16_signs(uint64_t seed, float signs[16]);
void hadamard16(const float* in, float* out, size_t rows, size_t cols, uint64_t seed, bool inverse);

}  // namespace parallax::quant
