// Rank slicing of the prefetching loader: rank r of W ranks of batch B gets rows [r*B, (r+1)*B)
// of the global batch that one loader of batch B*W gives, batch after batch and across epochs.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "loader/batch_loader.h"
#include "loader_test_util.h"

using namespace parallax::loader;
using namespace parallax::loader::testing_util;

namespace {

constexpr uint64_t kSeq = 16;

LoaderOptions options(uint64_t batch, uint64_t rank = 0, uint64_t world = 1) {
  LoaderOptions o;
  o.batch_size = batch;
  o.seq_len = kSeq;
  o.seed = 3;
  o.rank = rank;
  o.world = world;
  o.pin = false;
  return o;
}

std::vector<int32_t> contents(const Batch& b, uint64_t rows) { return {b.data(), b.data() + rows * (kSeq + 1)}; }

// The global batches of a one-rank loader, and each rank's batches concatenated in rank order.
void expect_slices_tile_the_global_batch(const TempTokenFile& f, uint64_t per_rank, uint64_t world,
                                         uint64_t batches, uint64_t start_batch = 0) {
  LoaderOptions whole = options(per_rank * world);
  whole.start_batch = start_batch;
  BatchLoader global(f.path, whole);
  std::vector<std::unique_ptr<BatchLoader>> ranks;
  for (uint64_t r = 0; r < world; ++r) {
    LoaderOptions o = options(per_rank, r, world);
    o.start_batch = start_batch;
    ranks.push_back(std::make_unique<BatchLoader>(f.path, o));
  }
  for (uint64_t k = 0; k < batches; ++k) {
    std::vector<int32_t> expected = contents(global.next(), per_rank * world), joined;
    for (auto& rank : ranks) {
      Batch b = rank->next();
      EXPECT_EQ(b.index(), start_batch + k);
      std::vector<int32_t> part = contents(b, per_rank);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, expected) << "global batch " << start_batch + k << " of " << world << " ranks";
  }
}

}  // namespace

TEST(LoaderSlice, TwoRanksTileTheGlobalBatchAcrossEpochs) {
  TempTokenFile f("slice_two.bin", packed_documents(16 * 10 + 1, 0, 1000));  // 10 windows
  expect_slices_tile_the_global_batch(f, 2, 2, 9);  // 36 draws: epochs change inside batches
}

TEST(LoaderSlice, ThreeRanksAndAResumedStartAgreeWithOneLoader) {
  TempTokenFile f("slice_three.bin", packed_documents(5000, 0, 1000));
  expect_slices_tile_the_global_batch(f, 3, 3, 6);
  expect_slices_tile_the_global_batch(f, 1, 3, 4, /*start_batch=*/5);
}

TEST(LoaderSlice, OneRankOfOneIsTheUnslicedLoader) {
  TempTokenFile f("slice_one.bin", packed_documents(5000, 0, 1000));
  BatchLoader plain(f.path, options(4)), sliced(f.path, options(4, 0, 1));
  for (int k = 0; k < 5; ++k) EXPECT_EQ(contents(plain.next(), 4), contents(sliced.next(), 4));
}

TEST(LoaderSlice, ARankOutsideTheWorldIsAnError) {
  TempTokenFile f("slice_bad.bin", packed_documents(5000, 0, 1000));
  EXPECT_THROW(BatchLoader(f.path, options(2, 2, 2)), LoaderError);
  EXPECT_THROW(BatchLoader(f.path, options(2, 0, 0)), LoaderError);
}
