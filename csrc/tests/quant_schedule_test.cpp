// quant/qdq_schedule.h on the host: the division without dividing, the offsets of groups in a
// strided column part, and the single-read kernel's split of the groups over thread blocks and
// threads, replayed the way quant_cuda.cu's nvfp4_1x16_fused_kernel walks it: every group read
// once in the first pass and quantized once in the second, the kept ones in distinct shared
// memory slots inside the block's allocation.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "quant/qdq_schedule.h"

namespace q = parallax::quant::qdq;

TEST(QuantSchedule, FastDivIsDivision) {
  std::mt19937 rng(7);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 2048; ++d) divisors.push_back(d);
  for (uint32_t d : {3000u, 4096u, 65535u, 65536u, 65537u, 1000003u, (1u << 30) - 1, 1u << 30, (1u << 30) + 1,
                     (1u << 31) - 1})
    divisors.push_back(d);
  for (int k = 0; k < 200; ++k) divisors.push_back(1 + rng() % ((1u << 31) - 1));
  for (uint32_t d : divisors) {
    const q::FastDiv f = q::FastDiv::of(d);
    std::vector<uint32_t> ns = {0u, 1u, d - 1, d, d + 1, 2 * d - 1, (1u << 31) - 1, (1u << 31) - 2};
    for (uint32_t m : {7u, 1000u, 65536u}) ns.push_back(static_cast<uint32_t>((static_cast<uint64_t>(d) * m - 1) % (1u << 31)));
    for (int k = 0; k < 300; ++k) ns.push_back(rng() % (1u << 31));
    for (uint32_t n : ns) {
      if (n >= (1u << 31)) continue;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
  // every n below 2^20 for a few divisors (the group counts of real tensors are in this range)
  for (uint32_t d : {1u, 3u, 48u, 128u, 144u, 255u, 256u})
    for (uint32_t n = 0; n < (1u << 20); ++n) ASSERT_EQ(q::FastDiv::of(d).div(n), n / d) << n << " / " << d;
}

TEST(QuantSchedule, GroupOffsetsOfAColumnPart) {
  const size_t rows = 37, cols = 48, ld = 48 * 5;
  const q::GroupLayout dense = q::GroupLayout::of(cols, cols), part = q::GroupLayout::of(cols, ld);
  EXPECT_TRUE(dense.dense);
  EXPECT_FALSE(part.dense);
  uint32_t g = 0;
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; c += 16, ++g) {
      EXPECT_EQ(dense.offset(g), r * cols + c);
      EXPECT_EQ(part.offset(g), r * ld + c) << "group " << g;
    }
}

namespace {

// The single-read kernel's walk (nvfp4_1x16_fused_kernel) on the host: per group, how often the
// first pass read it and the second quantized it; the shared-memory slots written; the order of
// each thread's second pass over what it did not keep.
struct Walk {
  std::vector<int> read, quantized;
  bool slots_ok = true, reverse_ok = true;
};

Walk walk(uint32_t groups, uint32_t blocks, uint32_t threads, uint32_t hold_cap, uint32_t words) {
  Walk w;
  w.read.assign(groups, 0);
  w.quantized.assign(groups, 0);
  for (uint32_t b = 0; b < blocks; ++b) {
    const q::FusedSplit s = q::FusedSplit::of(groups, blocks, b, hold_cap);
    std::vector<int> slot_used(static_cast<size_t>(hold_cap) * words + 1, 0);
    for (uint32_t t = 0; t < threads; ++t) {
      for (uint32_t j = t; j < s.hold; j += threads) {
        ++w.read[s.begin + j];
        for (uint32_t k = 0; k < words; ++k) {
          const uint32_t slot = q::held_slot(j, k, words, threads);
          if (slot >= static_cast<size_t>(hold_cap) * words || slot_used[slot]++) w.slots_ok = false;
        }
      }
      for (uint32_t j = s.hold + t; j < s.size(); j += threads) ++w.read[s.begin + j];
      uint32_t last = UINT32_MAX;
      for (uint32_t m = s.visits(s.hold, t, threads); m-- > 0;) {
        const uint32_t g = s.begin + s.hold + t + m * threads;
        if (g >= s.end || g >= last) w.reverse_ok = false;
        last = g;
        ++w.quantized[g];
      }
      for (uint32_t j = t; j < s.hold; j += threads) ++w.quantized[s.begin + j];
    }
  }
  return w;
}

}  // namespace

TEST(QuantSchedule, FusedSplitVisitsEveryGroupOnce) {
  struct Case {
    uint32_t groups, blocks, threads, hold_cap, words;
  };
  const Case cases[] = {
      {0, 1, 256, 0, 2},         {1, 1, 256, 256, 2},      {255, 1, 256, 256, 2},   {257, 2, 256, 256, 4},
      {1000, 7, 32, 64, 2},      {1000, 7, 32, 0, 2},      {4096, 660, 256, 1024, 2}, {98304, 660, 256, 1024, 2},
      {98304, 660, 256, 0, 4},   {123457, 396, 64, 128, 4}, {5, 660, 256, 1024, 2},  {65536, 3, 128, 65536, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.groups) + " groups, " + std::to_string(c.blocks) + " blocks of " +
                 std::to_string(c.threads) + ", hold " + std::to_string(c.hold_cap));
    const Walk w = walk(c.groups, c.blocks, c.threads, c.hold_cap, c.words);
    for (uint32_t g = 0; g < c.groups; ++g) {
      ASSERT_EQ(w.read[g], 1) << "group " << g;
      ASSERT_EQ(w.quantized[g], 1) << "group " << g;
    }
    EXPECT_TRUE(w.slots_ok);
    EXPECT_TRUE(w.reverse_ok);
  }
}

TEST(QuantSchedule, FusedSplitRunsAreContiguousAndHoldIsCapped) {
  const uint32_t groups = 1000, blocks = 7;
  uint32_t next = 0;
  for (uint32_t b = 0; b < blocks; ++b) {
    const q::FusedSplit s = q::FusedSplit::of(groups, blocks, b, 64);
    EXPECT_EQ(s.begin, next);
    EXPECT_EQ(s.size(), b + 1 < blocks ? 143u : 1000u - 6 * 143u);
    EXPECT_EQ(s.hold, 64u);
    next = s.end;
  }
  EXPECT_EQ(next, groups);
  EXPECT_EQ(q::FusedSplit::of(100, 7, 6, 64).hold, 100u - 6 * 15u);  // a short last run keeps all it has
  EXPECT_EQ(q::FusedSplit::of(3, 8, 5, 64).size(), 0u);              // blocks past the end take nothing
  EXPECT_EQ(q::held_slot(0, 0, 2, 256), 0u);
  EXPECT_EQ(q::held_slot(0, 1, 2, 256), 256u);
  EXPECT_EQ(q::held_slot(257, 1, 2, 256), 512u + 256u + 1u);
}
