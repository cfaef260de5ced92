// Page-locking of ring slots and the driver's own check of it (HostPinner::page_locked).
// On a machine without the CUDA driver only the pageable answers run; where the driver and a
// GPU are present the same test pins a buffer and asks the driver about it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "loader/batch_loader.h"
#include "loader/pinned.h"
#include "loader_test_util.h"

using namespace parallax::loader;
using namespace parallax::loader::testing_util;

namespace {

constexpr size_t kPage = 4096;

struct PageBuffer {
  explicit PageBuffer(size_t bytes) : bytes(bytes), data(std::aligned_alloc(kPage, bytes)) {}
  ~PageBuffer() { std::free(data); }
  size_t bytes;
  void* data;
};

}  // namespace

TEST(LoaderPinned, DisabledPinnerPinsNothingAndReportsNothingPageLocked) {
  HostPinner pinner(false);
  PageBuffer buffer(2 * kPage);
  EXPECT_FALSE(pinner.available());
  EXPECT_EQ(pinner.status(), "pageable (pinning disabled)");
  EXPECT_FALSE(pinner.pin(buffer.data, buffer.bytes));
  EXPECT_FALSE(pinner.page_locked(buffer.data, buffer.bytes));
}

TEST(LoaderPinned, TheDriverSeesARegisteredRangeAsPageLockedAndAPageableOneNot) {
  HostPinner pinner(true);
  PageBuffer buffer(3 * kPage);
  std::vector<char> pageable(3 * kPage);
  EXPECT_FALSE(pinner.page_locked(pageable.data(), pageable.size()));
  EXPECT_FALSE(pinner.page_locked(nullptr, kPage));
  if (!pinner.available()) {
    EXPECT_EQ(pinner.status().rfind("pageable (", 0), 0u) << pinner.status();
    EXPECT_FALSE(pinner.page_locked(buffer.data, buffer.bytes));
    GTEST_SKIP() << "no CUDA driver or GPU here: " << pinner.status();
  }
  ASSERT_TRUE(pinner.pin(buffer.data, buffer.bytes)) << pinner.status();
  EXPECT_TRUE(pinner.page_locked(buffer.data, buffer.bytes));
  EXPECT_TRUE(pinner.page_locked(static_cast<char*>(buffer.data) + kPage, kPage));  // an interior range
  EXPECT_FALSE(pinner.page_locked(buffer.data, buffer.bytes + kPage));  // runs past the registration
  pinner.unpin(buffer.data);
  EXPECT_FALSE(pinner.page_locked(buffer.data, buffer.bytes));
}

TEST(LoaderPinned, AnUnpinnedRingHasNoVerifiedSlots) {
  TempTokenFile file("pinned.bin", packed_documents(4096, 0, 1000));
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 16;
  o.pin = false;
  BatchLoader loader(file.path, o);
  Batch batch = loader.next();
  EXPECT_FALSE(loader.page_locked(batch.data(), o.batch_size * (o.seq_len + 1) * sizeof(int32_t)));
  LoaderInfo info = loader.info();
  EXPECT_EQ(info.pinned_slots, 0u);
  EXPECT_EQ(info.verified_slots, 0u);
  loader.close();
}
