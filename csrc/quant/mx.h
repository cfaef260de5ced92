#pragma once
// MX (OCP Microscaling v1.0) quantize-dequantize on the CPU: the reference the CUDA kernel and
// qdq_mx.h (its host/device arithmetic) must match bit for bit. Written from the specification
// with minifloat.h's encoders, independently of qdq_mx.h (the host test compares the two).
//
// Tensor: row-major [rows, cols] float32, cols % 32 == 0 (else QuantError; no padding). Blocks
// are 32 consecutive elements of a row; one E8M0 scale byte per block, scales [rows, cols/32].
//   amax      max |x| over the block; any NaN or ±inf in the block: scale 0xFF (NaN), codes 0,
//             every output NaN (other blocks unaffected)
//   scale     kFloor (OCP): 2^(floor(log2 amax) - emax_elem), emax_elem = 8 (E4M3), 15 (E5M2),
//             2 (E2M1); kRceil (arXiv 2506.08027): 2^ceil(log2(amax / max_elem)), max_elem =
//             448, 57344, 6 (exact in double); the exponent clamped to [-127, 127], amax = 0 ->
//             2^-127 (code 0). Code = exponent + 127
//   element   v = x / scale (float32); code = RNE of v with saturation (E4M3, E5M2: ±max, the
//             inf/NaN codes never produced from a finite v; E2M1: ±6), or stochastic rounding
//   output    y = decode(code) * scale (float32); signed zeros kept
// Stochastic rounding (index = row * cols + col): |v| >= max_elem -> max_elem; else lo, hi the
// neighbouring grid magnitudes around |v|, p = (|v| - lo) / (hi - lo), hi iff uniform01(seed,
// index) < p (minifloat.h), sign kept; on-grid values never move.
// Codes: one byte per element (E2M1 in the low nibble, not packed).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/nvfp4.h"

namespace parallax::quant {

enum class MxElem { kE4M3 = 0, kE5M2 = 1, kE2M1 = 2 };
enum class MxRule { kFloor = 0, kRceil = 1 };

struct MxOptions {
  MxElem elem = MxElem::kE4M3;
  MxRule rule = MxRule::kFloor;
  bool stochastic = false;
  uint64_t seed = 0;
};

struct MxTensor {
  size_t rows = 0, cols = 0;
  MxElem elem = MxElem::kE4M3;
  std::vector<uint8_t> codes;   // rows * cols, one per element
  std::vector<uint8_t> scales;  // rows * cols / 32 E8M0 bytes
};

MxTensor mx_quantize(const float* x, size_t rows, size_t cols, const MxOptions& o);
void mx_dequantize(const MxTensor& t, float* out);  // rows * cols floats

// The E8M0 code of a finite block amax (the scale rule alone), and a code's value (NaN for 0xFF).
uint8_t mx_scale_code_ref(float amax, MxElem elem, MxRule rule);
float e8m0_decode(uint8_t code);

}  // namespace parallax::quant
