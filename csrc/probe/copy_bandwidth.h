#pragma once
// The HBM bandwidth a copy reaches on this GPU: the memory-bound limit of `parallax profile`
// (plan/limits.py hbm_limit), measured rather than read off a datasheet.
//
// What is measured: one device-to-device copy of `bytes` (cuMemcpyDtoDAsync between two buffers
// of the primary context), `warmup` untimed, then `iters` copies queued back to back on one
// stream, each between its own pair of CUDA events. Each copy reads `bytes` and writes `bytes`:
// the bandwidth is 2·bytes / time, from the median copy (the sustained rate) and from the fastest.
// A few GB per copy is far beyond any L2, so every byte crosses HBM. The buffers are not
// initialised: a copy's speed does not depend on the values. The CUDA runtime is not used.
#include <cstdint>
#include <optional>
#include <string>

#include "probe/cuda_api.h"

namespace parallax {

struct CopyRequest {
  int device = 0;  // CUDA ordinal
  int64_t bytes = int64_t{2} << 30;  // one copy's size (read once, written once)
  int warmup = 3;
  int iters = 10;
};

struct CopyResult {
  int64_t bytes = 0;
  int warmup = 0, iters = 0;
  std::string error;  // empty when the copies ran; else the failing check or call, by name
  std::optional<double> median_ms, min_ms, max_ms;
  std::optional<double> bytes_per_s;       // 2·bytes / median: the sustained rate
  std::optional<double> bytes_per_s_best;  // 2·bytes / min: the fastest copy
};

// Never throws for GPU trouble: a missing driver or a failing call is reported in `error`.
CopyResult measure_copy(const LoadedApi<cuda::Api>& driver, const CopyRequest& request);
CopyResult measure_copy(const CopyRequest& request);

// Bytes a second of a copy of `bytes` (read + written) in `ms`.
double copy_bytes_per_s(int64_t bytes, double ms);

}  // namespace parallax
