#pragma once
// NVFP4 "16x1": the 1x16 blocks of xᵀ, computed and written in x's own layout. For x [rows, cols]
// (row-major), a block is 16 consecutive rows of one column; the optional 16x16 Hadamard
// transform runs along those 16; the per-tensor amax, the block scales and the rounding are
// those of the 1x16 quantization of xᵀ, and stochastic rounding draws element (r, c) with the
// index c·rows + r (its index in xᵀ). So y equals transpose(Q1x16(H(xᵀ))) bit for bit, without
// the two transposed copies: the weight-gradient GEMM of the emulated recipe (dW = Q(H(dYᵀ)) ·
// Q(H(Xᵀ))ᵀ) reads the operands in their own layout instead.
//
// Work unit: the two blocks of rows row0 .. row0 + 15 of the neighbouring columns col, col + 1
// (one 32-bit bf16 pair, or two floats, per row: a warp of consecutive units reads and writes
// 32 consecutive pairs of each row). The functions are host and device code (qdq_math.h): the
// CUDA kernels (quant_cuda.cu) run them in a grid-stride loop, and the host test
// (csrc/tests/quant_columns_test.cpp) runs them over every unit against the CPU reference.
#include <cstddef>
#include <cstdint>
#if !defined(__CUDACC__)
#include <cstring>
#endif

#include "quant/qdq_math.h"

namespace parallax::quant::qdq {

PX_HD uint32_t load_u32(const uint16_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
#endif
}

PX_HD void store_u32(uint16_t* p, uint32_t w) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint32_t*>(p) = w;
#else
  std::memcpy(p, &w, sizeof w);
#endif
}

// The unit's two blocks as float32: a = column col, b = column col + 1 (col even, cols even);
// ld: the elements from one row to the next (cols for a dense tensor, more for a column part).
template <bool kBf16>
PX_HD void load_column_pair(const void* x, size_t ld, size_t row0, size_t col, float a[16], float b[16]) {
  PX_UNROLL
  for (int k = 0; k < 16; ++k) {
    const size_t i = (row0 + static_cast<size_t>(k)) * ld + col;
    if constexpr (kBf16) {
      const uint32_t w = load_u32(static_cast<const uint16_t*>(x) + i);
      a[k] = bf16_to_f32(static_cast<uint16_t>(w & 0xFFFFu));
      b[k] = bf16_to_f32(static_cast<uint16_t>(w >> 16));
    } else {
      const float* p = static_cast<const float*>(x) + i;
      a[k] = p[0];
      b[k] = p[1];
    }
  }
}

// The amax key of 16 values folded into `key`: max over (magnitude bits + 2^23) as int32, which
// puts NaN and inf below every finite value (quant_cuda.cu's amax convention); the finite amax
// is key - 2^23 where key > 2^23, else 0.
PX_HD int32_t amax_key(const float v[16], int32_t key) {
  PX_UNROLL
  for (int k = 0; k < 16; ++k) {
    const int32_t m = static_cast<int32_t>((f2u(v[k]) & 0x7FFFFFFFu) + 0x00800000u);
    key = m > key ? m : key;
  }
  return key;
}

PX_HD uint32_t amax_of_key(int32_t key) { return key > 0x00800000 ? static_cast<uint32_t>(key - 0x00800000) : 0u; }

// A unit's blocks after the transform (kRht: signs s), folded into the amax key.
template <bool kBf16, bool kRht>
PX_HD int32_t unit_amax_key(const void* x, size_t ld, size_t row0, size_t col, const float s[16], int32_t key) {
  float a[16], b[16];
  load_column_pair<kBf16>(x, ld, row0, col, a, b);
  if (kRht) {
    hadamard16_group(a, s, false);
    hadamard16_group(b, s, false);
  }
  return amax_key(b, amax_key(a, key));
}

// block_values' generic path (a block whose d * s_global < 2^-120, or the host's signed-NaN
// scale): element_code / element_value. Out of line on the device: rare, and inlined it was
// ~1500 instructions twice a unit between the fast paths.
template <bool kBf16, bool kSr>
PX_HD_NOINLINE void generic_block_values(const float v[16], uint32_t amax, float sg, uint64_t key, uint64_t index0,
                                         uint32_t out[16]) {
  float yf[16];
  uint32_t codes[2];
  generic_group(v, amax, sg, kSr, key, index0, codes, yf);
  for (int k = 0; k < 16; ++k) out[k] = kBf16 ? static_cast<uint32_t>(f32_to_bf16(yf[k])) : f2u(yf[k]);
}

// One block's 16 output values as bits (bf16 in the low half, or f32), through the fast paths of
// qdq_math.h where its scale code allows (table: fast_scale(sc, sg, false, kBf16, !kSr) for every
// code 0..0x7F) and the generic path otherwise; index0: the xᵀ index of v[0]. kV1: stochastic
// rounding by the previous kernels' path (group_sr_v1), the same bits.
template <bool kBf16, bool kSr, bool kV1 = false>
PX_HD void block_values(const float v[16], const FastScale* table, float sg, uint64_t key, uint64_t index0,
                        uint32_t out[16]) {
  uint32_t u[16];
  PX_UNROLL
  for (int k = 0; k < 16; ++k) u[k] = f2u(v[k]);
  const uint32_t amax = amax_bits_f32(u);
  const uint32_t sc = block_code(amax, sg);
  uint32_t codes[2];
  if (sc > 0x7Fu || table[sc].flags == kFlagGeneric) {
    generic_block_values<kBf16, kSr>(v, amax, sg, key, index0, out);
    return;
  }
  uint32_t y[16];
  if constexpr (kSr && kV1) {
    group_sr_v1<kBf16>(u, table[sc], key, index0, codes, y);
  } else if constexpr (kSr) {
    group_sr<kBf16>(u, table[sc], key, index0, codes, y);
  } else {
    group_rne_f32<kBf16>(u, table[sc], codes, y);
  }
  PX_UNROLL
  for (int k = 0; k < 16; ++k) out[k] = kBf16 ? (y[k >> 1] >> (16 * (k & 1))) & 0xFFFFu : y[k];
}

// One unit: both blocks quantize-dequantized and written to y at their places (x and y rows ld
// elements apart; the SR index counts the part's own rows and columns).
template <bool kBf16, bool kRht, bool kSr, bool kV1 = false>
PX_HD void unit_qdq(const void* x, void* y, size_t rows, size_t ld, size_t row0, size_t col, const float s[16],
                    const FastScale* table, float sg, uint64_t key) {
  float a[16], b[16];
  load_column_pair<kBf16>(x, ld, row0, col, a, b);
  if (kRht) {
    hadamard16_group(a, s, false);
    hadamard16_group(b, s, false);
  }
  uint32_t ya[16], yb[16];
  block_values<kBf16, kSr, kV1>(a, table, sg, key, col * rows + row0, ya);
  block_values<kBf16, kSr, kV1>(b, table, sg, key, (col + 1) * rows + row0, yb);
  PX_UNROLL
  for (int k = 0; k < 16; ++k) {
    const size_t i = (row0 + static_cast<size_t>(k)) * ld + col;
    if constexpr (kBf16) {
      store_u32(static_cast<uint16_t*>(y) + i, ya[k] | (yb[k] << 16));
    } else {
      float* p = static_cast<float*>(y) + i;
      p[0] = u2f(ya[k]);
      p[1] = u2f(yb[k]);
    }
  }
}

}  // namespace parallax::quant::qdq
