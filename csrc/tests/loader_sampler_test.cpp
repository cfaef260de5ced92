// The window order: a seeded Fisher–Yates permutation per epoch (docs/data.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "loader/sampler.h"

using namespace parallax::loader;

TEST(LoaderSampler, SplitMix64MatchesTheReferenceGenerator) {
  // The first output of SplitMix64 from state 0 in Vigna's reference implementation.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFULL);
}

TEST(LoaderSampler, OrderMatchesTheDocumentedAlgorithm) {
  // Golden values from an independent Python implementation of docs/data.md.
  EXPECT_EQ(window_order(10, 0, 0), (std::vector<uint64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
  EXPECT_EQ(window_order(10, 0, 1), (std::vector<uint64_t>{2, 1, 8, 4, 9, 6, 5, 7, 3, 0}));
  EXPECT_EQ(window_order(10, 1234, 0), (std::vector<uint64_t>{9, 5, 7, 0, 1, 6, 2, 3, 8, 4}));
}

TEST(LoaderSampler, EveryEpochIsAPermutation) {
  for (uint64_t n : {1ULL, 2ULL, 7ULL, 1000ULL}) {
    for (uint64_t epoch : {0ULL, 1ULL, 5ULL}) {
      std::vector<uint64_t> order = window_order(n, 42, epoch);
      std::sort(order.begin(), order.end());
      std::vector<uint64_t> expected(n);
      std::iota(expected.begin(), expected.end(), 0ULL);
      EXPECT_EQ(order, expected) << "n=" << n << " epoch=" << epoch;
    }
  }
}

TEST(LoaderSampler, SameSeedSameOrderOtherSeedOrEpochDiffers) {
  EXPECT_EQ(window_order(500, 7, 0), window_order(500, 7, 0));
  EXPECT_NE(window_order(500, 7, 0), window_order(500, 8, 0));
  EXPECT_NE(window_order(500, 7, 0), window_order(500, 7, 1));
}

TEST(LoaderSampler, BelowIsUnbiasedOverManyDraws) {
  SplitMix64 rng(99);
  std::vector<int> counts(3, 0);
  const int draws = 300000;
  for (int i = 0; i < draws; ++i) counts[rng.below(3)] += 1;
  for (int c : counts) EXPECT_NEAR(c, draws / 3, 1500);  // > 5 standard deviations
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(rng.below(1), 0u);
}

TEST(LoaderSampler, DrawsCoverEveryWindowOncePerEpochAcrossTheBoundary) {
  const uint64_t n = 37;
  WindowSampler sampler(n, 3);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int> seen(n, 0);
    for (uint64_t d = 0; d < n; ++d) seen[sampler.window(epoch * n + d)] += 1;
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << "epoch " << epoch;
  }
  // Random access agrees with sequential access.
  WindowSampler other(n, 3);
  EXPECT_EQ(other.window(2 * n + 5), window_order(n, 3, 2)[5]);
  EXPECT_EQ(other.window(4), window_order(n, 3, 0)[4]);
}
