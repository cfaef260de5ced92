#pragma once
// The CUDA quantization kernels (quant_cuda.cu): the C entry points both frameworks call, the
// PyTorch custom op through the nanobind binding (bind_quant_cuda.cpp) and the JAX FFI custom
// call (jax_ffi.cpp). Each one reproduces the CPU reference (nvfp4.h, minifloat.h) bit for
// bit; the per-element arithmetic is qdq_math.h's, shared with the host.
//
// Conventions of every function:
//   - pointers are device pointers; tensors are dense row-major [rows, cols] (n elements for
//     fp8); x, y and codes 16-byte aligned (else kPxQuantErrAlign);
//   - y has x's dtype: the result is computed in float32 and, for bf16, rounded to nearest
//     even (NaN -> 0x7FC0); every NaN written is the reference's (0x7FC00000, or with the
//     sign of an FP8 NaN code);
//   - the work is queued on `stream` (a cudaStream_t; 0 = the legacy default stream) and the
//     call returns without synchronising; a nonzero return means nothing was queued past the
//     failing launch, and px_quant_cuda_error_message() says why;
//   - optional outputs may be NULL.
// Compiled only where a CUDA compiler is found (csrc/CMakeLists.txt); without it the module
// has none of these symbols and says so (parallax._native.quant_bindings()).
#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t is `CUstream_st*`; this header needs no CUDA headers.

extern "C" {

enum PxQuantDtype { kPxQuantF32 = 0, kPxQuantBF16 = 1 };
enum PxQuantStatus {
  kPxQuantOk = 0,
  kPxQuantErrShape = 1,   // cols % 16 != 0, or rows % 16 != 0 for 16x16
  kPxQuantErrAlign = 2,   // a pointer is not 16-byte aligned
  kPxQuantErrArg = 3,     // an unknown dtype/format, or a required pointer is NULL
  kPxQuantErrCuda = 4,    // a CUDA runtime error (the message names it)
};

// NVFP4 quantize-dequantize (nvfp4.h), optionally after the 16x16 random Hadamard transform of
// each row's groups of 16 with the signs of `rht_seed` (the transform is applied in float32 on
// the way in, its output never rounded: y = dequant(quant(H(x)))).
//   mode        0: 1x16 blocks, scales [rows, cols/16]; 1: 16x16 tiles, scales [rows/16, cols/16];
//               2: 16x1, the 1x16 blocks of xᵀ in x's layout (qdq_columns.h: y = transpose of the
//               1x16 result on xᵀ, SR index of (r, c) = c·rows + r; rows % 16 == 0, cols even,
//               y only: codes and scales NULL)
//   stochastic  0: round to nearest even; 1: stochastic rounding with counter `seed`
//   scale_ws    required, device float[2]: on completion {amax, s_global} (the finite amax of
//               the (transformed) tensor, computed by a reduction kernel: deterministic)
//   codes       optional, rows*cols/2 bytes (low nibble = even element); scales optional
int px_nvfp4_qdq_cuda(const void* x, int dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                      size_t rows, size_t cols, int mode, int stochastic, uint64_t seed, int rht,
                      uint64_t rht_seed, CUstream_st* stream);

// The same with the stochastic-rounding seed taken at run time: `seed_counter` (device uint32,
// may be NULL = px_nvfp4_qdq_cuda) is read by the kernel and the seed used is
// step_seed(seed, *seed_counter) (qdq_math.h). For compiled graphs (torch.compile, XLA) whose
// training step advances the counter without recompiling.
int px_nvfp4_qdq_counter_cuda(const void* x, int dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                              size_t rows, size_t cols, int mode, int stochastic, uint64_t seed,
                              const uint32_t* seed_counter, int rht, uint64_t rht_seed, CUstream_st* stream);

// NVFP4 quantize-dequantize of the column parts of x: x [rows, cols] is `parts` equal blocks of
// columns x[:, p*w : (p+1)*w] (w = cols / parts), and part p is quantized exactly as
// px_nvfp4_qdq_counter_cuda quantizes a dense copy of it with seed seeds[p] (a host array of
// `parts`): its own amax and s_global (scale_ws: device float[2 * parts], {amax, s_global} per
// part), its own element indices for stochastic rounding; the result goes to the same columns
// of y [rows, cols]. No copies of the parts are made. y only (no codes or scales); w * the
// element size must be a multiple of 16 bytes, and for modes 0 and 1 with parts > 1 a part
// must have fewer than 2^31 groups of 16. For the fused linears of the emulated recipe (wqkv,
// w_gate_up), whose canonical parts are quantized alone.
int px_nvfp4_qdq_parts_cuda(const void* x, int dtype, void* y, float* scale_ws, size_t rows, size_t cols, size_t parts,
                            int mode, int stochastic, const uint64_t* seeds, const uint32_t* seed_counter, int rht,
                            uint64_t rht_seed, CUstream_st* stream);

// How 1x16 runs (process-wide; every schedule gives the same bits, benchmarks and tests compare
// them). fused 0 (the default): the amax kernel, then the quantize kernel; 1: one read of x, a
// cooperative launch of the single-read kernel where the device allows it (the two kernels
// otherwise); -1: the environment's default (PARALLAX_QUANT_FUSED=1 turns it on). hold 1 (the
// default, also for -1): the single-read kernel keeps what shared memory holds of x between its
// passes; 0: it relies on L2 alone. Returns kPxQuantOk.
int px_quant_cuda_set_schedule(int fused, int hold);

// The 1x16 schedule the last NVFP4 1x16 call of this thread queued: 1 the single-read kernel,
// 0 the two kernels, -1 none yet (tests check that the schedule asked for is the one that ran).
int px_quant_cuda_last_schedule(void);

// The previous NVFP4 kernels (on = 1) or the current ones (0), process-wide, for bf16 inputs: the
// amax kernel with one group a thread in flight, the 1x16 quantize kernel without its next-group
// prefetch, and stochastic rounding by the previous per-element path (qdq_math.h group_sr_v1), in
// the 1x16 two-kernel schedule and 16x1. Until set, the environment decides
// (PARALLAX_QUANT_LEGACY=1: the previous ones; else the current). The same bits either way; for
// measuring old against new on one machine (scripts/device/quant_bench.py, a training run), to
// be removed once that has run. Returns kPxQuantOk.
int px_quant_cuda_set_legacy(int on);

// The 16x16 random Hadamard transform alone (nvfp4.h hadamard16): y = H(s ⊙ x) per group of
// 16 along each row, or the inverse. cols % 16 == 0.
int px_hadamard16_cuda(const void* x, int dtype, void* y, size_t rows, size_t cols, uint64_t seed, int inverse,
                       CUstream_st* stream);

// FP8 quantize-dequantize with a given scale (bind_quant.cpp's quant_fp8):
// y = decode(encode(x / scale)) * scale, codes (optional, n bytes) = encode(x / scale).
// fmt 0: E4M3, 1: E5M2; saturate as minifloat.h (pass the format's default when unsure).
int px_fp8_qdq_cuda(const void* x, int dtype, void* y, uint8_t* codes, size_t n, int fmt, float scale, int saturate,
                    CUstream_st* stream);

// MX quantize-dequantize (OCP Microscaling v1.0; qdq_mx.h, mx.h): blocks of 32 along each row,
// an E8M0 scale per block. elem 0: E4M3, 1: E5M2 (MXFP8), 2: E2M1 (MXFP4); rule 0: the OCP
// floor rule, 1: rceil (arXiv 2506.08027); stochastic 1: stochastic rounding of the elements with
// the seed `seed`, or step_seed(seed, *seed_counter) when seed_counter (device uint32) is given.
// cols % 32 == 0. codes optional, rows*cols bytes (one per element); scales optional,
// rows*cols/32 bytes.
int px_mx_qdq_cuda(const void* x, int dtype, void* y, uint8_t* codes, uint8_t* scales, size_t rows, size_t cols,
                   int elem, int rule, int stochastic, uint64_t seed, const uint32_t* seed_counter,
                   CUstream_st* stream);

// The message of this thread's last failing call ("" after a success).
const char* px_quant_cuda_error_message(void);

}  // extern "C"
