// measure_gemm against scripted libraries: capability gates, failing calls named, the layouts
// and scales handed to cuBLASLt, the choice among the heuristic's algorithms, the timing
// arithmetic, and that every resource is released.
#include <gtest/gtest.h>

#include <cstring>

#include "probe/gemm.h"
#include "probe/testing/fake_gpu.h"

namespace parallax {
namespace {

using testing::fake;
namespace lt = cublaslt;

constexpr size_t kWorkspace = size_t{32} << 20;

class GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::reset_fake();
    fake().current_context = caller_context();
  }
  static cuda::CUcontext caller_context() { return reinterpret_cast<cuda::CUcontext>(0xCA11); }
  LoadedApi<cuda::Api> driver() { return {&cuda_api_, "/fake/libcuda.so.1", ""}; }
  LoadedApi<lt::Api> cublaslt() { return {&lt_api_, "/fake/libcublasLt.so.13", ""}; }
  GemmResult run(const GemmRequest& r) { return measure_gemm(driver(), cublaslt(), r); }

  // Everything acquired was released and the caller's context is current again.
  static void expect_released() {
    EXPECT_TRUE(fake().live_allocations.empty());
    EXPECT_EQ(fake().live_events, 0);
    EXPECT_EQ(fake().live_streams, 0);
    EXPECT_EQ(fake().live_lt_objects, 0);
    EXPECT_EQ(fake().ctx_retains, fake().ctx_releases);
    EXPECT_EQ(fake().current_context, caller_context());
    EXPECT_EQ(fake().bad_copies, 0u);
  }

  cuda::Api cuda_api_ = testing::fake_cuda_api();
  lt::Api lt_api_ = testing::fake_cublaslt_api();
};

// Without tuning (tune_iters = 0): the heuristic's first algorithm, 2 warm-up calls at 9 ms,
// then the 5 timed calls.
TEST_F(GemmTest, Bf16TimesEachIterationAndReportsTheMedianAndTheBest) {
  fake().algo_times_ms = {{9.0f, 9.0f, 3.0f, 1.0f, 2.0f, 5.0f, 4.0f}};
  GemmResult r = run({0, "bf16", 256, 128, 64, 2, 5, 3, 0});
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.median_ms, 3.0);
  EXPECT_EQ(r.min_ms, 1.0);
  EXPECT_EQ(r.max_ms, 5.0);
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * 256 * 128 * 64);
  EXPECT_DOUBLE_EQ(*r.tflops, 2.0 * 256 * 128 * 64 / 3e-3 / 1e12);
  EXPECT_DOUBLE_EQ(*r.tflops_best, 2.0 * 256 * 128 * 64 / 1e-3 / 1e12);
  EXPECT_EQ(r.algo_count, 3);
  EXPECT_EQ(r.algo_index, 0);
  EXPECT_EQ(r.algos_tried, 0);
  EXPECT_TRUE(r.algo_trials.empty());
  EXPECT_EQ(r.tune_warmup, 3);
  EXPECT_EQ(r.tune_iters, 0);
  EXPECT_EQ(r.cublaslt_version, 131000);
  EXPECT_EQ(r.library, "/fake/libcublasLt.so.13");
  EXPECT_EQ(fake().matmul_calls, 7);  // 2 warmup + 5 timed
  EXPECT_EQ(fake().matmul_algos, std::vector<int>(7, 0));
  EXPECT_EQ(fake().elapsed_calls, 5);
  EXPECT_EQ(fake().workspace_preference, kWorkspace);
  // W [n,k] and X [m,k] bf16, D [m,n] bf16, the workspace.
  EXPECT_EQ(fake().allocation_sizes, (std::vector<size_t>{128 * 64 * 2, 256 * 64 * 2, 256 * 128 * 2, kWorkspace}));
  // TN: A = W (k×n, ld k) transposed, B = X (k×m, ld k), D column-major n×m.
  EXPECT_EQ(fake().desc_attributes[lt::CUBLASLT_MATMUL_DESC_TRANSA], lt::CUBLAS_OP_T);
  EXPECT_EQ(fake().desc_attributes[lt::CUBLASLT_MATMUL_DESC_TRANSB], lt::CUBLAS_OP_N);
  EXPECT_EQ(fake().desc_attributes.count(lt::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER), 0u);
  ASSERT_EQ(fake().layouts.size(), 3u);
  EXPECT_EQ(fake().layouts[0].type, lt::CUDA_R_16BF);
  EXPECT_EQ(fake().layouts[0].rows, 64u);
  EXPECT_EQ(fake().layouts[0].cols, 128u);
  EXPECT_EQ(fake().layouts[0].ld, 64);
  EXPECT_EQ(fake().layouts[1].rows, 64u);
  EXPECT_EQ(fake().layouts[1].cols, 256u);
  EXPECT_EQ(fake().layouts[2].type, lt::CUDA_R_16BF);
  EXPECT_EQ(fake().layouts[2].rows, 128u);
  EXPECT_EQ(fake().layouts[2].cols, 256u);
  EXPECT_EQ(fake().layouts[2].ld, 128);
  expect_released();
}

TEST_F(GemmTest, EvenIterationCountTakesTheMeanOfTheMiddleTwo) {
  fake().algo_times_ms = {{4.0f, 1.0f, 2.0f, 8.0f}};
  GemmResult r = run({0, "bf16", 64, 64, 64, 0, 4, 0, 0});
  EXPECT_EQ(r.median_ms, 3.0);
  EXPECT_EQ(fake().matmul_calls, 4);
}

// Three algorithms at 2, 1.25 and 1.75 ms: each is tuned (the first also carries the 2 warm-up
// calls), the second wins, then it alone is warmed up and timed.
TEST_F(GemmTest, TimesEveryOfferedAlgorithmAndMeasuresTheFastest) {
  fake().algo_times_ms = {{2.0f}, {1.25f}, {1.75f}};
  GemmResult r = run({0, "bf16", 256, 128, 64, 2, 4});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.algo_count, 3);
  EXPECT_EQ(r.algo_index, 1);
  EXPECT_EQ(r.algos_tried, 3);
  ASSERT_EQ(r.algo_trials.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.algo_trials[i].index, i);
    EXPECT_EQ(r.algo_trials[i].error, "");
  }
  EXPECT_EQ(r.algo_trials[0].median_ms, 2.0);
  EXPECT_EQ(r.algo_trials[1].median_ms, 1.25);
  EXPECT_EQ(r.algo_trials[2].median_ms, 1.75);
  EXPECT_EQ(r.median_ms, 1.25);
  EXPECT_EQ(r.min_ms, 1.25);
  EXPECT_DOUBLE_EQ(*r.tflops, 2.0 * 256 * 128 * 64 / 1.25e-3 / 1e12);
  EXPECT_EQ(r.tune_warmup, 3);
  EXPECT_EQ(r.tune_iters, 5);
  std::vector<int> expected(3 + 2 + 5, 0);           // algorithm 0: tune warm-up + warm-up + tune timed
  expected.insert(expected.end(), 3 + 5, 1);          // algorithm 1: tune warm-up + tune timed
  expected.insert(expected.end(), 3 + 5, 2);          // algorithm 2
  expected.insert(expected.end(), 2 + 4, 1);          // the winner: warm-up + timed
  EXPECT_EQ(fake().matmul_algos, expected);
  EXPECT_EQ(fake().elapsed_calls, 3 * 5 + 4);
  expect_released();
}

TEST_F(GemmTest, TuningSettingsAndTiesGoToTheHeuristicsEarlierPick) {
  fake().heuristic_count = 4;
  fake().algo_times_ms = {{3.0f}, {2.0f}, {3.0f}, {2.0f}};
  GemmResult r = run({0, "bf16", 64, 64, 64, 0, 1, 1, 3});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.algo_index, 1);
  EXPECT_EQ(r.algos_tried, 4);
  EXPECT_EQ(fake().matmul_calls, 4 * (1 + 3) + 1);
}

// The tuning median, not the mean: one slow call does not rule an algorithm out.
TEST_F(GemmTest, TuningComparesMedians) {
  fake().algo_times_ms = {{1.0f, 1.0f, 1.0f, 1.0f, 9.0f}, {1.5f}};
  fake().heuristic_count = 2;
  GemmResult r = run({0, "bf16", 64, 64, 64, 0, 1, 0, 5});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.algo_trials[0].median_ms, 1.0);
  EXPECT_EQ(r.algo_index, 0);
}

TEST_F(GemmTest, AlgorithmsThatCannotRunAreRecordedAndSkipped) {
  fake().heuristic_count = 4;
  fake().heuristic_states = {lt::CUBLAS_STATUS_NOT_SUPPORTED};
  fake().algo_matmul_results[1] = lt::CUBLAS_STATUS_NOT_SUPPORTED;
  fake().algo_times_ms = {{0.5f}, {0.5f}, {2.0f}, {1.5f}};
  GemmResult r = run({0, "bf16", 64, 64, 64, 2, 3});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.algo_index, 3);
  EXPECT_EQ(r.algos_tried, 4);
  EXPECT_EQ(r.algo_trials[0].error,
            "cublasLtMatmulAlgoGetHeuristic (this algorithm) failed: CUBLAS_STATUS_NOT_SUPPORTED (the functionality "
            "requested is not supported)");
  EXPECT_EQ(r.algo_trials[0].median_ms, std::nullopt);
  EXPECT_EQ(r.algo_trials[1].error,
            "cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)");
  EXPECT_EQ(r.algo_trials[1].median_ms, std::nullopt);
  EXPECT_EQ(r.algo_trials[2].median_ms, 2.0);
  EXPECT_EQ(r.algo_trials[3].median_ms, 1.5);
  EXPECT_EQ(r.median_ms, 1.5);
  // Algorithm 0 is never called; algorithm 2, the first that ran, carried the warm-up.
  std::vector<int> expected(3 + 2 + 5, 2);
  expected.insert(expected.end(), 3 + 5 + 2 + 3, 3);
  EXPECT_EQ(fake().matmul_algos, expected);
  expect_released();
}

TEST_F(GemmTest, WithoutTuningAFirstAlgorithmTheHeuristicMarkedUnusableIsAnError) {
  fake().heuristic_states = {lt::CUBLAS_STATUS_NOT_SUPPORTED};
  GemmResult r = run({0, "bf16", 64, 64, 64, 1, 1, 0, 0});
  EXPECT_EQ(r.error,
            "cublasLtMatmulAlgoGetHeuristic (this algorithm) failed: CUBLAS_STATUS_NOT_SUPPORTED (the functionality "
            "requested is not supported)");
  EXPECT_EQ(fake().matmul_calls, 0);
  expect_released();
}

TEST_F(GemmTest, ACudaFailureWhileTuningEndsTheMeasurement) {
  fake().event_record_result = 400;
  GemmResult r = run({0, "bf16", 64, 64, 64, 1, 1});
  EXPECT_EQ(r.error, "cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE (invalid resource handle)");
  EXPECT_EQ(r.algos_tried, 1);
  EXPECT_EQ(r.algo_index, std::nullopt);
  EXPECT_EQ(r.median_ms, std::nullopt);
  expect_released();
}

TEST_F(GemmTest, Fp8UsesE4M3OperandsWithUnitTensorScales) {
  GemmResult r = run({0, "fp8", 256, 128, 64, 1, 2});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(fake().layouts[0].type, lt::CUDA_R_8F_E4M3);
  EXPECT_EQ(fake().layouts[1].type, lt::CUDA_R_8F_E4M3);
  EXPECT_EQ(fake().layouts[2].type, lt::CUDA_R_16BF);
  EXPECT_EQ(fake().allocation_sizes,
            (std::vector<size_t>{128 * 64, 256 * 64, 256 * 128 * 2, kWorkspace, sizeof(float)}));
  const auto a_scale = static_cast<cuda::CUdeviceptr>(fake().desc_attributes[lt::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER]);
  const auto b_scale = static_cast<cuda::CUdeviceptr>(fake().desc_attributes[lt::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER]);
  EXPECT_EQ(a_scale, b_scale);
  ASSERT_EQ(fake().uploads[a_scale].size(), sizeof(float));
  float scale = 0;
  std::memcpy(&scale, fake().uploads[a_scale].data(), sizeof scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(fake().desc_attributes.count(lt::CUBLASLT_MATMUL_DESC_A_SCALE_MODE), 0u);
  expect_released();
}

TEST_F(GemmTest, Nvfp4OnBlackwellUsesE2M1WithVec16BlockScales) {
  fake().cuda_devices[0].cc_major = 10;
  GemmResult r = run({0, "nvfp4", 256, 192, 64, 1, 2});
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(fake().layouts[0].type, lt::CUDA_R_4F_E2M1);
  EXPECT_EQ(fake().layouts[1].type, lt::CUDA_R_4F_E2M1);
  EXPECT_EQ(fake().desc_attributes[lt::CUBLASLT_MATMUL_DESC_A_SCALE_MODE], lt::CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3);
  EXPECT_EQ(fake().desc_attributes[lt::CUBLASLT_MATMUL_DESC_B_SCALE_MODE], lt::CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3);
  // Two E2M1 values a byte; scales padded to 128-row × 4-block atoms: W has 192 -> 256 rows,
  // X 256 rows, each 64/16 = 4 blocks.
  EXPECT_EQ(fake().allocation_sizes,
            (std::vector<size_t>{192 * 64 / 2, 256 * 64 / 2, 256 * 192 * 2, kWorkspace, 256 * 4, 256 * 4}));
  const auto a_scale = static_cast<cuda::CUdeviceptr>(fake().desc_attributes[lt::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER]);
  ASSERT_EQ(fake().live_allocations.size(), 0u);
  ASSERT_EQ(fake().uploads[a_scale].size(), 256u * 4);
  for (unsigned char s : fake().uploads[a_scale]) {
    EXPECT_EQ(s & 0x80, 0);      // unsigned
    EXPECT_NE(s & 0x78, 0);      // not zero or subnormal
    EXPECT_NE(s & 0x7F, 0x7F);   // not NaN
  }
  expect_released();
}

TEST_F(GemmTest, Nvfp4OnHopperIsRefusedWithoutTouchingTheGpu) {
  GemmResult r = measure_gemm(driver(), {nullptr, "", "cuBLASLt absent"}, {0, "nvfp4", 8192, 8192, 8192, 10, 50});
  EXPECT_EQ(r.error, "nvfp4 GEMMs need compute capability 10.0+ (Blackwell); this GPU is 9.0");
  EXPECT_EQ(fake().gpu_calls, 0);
  EXPECT_EQ(r.median_ms, std::nullopt);
  EXPECT_EQ(r.tflops, std::nullopt);
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * 8192 * 8192 * 8192);
}

TEST_F(GemmTest, Fp8OnAmpereIsRefused) {
  fake().cuda_devices[0].cc_major = 8;
  GemmResult r = run({0, "fp8", 64, 64, 64, 1, 1});
  EXPECT_EQ(r.error, "fp8 GEMMs need compute capability 8.9+ (Ada or Hopper); this GPU is 8.0");
  EXPECT_EQ(fake().gpu_calls, 0);
}

TEST_F(GemmTest, Fp8OnAdaIsAllowed) {
  fake().cuda_devices[0].cc_major = 8;
  fake().cuda_devices[0].cc_minor = 9;
  EXPECT_EQ(run({0, "fp8", 64, 64, 64, 1, 1}).error, "");
}

TEST_F(GemmTest, BadRequestsAreRefusedBeforeAnyLibraryIsAsked) {
  LoadedApi<cuda::Api> none{nullptr, "", "driver absent"};
  LoadedApi<lt::Api> no_lt{nullptr, "", "cuBLASLt absent"};
  EXPECT_EQ(measure_gemm(none, no_lt, {0, "fp16", 64, 64, 64, 1, 1}).error,
            "unknown precision 'fp16'; choose one of: bf16, fp8, nvfp4");
  EXPECT_EQ(measure_gemm(none, no_lt, {0, "bf16", 64, 0, 64, 1, 1}).error,
            "GEMM dimensions must be positive, got m=64 n=0 k=64");
  EXPECT_EQ(measure_gemm(none, no_lt, {0, "bf16", 64, 64, 64, 1, 0}).error, "iters must be at least 1, got 0");
  EXPECT_EQ(measure_gemm(none, no_lt, {0, "bf16", 64, 64, 64, -1, 1}).error, "warmup must not be negative, got -1");
  EXPECT_EQ(measure_gemm(none, no_lt, {0, "bf16", 64, 64, 64, 1, 1, 3, -1}).error,
            "tune_iters must not be negative, got -1");
  EXPECT_EQ(measure_gemm(none, no_lt, {0, "bf16", 64, 64, 64, 1, 1, -2, 5}).error,
            "tune_warmup must not be negative, got -2");
  EXPECT_EQ(measure_gemm(none, no_lt, {0, "bf16", 64, 64, 64, 1, 1, 3, 5, -1}).error,
            "rest_ms must not be negative, got -1");
}

TEST_F(GemmTest, MissingLibrariesAreReportedByTheLoadersWords) {
  LoadedApi<cuda::Api> none{nullptr, "", "could not load libcuda.so.1: not found"};
  EXPECT_EQ(measure_gemm(none, cublaslt(), {0, "bf16", 64, 64, 64, 1, 1}).error,
            "could not load libcuda.so.1: not found");
  GemmResult r = measure_gemm(driver(), {nullptr, "", "could not load libcublasLt.so.13: not found"},
                              {0, "bf16", 64, 64, 64, 1, 1});
  EXPECT_EQ(r.error, "could not load libcublasLt.so.13: not found");
  EXPECT_EQ(r.library, "");
  EXPECT_EQ(fake().gpu_calls, 0);
}

TEST_F(GemmTest, FailingCallsAreNamedAndEverythingIsReleased) {
  fake().alloc_result = cuda::CUDA_ERROR_OUT_OF_MEMORY;
  EXPECT_EQ(run({0, "bf16", 64, 64, 64, 1, 1}).error, "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  expect_released();

  testing::reset_fake();
  fake().current_context = caller_context();
  fake().matmul_result = lt::CUBLAS_STATUS_NOT_SUPPORTED;
  GemmResult r = run({0, "bf16", 64, 64, 64, 1, 1});
  EXPECT_EQ(r.error,
            "every algorithm the heuristic offered failed; algorithm 0: cublasLtMatmul failed: "
            "CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)");
  EXPECT_EQ(r.median_ms, std::nullopt);
  EXPECT_EQ(r.algo_count, 3);
  EXPECT_EQ(r.algos_tried, 3);
  EXPECT_EQ(r.algo_index, std::nullopt);
  expect_released();

  // Untuned, the first algorithm's failure is the measurement's.
  testing::reset_fake();
  fake().current_context = caller_context();
  fake().matmul_result = lt::CUBLAS_STATUS_NOT_SUPPORTED;
  EXPECT_EQ(run({0, "bf16", 64, 64, 64, 1, 1, 3, 0}).error,
            "cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)");
  expect_released();

  testing::reset_fake();
  fake().current_context = caller_context();
  fake().heuristic_count = 0;
  EXPECT_EQ(run({0, "bf16", 64, 64, 64, 1, 1}).error,
            "cublasLtMatmulAlgoGetHeuristic failed: CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not "
            "supported)");
  expect_released();
}

TEST_F(GemmTest, DriverFailuresBeforeTheGpuIsUsed) {
  EXPECT_EQ(run({3, "bf16", 64, 64, 64, 1, 1}).error, "cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)");
  fake().init_result = cuda::CUDA_ERROR_NO_DEVICE;
  EXPECT_EQ(run({0, "bf16", 64, 64, 64, 1, 1}).error, "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
  EXPECT_EQ(fake().gpu_calls, 0);
}

TEST_F(GemmTest, ZeroEventTimeIsAnErrorNotAnInfiniteThroughput) {
  fake().algo_times_ms = {{0.0f}};
  fake().heuristic_count = 1;
  GemmResult r = run({0, "bf16", 64, 64, 64, 0, 1});
  EXPECT_EQ(r.error, "CUDA events timed the GEMM at 0.000000 ms; no throughput can follow");
  EXPECT_EQ(r.tflops, std::nullopt);
  EXPECT_EQ(r.tflops_best, std::nullopt);
}

TEST(GemmTimes, SummaryOfOddAndEvenCounts) {
  TimeSummary odd = summarize_times({5, 1, 3});
  EXPECT_EQ(odd.median, 3);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.max, 5);
  EXPECT_EQ(summarize_times({2, 1}).median, 1.5);
  EXPECT_EQ(summarize_times({7}).median, 7);
}

}  // namespace
}  // namespace parallax
