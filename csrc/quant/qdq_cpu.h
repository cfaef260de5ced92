#pragma once
// The CPU implementation behind the framework bindings, with the signature of the CUDA entry
// points (quant_cuda.h) less the stream: float32 or bfloat16 buffers in and out, the work done
// by the reference (nvfp4.h, minifloat.h) in float32. bfloat16 input is widened exactly,
// bfloat16 output rounded to nearest even (qdq_math.h f32_to_bf16, as torch and CUDA round).
// Throws QuantError on a bad shape or argument. The JAX FFI CPU handler calls these; the GPU
// GoogleTest compares the CUDA kernels with them.
#include <cstddef>
#include <cstdint>

namespace parallax::quant {

enum class QdqDtype { kF32 = 0, kBF16 = 1 };

// y = dequant(quant(rht ? H(x) : x)) as px_nvfp4_qdq_cuda; scale_ws (float[2]) gets
// {amax, s_global}; y, codes, scales may be null. mode: kPxNvfp4Mode1x16 (0), 16x16 (1) or
// 16x1 (2: the 1x16 blocks of xᵀ, in x's layout; y only, codes and scales must be null).
void nvfp4_qdq_cpu(const void* x, QdqDtype dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                   size_t rows, size_t cols, int mode, bool stochastic, uint64_t seed, bool rht, uint64_t rht_seed);

void hadamard16_cpu(const void* x, QdqDtype dtype, void* y, size_t rows, size_t cols, uint64_t seed, bool inverse);

// fmt 0: E4M3, 1: E5M2; codes may be null.
void fp8_qdq_cpu(const void* x, QdqDtype dtype, void* y, uint8_t* codes, size_t n, int fmt, float scale,
                 bool saturate);

// MX quantize-dequantize (mx.h) along the rows: elem 0 E4M3, 1 E5M2, 2 E2M1; rule 0 floor (OCP),
// 1 rceil; y, codes (rows * cols bytes) and scales (rows * cols / 32 bytes) may be null.
void mx_qdq_cpu(const void* x, QdqDtype dtype, void* y, uint8_t* codes, uint8_t* scales, size_t rows, size_t cols,
                int elem, int rule, bool stochastic, uint64_t seed);

}  // namespace parallax::quant
