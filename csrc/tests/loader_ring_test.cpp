// The prefetching loader: batch contents, slot reuse and protection, growth, shutdown, errors.
#include <gtest/gtest.h>

#include <chrono>
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "loader/batch_loader.h"
#include "loader_test_util.h"

using namespace parallax::loader;
using namespace parallax::loader::testing_util;

namespace {

constexpr uint64_t kBatch = 4, kSeq = 16;

LoaderOptions options(uint64_t seed = 11) {
  LoaderOptions o;
  o.batch_size = kBatch;
  o.seq_len = kSeq;
  o.seed = seed;
  o.pin = false;  // the CPU test machine; pinning is checked on the GPU (tests/gpu)
  return o;
}

// Batch k computed directly from the documented algorithm.
std::vector<int32_t> expected_batch(const TempTokenFile& f, uint64_t seed, uint64_t k) {
  const uint64_t n = (f.tokens.size() - 1) / kSeq;
  std::vector<int32_t> out;
  for (uint64_t i = 0; i < kBatch; ++i) {
    const uint64_t draw = k * kBatch + i;
    const uint64_t w = window_order(n, seed, draw / n)[draw % n];
    for (uint64_t t = 0; t <= kSeq; ++t) out.push_back(f.tokens[w * kSeq + t]);
  }
  return out;
}

std::vector<int32_t> contents(const Batch& b) { return {b.data(), b.data() + kBatch * (kSeq + 1)}; }

}  // namespace

TEST(LoaderRing, BatchesFollowTheSamplerAcrossEpochs) {
  TempTokenFile f("ring_order.bin", packed_documents(16 * 10 + 1, 0, 1000));  // 10 windows
  BatchLoader loader(f.path, options());
  for (uint64_t k = 0; k < 8; ++k) {  // 32 draws: three epochs of 10 windows, batches span them
    Batch b = loader.next();
    EXPECT_EQ(b.index(), k);
    EXPECT_EQ(contents(b), expected_batch(f, 11, k)) << "batch " << k;
  }
}

TEST(LoaderRing, TwoLoadersWithOneSeedAgreeAndStartBatchResumes) {
  TempTokenFile f("ring_seed.bin", packed_documents(3000, 0, 1000));
  BatchLoader a(f.path, options(5)), b(f.path, options(5)), c(f.path, options(6));
  LoaderOptions resumed = options(5);
  resumed.start_batch = 3;
  BatchLoader r(f.path, resumed);
  std::vector<std::vector<int32_t>> from_a;
  bool differs = false;
  for (int k = 0; k < 6; ++k) {
    from_a.push_back(contents(a.next()));
    EXPECT_EQ(from_a.back(), contents(b.next()));
    differs = differs || from_a.back() != contents(c.next());
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(contents(r.next()), from_a[3]);
  EXPECT_EQ(contents(r.next()), from_a[4]);
}

TEST(LoaderRing, SlotsAreReusedAndADroppedBatchSurvivesTheNextDraw) {
  TempTokenFile f("ring_reuse.bin", packed_documents(5000, 0, 1000));
  BatchLoader loader(f.path, options());
  std::vector<size_t> slots_used;
  const int32_t* previous = nullptr;
  std::vector<int32_t> previous_contents;
  for (uint64_t k = 0; k < 40; ++k) {
    Batch b = loader.next();  // batch k - 1 was dropped already: only the draw rule protects it
    slots_used.push_back(b.slot());
    EXPECT_EQ(contents(b), expected_batch(f, 11, k));
    if (previous != nullptr) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // let the thread refill what it may
      EXPECT_EQ(std::vector<int32_t>(previous, previous + previous_contents.size()), previous_contents)
          << "batch " << k - 1 << " was overwritten before batch " << k + 1 << " was drawn";
    }
    previous = b.data();
    previous_contents = contents(b);
  }
  LoaderInfo info = loader.info();
  EXPECT_EQ(info.slots, 4u);  // never grew
  EXPECT_EQ(info.batches_taken, 40u);
  EXPECT_EQ(info.pinned_slots, 0u);
  EXPECT_EQ(info.pin_status, "pageable (pinning disabled)");
  std::vector<int> uses(4, 0);
  for (size_t s : slots_used) uses.at(s) += 1;
  EXPECT_EQ(uses, (std::vector<int>{10, 10, 10, 10}));  // a ring: each slot every fourth batch
}

TEST(LoaderRing, HoldingMoreBatchesThanSlotsGrowsTheRingInsteadOfBlocking) {
  TempTokenFile f("ring_grow.bin", packed_documents(5000, 0, 1000));
  BatchLoader loader(f.path, options());
  std::vector<Batch> kept;
  for (uint64_t k = 0; k < 9; ++k) kept.push_back(loader.next());
  EXPECT_GE(loader.info().slots, 9u);
  for (uint64_t k = 0; k < 9; ++k) EXPECT_EQ(contents(kept[k]), expected_batch(f, 11, k)) << k;
}

TEST(LoaderRing, CloseStopsTheThreadAndBatchesOutliveTheLoader) {
  TempTokenFile f("ring_close.bin", packed_documents(5000, 0, 1000));
  std::vector<int32_t> data;
  std::unique_ptr<Batch> survivor;
  {
    BatchLoader loader(f.path, options());
    survivor = std::make_unique<Batch>(loader.next());
    data = contents(*survivor);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the thread now waits on a full ring
    loader.close();
    EXPECT_TRUE(loader.closed());
    EXPECT_THROW(loader.next(), LoaderError);
    loader.close();  // idempotent
  }
  EXPECT_EQ(contents(*survivor), data);
  survivor.reset();  // releasing after the loader is gone is safe
}

TEST(LoaderRing, ADamagedTokenReachesTheConsumerAfterTheGoodBatches) {
  std::vector<uint16_t> tokens(16 * 4 + 1, 7);  // 4 windows: batch 0 is every window
  tokens[40] = 5000;                               // in window 2, beyond vocab 1000
  TempTokenFile f("ring_error.bin", tokens, 1000, 0);
  BatchLoader loader(f.path, options());
  try {
    loader.next();
    FAIL() << "expected a LoaderError";
  } catch (const LoaderError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 5000 at position 40"), std::string::npos) << e.what();
  }
}

TEST(LoaderRing, BadArgumentsAndTooShortFilesAreErrors) {
  TempTokenFile f("ring_args.bin", std::vector<uint16_t>(10, 1));
  LoaderOptions o = options();
  EXPECT_THROW(BatchLoader(f.path, o), LoaderError);  // 10 tokens hold no window of 17
  o.seq_len = 4;
  o.slots = 2;
  EXPECT_THROW(BatchLoader(f.path, o), LoaderError);
  o.slots = 4;
  o.batch_size = 0;
  EXPECT_THROW(BatchLoader(f.path, o), LoaderError);
}
