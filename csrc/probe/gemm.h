#pragma once
// Measured GEMM ceilings: how fast cuBLASLt multiplies matrices of a given precision on this
// GPU. The MFU "measured ceiling" denominator is the square result of this measurement.
//
// What is measured: D[m,n] = X[m,k] · W[n,k]ᵀ with both operands K-contiguous (row-major X and
// W), the layout of torch's F.linear and the only one Hopper's fp8 tensor cores accept. In
// cuBLASLt's column-major terms that is the "TN" GEMM Dᵀ = op(W)·X with transa = T, m↔n.
//   bf16   A, B bf16; D bf16; fp32 compute and scale
//   fp8    A, B E4M3 with per-tensor fp32 scales (device floats = 1); D bf16; fp32 compute.
//          Split accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM off), as in backward passes.
//   nvfp4  A, B E2M1 with one UE4M3 scale per 16 elements (VEC16_UE4M3); D bf16; fp32 compute.
//          Compute capability 10.0+. Not yet run on hardware: written from cublasLt.h.
// Operands are random, non-zero, uploaded from the host; workspace 32 MiB.
//
// Which algorithm: cuBLASLt's heuristic ranks up to 8 algorithms by a model, not by timing
// them, so its first is not always the fastest on the GPU at hand. Each offered algorithm is
// therefore timed briefly, `tune_warmup` untimed then `tune_iters` timed calls, and the smallest
// median wins (ties go to the heuristic's earlier pick). The first candidate that runs also
// takes the `warmup` calls, so that no candidate is judged on a GPU still leaving idle clocks.
// An algorithm whose cublasLtMatmul call fails is recorded with its error and skipped; any
// CUDA failure ends the measurement. `tune_iters` = 0 takes the heuristic's first, untimed.
//
// How it is timed: `warmup` untimed calls of the chosen algorithm, then `iters` calls queued
// back to back on one stream, each between its own pair of CUDA events. The median is the
// sustained rate, the nearer to what a long training run sees; the min is the best single
// call. Both are reported.
// The CUDA runtime is not used: memory, streams and events come from the driver.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "probe/cublaslt_api.h"
#include "probe/cuda_api.h"

namespace parallax {

struct GemmRequest {
  int device = 0;  // CUDA ordinal
  std::string precision;
  int64_t m = 0, n = 0, k = 0;
  int warmup = 10;
  int iters = 50;
  int tune_warmup = 3;  // per algorithm the heuristic offers; see above
  int tune_iters = 5;   // 0: no tuning, the heuristic's first algorithm
  // Host sleep between tuning and the measurement. The tuning calls alone can push the GPU into
  // its software power cap (sw_power_cap) and slow the measurement that follows; a rest lets the
  // power average fall back first (docs/results/2026-11-29-h200/).
  int rest_ms = 0;
};

// One algorithm the tuning timed: its place in the heuristic's list and its median, or why it
// did not run.
struct AlgoTrial {
  int index = 0;
  std::optional<double> median_ms;
  std::string error;
};

struct GemmResult {
  std::string precision;
  int64_t m = 0, n = 0, k = 0;
  int warmup = 0, iters = 0, tune_warmup = 0, tune_iters = 0, rest_ms = 0;
  double flops = 0;     // 2·m·n·k, one call
  std::string error;    // empty when the GEMM ran; else the failing check or call, by name
  std::optional<double> median_ms, min_ms, max_ms;
  std::optional<double> tflops;       // flops / median time: the sustained rate
  std::optional<double> tflops_best;  // flops / min time: the best single call
  int algo_count = 0;                 // algorithms the heuristic offered
  std::optional<int> algo_index;      // the one measured, by its place in the heuristic's list
  int algos_tried = 0;                // algorithms the tuning timed (= algo_trials.size())
  std::vector<AlgoTrial> algo_trials;
  std::optional<int64_t> cublaslt_version;
  std::string library;           // the cuBLASLt file that loaded
};

// The precisions measure_gemm knows: bf16, fp8, nvfp4.
const std::vector<std::string>& gemm_precisions();

// Never throws for GPU trouble: a missing library, an unsuitable GPU or a failing call ends
// the measurement and is reported in `error`.
GemmResult measure_gemm(const LoadedApi<cuda::Api>& driver, const LoadedApi<cublaslt::Api>& cublaslt,
                        const GemmRequest& request);
GemmResult measure_gemm(const GemmRequest& request);

// Median (mean of the middle two for an even count), min and max; `times` must be non-empty.
struct TimeSummary {
  double median = 0, min = 0, max = 0;
};
TimeSummary summarize_times(std::vector<double> times);

}  // namespace parallax
