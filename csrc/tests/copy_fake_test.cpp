// measure_copy against a scripted driver: the bandwidth arithmetic (2 x bytes over the median
// copy, and over the fastest), the warm-up copies left untimed, failing calls named, and every
// resource released with the caller's context current again.
#include <gtest/gtest.h>

#include "probe/copy_bandwidth.h"
#include "probe/testing/fake_gpu.h"

namespace parallax {
namespace {

using testing::fake;

class CopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::reset_fake();
    fake().current_context = caller_context();
  }
  static cuda::CUcontext caller_context() { return reinterpret_cast<cuda::CUcontext>(0xCA11); }
  CopyResult run(const CopyRequest& r) { return measure_copy({&api_, "/fake/libcuda.so.1", ""}, r); }
  static void expect_released() {
    EXPECT_TRUE(fake().live_allocations.empty());
    EXPECT_EQ(fake().live_events, 0);
    EXPECT_EQ(fake().live_streams, 0);
    EXPECT_EQ(fake().ctx_retains, fake().ctx_releases);
    EXPECT_EQ(fake().current_context, caller_context());
    EXPECT_EQ(fake().bad_copies, 0u);
  }
  cuda::Api api_ = testing::fake_cuda_api();
};

TEST_F(CopyTest, BandwidthIsTwiceTheBytesOverTheMedianCopy) {
  // 2 warm-up copies (9 ms each, untimed), then 5 timed: 1.0, 0.8, 1.2, 0.9, 1.1 ms
  fake().copy_times_ms = {9, 9, 1.0f, 0.8f, 1.2f, 0.9f, 1.1f};
  const int64_t bytes = int64_t{2} << 30;
  CopyResult r = run({0, bytes, 2, 5});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(fake().copy_sizes, std::vector<size_t>(7, static_cast<size_t>(bytes)));
  EXPECT_EQ(fake().allocation_sizes, std::vector<size_t>(2, static_cast<size_t>(bytes)));
  EXPECT_NEAR(*r.median_ms, 1.0, 1e-6);
  EXPECT_NEAR(*r.min_ms, 0.8, 1e-6);
  EXPECT_NEAR(*r.max_ms, 1.2, 1e-6);
  EXPECT_NEAR(*r.bytes_per_s, 2.0 * 2147483648.0 / 1e-3, 1e6);      // 4.295 TB/s
  EXPECT_NEAR(*r.bytes_per_s_best, 2.0 * 2147483648.0 / 0.8e-3, 1e6);  // 5.369 TB/s
  EXPECT_EQ(fake().elapsed_calls, 5);
  expect_released();
}

TEST_F(CopyTest, ArithmeticOfOneCopy) {
  EXPECT_DOUBLE_EQ(copy_bytes_per_s(1'000'000'000, 0.5), 4e12);  // 1 GB read + 1 GB written in 0.5 ms
}

TEST_F(CopyTest, BadRequestsAndFailingCallsAreNamed) {
  EXPECT_EQ(run({0, 0, 1, 5}).error, "copy size must be positive, got 0 bytes");
  EXPECT_EQ(run({0, 1024, 1, 0}).error, "iters must be at least 1, got 0");
  EXPECT_EQ(fake().gpu_calls, 0);  // refused before touching the GPU
  fake().alloc_result = cuda::CUDA_ERROR_OUT_OF_MEMORY;
  EXPECT_EQ(run({0, 1024, 1, 5}).error, "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  expect_released();
  testing::reset_fake();
  fake().current_context = caller_context();
  EXPECT_EQ(run({7, 1024, 1, 5}).error, "cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)");
  CopyResult none = measure_copy({nullptr, "", "libcuda.so.1: not found"}, {0, 1024, 1, 5});
  EXPECT_EQ(none.error, "libcuda.so.1: not found");
  EXPECT_FALSE(none.bytes_per_s.has_value());
}

}  // namespace
}  // namespace parallax
