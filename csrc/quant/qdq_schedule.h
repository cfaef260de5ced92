#pragma once
// Where the CUDA kernels (quant_cuda.cu) find and visit the groups of 16, written once for host
// and device so that csrc/tests/quant_schedule_test.cpp can check on the CPU what the GPU will
// do: the division the strided layouts need, the address of a group in a strided tensor, and
// the work split of the single-read 1x16 kernel (which thread block takes which groups, which
// of them it keeps in shared memory, and the order of its second pass).
#include <cstddef>
#include <cstdint>

#include "quant/qdq_math.h"

namespace parallax::quant::qdq {

// n / d for n < 2^31 and 1 <= d < 2^31 without a division: q = (umulhi(n, mul) + n) >> shift
// with shift = ceil(log2 d) and mul = floor(2^32 (2^shift - d) / d) + 1 (Granlund and
// Montgomery's round-up method, the 33rd bit of the multiplier carried by the "+ n"). The sum
// cannot overflow: umulhi(n, mul) < n < 2^31.
struct FastDiv {
  uint32_t d = 1, mul = 1, shift = 0;

  static FastDiv of(uint32_t divisor) {  // host side: once per launch
    FastDiv f;
    f.d = divisor;
    while ((uint64_t{1} << f.shift) < divisor) ++f.shift;
    f.mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - divisor)) / divisor + 1);
    return f;
  }

  PX_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * mul) >> 32);
#endif
    return (hi + n) >> shift;
  }
};

// A row-major tensor part [rows, cols] whose rows lie `ld` elements apart (ld >= cols; ld ==
// cols: dense). Group g (16 consecutive elements of a row, numbered row-major within the part,
// g < 2^31) starts at element offset(g) of the buffer; its index within the part, which the
// codes, the scales and stochastic rounding use, stays g * 16.
struct GroupLayout {
  FastDiv per_row;  // divisor: groups per row (cols / 16)
  uint64_t ld = 0;
  bool dense = true;

  static GroupLayout of(size_t cols, size_t ld) {
    GroupLayout l;
    l.per_row = FastDiv::of(static_cast<uint32_t>(cols / 16 ? cols / 16 : 1));
    l.ld = ld;
    l.dense = ld == cols;
    return l;
  }

  PX_HD uint64_t offset(uint32_t g) const {
    if (dense) return static_cast<uint64_t>(g) * 16;
    const uint32_t row = per_row.div(g);
    return row * ld + static_cast<uint64_t>(g - row * per_row.d) * 16;
  }
};

// The single-read 1x16 kernel's split of `groups` over `blocks` thread blocks of `threads`:
// block b takes the contiguous groups [begin, end), its first `hold` of them (a multiple of
// `threads`, or all) kept in shared memory by its first pass. Thread t of the block visits the
// block's groups begin + t, begin + t + threads, ... in the first pass; in the second it takes
// the groups it did not keep, last first (those the first pass read last are the likeliest to
// be in L2 still), then the kept ones from shared memory.
struct FusedSplit {
  uint32_t begin = 0, end = 0, hold = 0;

  PX_HD static FusedSplit of(uint32_t groups, uint32_t blocks, uint32_t b, uint32_t hold_cap) {
    const uint32_t per = (groups + blocks - 1) / blocks;
    FusedSplit s;
    const uint64_t begin = static_cast<uint64_t>(per) * b;
    s.begin = begin < groups ? static_cast<uint32_t>(begin) : groups;
    s.end = groups - s.begin < per ? groups : s.begin + per;
    const uint32_t n = s.end - s.begin;
    s.hold = n < hold_cap ? n : hold_cap;
    return s;
  }

  PX_HD uint32_t size() const { return end - begin; }

  // The number of groups thread t visits in [from, size()) of this block's groups (local
  // indices from + t, from + t + threads, ...).
  PX_HD uint32_t visits(uint32_t from, uint32_t t, uint32_t threads) const {
    const uint32_t n = size();
    return from + t < n ? (n - 1 - from - t) / threads + 1 : 0u;
  }
};

// The shared-memory slot (in 16-byte words) of word k (0 .. words-1) of kept local group j:
// the groups of one pass of the block's threads side by side, word k of all of them contiguous,
// so that the threads of a warp store and load consecutive 16-byte words (no bank conflicts).
PX_HD uint32_t held_slot(uint32_t j, uint32_t k, uint32_t words, uint32_t threads) {
  return (j / threads) * (words * threads) + k * threads + j % threads;
}

}  // namespace parallax::quant::qdq
