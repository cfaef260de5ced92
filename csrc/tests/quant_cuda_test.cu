// The CUDA quantization kernels (quant/quant_cuda.h) against the CPU implementation
// (quant/qdq_cpu.h) bit for bit: NVFP4 1x16 and 16x16, RNE and stochastic rounding with the
// same seed, with and without the Hadamard transform, float32 and bfloat16, codes, scales and
// {amax, s_global}; the Hadamard transform alone; FP8 E4M3/E5M2; argument errors. Compiled
// only where CUDA is (csrc/tests/CMakeLists.txt); every test skips when no GPU answers.
// Hadamard outputs compare NaN as NaN (the CPU keeps an input NaN's payload); everything
// else, NaN included, compares bits.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "quant/qdq_cpu.h"
#include "quant/qdq_math.h"
#include "quant/quant_cuda.h"
#include "quant_test_inputs.h"

using namespace parallax::quant;
namespace t = parallax::quant::testing;

namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}


// A device buffer of n bytes, freed at scope exit.
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t n) { EXPECT_EQ(cudaMalloc(&p, n ? n : 16), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

template <typename T>
std::vector<T> fetch(const Dev& d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d.p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// The input as bytes of the dtype (bf16: the float32 values rounded).
std::vector<uint8_t> as_dtype(const std::vector<float>& x, QdqDtype dt) {
  std::vector<uint8_t> b(x.size() * (dt == QdqDtype::kF32 ? 4 : 2));
  if (dt == QdqDtype::kF32) {
    std::memcpy(b.data(), x.data(), b.size());
  } else {
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t h = qdq::f32_to_bf16(x[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

size_t count_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

// Elements (of 2 or 4 bytes) that differ, NaN equal to NaN when nan_as_nan.
size_t count_diff_values(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, QdqDtype dt, bool nan_as_nan) {
  const size_t w = dt == QdqDtype::kF32 ? 4 : 2, n = a.size() / w;
  size_t d = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t x = 0, y = 0;
    std::memcpy(&x, a.data() + i * w, w);
    std::memcpy(&y, b.data() + i * w, w);
    if (x == y) continue;
    if (nan_as_nan) {
      const float fx = w == 4 ? t::bits_float(x) : qdq::bf16_to_f32(static_cast<uint16_t>(x));
      const float fy = w == 4 ? t::bits_float(y) : qdq::bf16_to_f32(static_cast<uint16_t>(y));
      if (std::isnan(fx) && std::isnan(fy)) continue;
    }
    ++d;
  }
  return d;
}

void check_nvfp4(const std::vector<float>& x, size_t rows, size_t cols, QdqDtype dt, bool tile, bool sr, bool rht,
                 cudaStream_t stream) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (dt == QdqDtype::kBF16 ? " bf16" : " f32") +
               (tile ? " 16x16" : " 1x16") + (sr ? " SR" : " RNE") + (rht ? " RHT" : ""));
  const uint64_t seed = 20251130, rht_seed = 77;
  const size_t n = rows * cols, w = dt == QdqDtype::kF32 ? 4 : 2;
  const size_t ns = (tile ? rows / 16 : rows) * (cols / 16);
  const std::vector<uint8_t> in = as_dtype(x, dt);
  std::vector<uint8_t> y_ref(n * w), c_ref(n / 2), s_ref(ns);
  float ws_ref[2];
  nvfp4_qdq_cpu(in.data(), dt, y_ref.data(), c_ref.data(), s_ref.data(), ws_ref, rows, cols, tile, sr, seed, rht,
                rht_seed);

  Dev dx(n * w), dy(n * w), dc(n / 2), ds(ns), dws(8);
  ASSERT_EQ(cudaMemcpy(dx.p, in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
  const int st = px_nvfp4_qdq_cuda(dx.p, static_cast<int>(dt), dy.p, dc.as<uint8_t>(), ds.as<uint8_t>(),
                                   dws.as<float>(), rows, cols, tile, sr, seed, rht, rht_seed,
                                   reinterpret_cast<CUstream_st*>(stream));
  ASSERT_EQ(st, kPxQuantOk) << px_quant_cuda_error_message();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<float> ws = fetch<float>(dws, 2);
  EXPECT_EQ(t::float_bits(ws[0]), t::float_bits(ws_ref[0])) << "amax";
  EXPECT_EQ(t::float_bits(ws[1]), t::float_bits(ws_ref[1])) << "s_global";
  EXPECT_EQ(count_diff(fetch<uint8_t>(ds, ns), s_ref), 0u) << "scales";
  EXPECT_EQ(count_diff(fetch<uint8_t>(dc, n / 2), c_ref), 0u) << "codes";
  EXPECT_EQ(count_diff_values(fetch<uint8_t>(dy, n * w), y_ref, dt, false), 0u) << "dequantized values";
}

class QuantCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA GPU answers (cudaGetDeviceCount)";
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

}  // namespace

TEST_F(QuantCuda, Nvfp4MatchesTheCpuOnEdgeMatrices) {
  const std::vector<std::vector<float>> inputs = {t::edge_matrix(64, 256, 1), t::tiny_matrix(64, 256, 2),
                                                  std::vector<float>(64 * 256, 0.0f), t::edge_matrix(64, 256, 3, false)};
  for (const auto& x : inputs)
    for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
      for (int v = 0; v < 8; ++v) check_nvfp4(x, 64, 256, dt, v & 1, v & 2, v & 4, stream_);
}

TEST_F(QuantCuda, Nvfp4OddShapesAndGridStride) {
  // 1x16 with a group count that is not a multiple of a warp's 16, and a tensor large enough
  // that every warp loops (more warp iterations than the grid has warps).
  check_nvfp4(t::edge_matrix(3, 16 * 5, 4), 3, 80, QdqDtype::kBF16, false, true, false, stream_);
  check_nvfp4(t::edge_matrix(17, 48, 5), 17, 48, QdqDtype::kF32, false, false, true, stream_);
  check_nvfp4(t::edge_matrix(2048, 4096, 6), 2048, 4096, QdqDtype::kBF16, false, false, false, stream_);
  check_nvfp4(t::edge_matrix(1024, 2048, 7), 1024, 2048, QdqDtype::kF32, true, true, true, stream_);
  // 16x16 with an odd number of tiles per band (a warp's second tile missing), every variant;
  // and a 16x16 tensor large enough that every warp takes several tile pairs.
  for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
    for (int v = 0; v < 8; ++v) check_nvfp4(t::edge_matrix(48, 80, 11), 48, 80, dt, true, v & 2, v & 4, stream_);
  check_nvfp4(t::edge_matrix(2048, 4096, 12), 2048, 4096, QdqDtype::kBF16, true, false, false, stream_);
}

TEST_F(QuantCuda, Nvfp4SmallTensorsTakeTheGenericAndFastPaths) {
  // amax ~2^-100 (normal): s_global ~2^-111, denominators on both sides of the fast path's
  // 2^-120, bf16 thresholds near the bottom of the normal range
  for (int e : {-100, -110, -118})
    for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
      for (int v = 0; v < 8; ++v) {
        std::vector<float> x = t::edge_matrix(64, 256, 13, false);
        for (float& f : x) f = std::ldexp(f, e);
        check_nvfp4(x, 64, 256, dt, v & 1, v & 2, v & 4, stream_);
      }
}

TEST_F(QuantCuda, Nvfp4OptionalOutputsAndEmptyTensor) {
  const size_t rows = 32, cols = 64;
  const std::vector<float> x = t::edge_matrix(rows, cols, 8);
  Dev dx(x.size() * 4), dy(x.size() * 4), dws(8);
  ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(px_nvfp4_qdq_cuda(dx.p, kPxQuantF32, dy.p, nullptr, nullptr, dws.as<float>(), rows, cols, 0, 0, 0, 0, 0,
                              nullptr),
            kPxQuantOk);
  std::vector<float> y_ref(x.size());
  float ws_ref[2];
  nvfp4_qdq_cpu(x.data(), QdqDtype::kF32, y_ref.data(), nullptr, nullptr, ws_ref, rows, cols, false, false, 0, false, 0);
  const std::vector<float> y = fetch<float>(dy, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(t::float_bits(y[i]), t::float_bits(y_ref[i])) << i;
  ASSERT_EQ(px_nvfp4_qdq_cuda(nullptr, kPxQuantBF16, nullptr, nullptr, nullptr, dws.as<float>(), 0, 64, 1, 0, 0, 0, 0,
                              nullptr),
            kPxQuantOk);
  const std::vector<float> ws = fetch<float>(dws, 2);
  EXPECT_EQ(ws[0], 0.0f);
  EXPECT_EQ(ws[1], 1.0f);
}

TEST_F(QuantCuda, HadamardMatchesTheCpu) {
  const size_t rows = 96, cols = 128;
  const std::vector<float> x = t::edge_matrix(rows, cols, 9);
  for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
    for (int inverse = 0; inverse < 2; ++inverse) {
      const size_t w = dt == QdqDtype::kF32 ? 4 : 2;
      const std::vector<uint8_t> in = as_dtype(x, dt);
      std::vector<uint8_t> ref(in.size());
      hadamard16_cpu(in.data(), dt, ref.data(), rows, cols, 5, inverse);
      Dev dx(in.size()), dy(in.size());
      ASSERT_EQ(cudaMemcpy(dx.p, in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(px_hadamard16_cuda(dx.p, static_cast<int>(dt), dy.p, rows, cols, 5, inverse,
                                   reinterpret_cast<CUstream_st*>(stream_)),
                kPxQuantOk);
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      EXPECT_EQ(count_diff_values(fetch<uint8_t>(dy, in.size()), ref, dt, true), 0u) << "w=" << w << " inv=" << inverse;
    }
}

TEST_F(QuantCuda, Fp8MatchesTheCpu) {
  // n not a multiple of 8: the kernel's scalar tail.
  std::vector<float> x = t::edge_matrix(33, 64, 10);
  x.resize(x.size() - 5);
  const size_t n = x.size();
  for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
    for (int fmt = 0; fmt < 2; ++fmt)
      for (int sat = 0; sat < 2; ++sat)
        for (float scale : {1.0f, 0.0173f, 3.0e5f}) {
          SCOPED_TRACE("fmt=" + std::to_string(fmt) + " sat=" + std::to_string(sat) + " scale=" + std::to_string(scale));
          const size_t w = dt == QdqDtype::kF32 ? 4 : 2;
          const std::vector<uint8_t> in = as_dtype(x, dt);
          std::vector<uint8_t> ref(in.size()), cref(n);
          fp8_qdq_cpu(in.data(), dt, ref.data(), cref.data(), n, fmt, scale, sat);
          Dev dx(in.size()), dy(in.size()), dc(n);
          ASSERT_EQ(cudaMemcpy(dx.p, in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(px_fp8_qdq_cuda(dx.p, static_cast<int>(dt), dy.p, dc.as<uint8_t>(), n, fmt, scale, sat,
                                    reinterpret_cast<CUstream_st*>(stream_)),
                    kPxQuantOk);
          ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
          EXPECT_EQ(count_diff(fetch<uint8_t>(dc, n), cref), 0u) << "codes";
          EXPECT_EQ(count_diff_values(fetch<uint8_t>(dy, in.size()), ref, dt, false), 0u) << "values, w=" << w;
        }
}

TEST_F(QuantCuda, MxMatchesTheCpu) {
  // MX (qdq_mx.h) against mx_qdq_cpu: every element format, both scale rules, RNE and SR (with
  // and without the device seed counter), float32 and bf16, on edge matrices (NaN, inf, zero and
  // subnormal blocks) and a tensor of more blocks than the grid has threads (grid stride).
  const std::vector<std::pair<size_t, size_t>> shapes = {{64, 256}, {3, 96}, {2048, 1024}};
  const uint64_t seed = 20261204;
  const uint32_t counter = 9;
  Dev dcount(4);
  ASSERT_EQ(cudaMemcpy(dcount.p, &counter, 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (const auto& [rows, cols] : shapes) {
    const std::vector<float> x = t::edge_matrix(rows, cols, static_cast<unsigned>(rows + cols));
    for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
      for (int elem = 0; elem < 3; ++elem)
        for (int v = 0; v < 6; ++v) {
          const int rule = v & 1, sr = (v >> 1) & 1, use_counter = v >> 2;
          if (use_counter && !sr) continue;
          SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (dt == QdqDtype::kBF16 ? " bf16" : " f32") +
                       " elem=" + std::to_string(elem) + " rule=" + std::to_string(rule) + " sr=" + std::to_string(sr) +
                       " counter=" + std::to_string(use_counter));
          const size_t n = rows * cols, w = dt == QdqDtype::kF32 ? 4 : 2;
          const std::vector<uint8_t> in = as_dtype(x, dt);
          std::vector<uint8_t> y_ref(n * w), c_ref(n), s_ref(n / 32);
          mx_qdq_cpu(in.data(), dt, y_ref.data(), c_ref.data(), s_ref.data(), rows, cols, elem, rule, sr,
                     use_counter ? qdq::step_seed(seed, counter) : seed);
          Dev dx(n * w), dy(n * w), dc(n), ds(n / 32);
          ASSERT_EQ(cudaMemcpy(dx.p, in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(px_mx_qdq_cuda(dx.p, static_cast<int>(dt), dy.p, dc.as<uint8_t>(), ds.as<uint8_t>(), rows, cols,
                                   elem, rule, sr, seed, use_counter ? dcount.as<uint32_t>() : nullptr,
                                   reinterpret_cast<CUstream_st*>(stream_)),
                    kPxQuantOk)
              << px_quant_cuda_error_message();
          ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
          EXPECT_EQ(count_diff(fetch<uint8_t>(ds, n / 32), s_ref), 0u) << "scales";
          EXPECT_EQ(count_diff(fetch<uint8_t>(dc, n), c_ref), 0u) << "codes";
          EXPECT_EQ(count_diff_values(fetch<uint8_t>(dy, n * w), y_ref, dt, false), 0u) << "dequantized values";
        }
  }
  EXPECT_EQ(px_mx_qdq_cuda(dcount.p, 0, dcount.p, nullptr, nullptr, 1, 48, 0, 0, 0, 0, nullptr, nullptr),
            kPxQuantErrShape);
}

TEST_F(QuantCuda, ArgumentErrorsQueueNothing) {
  Dev dx(4096), dy(4096), dws(8);
  EXPECT_EQ(px_nvfp4_qdq_cuda(dx.p, kPxQuantF32, dy.p, nullptr, nullptr, dws.as<float>(), 4, 24, 0, 0, 0, 0, 0, nullptr),
            kPxQuantErrShape);
  EXPECT_NE(std::string(px_quant_cuda_error_message()).find("multiple of 16"), std::string::npos);
  EXPECT_EQ(px_nvfp4_qdq_cuda(dx.p, kPxQuantF32, dy.p, nullptr, nullptr, dws.as<float>(), 8, 32, 1, 0, 0, 0, 0, nullptr),
            kPxQuantErrShape);
  EXPECT_EQ(px_nvfp4_qdq_cuda(dx.p, kPxQuantF32, dy.p, nullptr, nullptr, nullptr, 16, 32, 0, 0, 0, 0, 0, nullptr),
            kPxQuantErrArg);
  EXPECT_EQ(px_nvfp4_qdq_cuda(dx.as<uint8_t>() + 4, kPxQuantF32, dy.p, nullptr, nullptr, dws.as<float>(), 16, 32, 0, 0,
                              0, 0, 0, nullptr),
            kPxQuantErrAlign);
  EXPECT_EQ(px_fp8_qdq_cuda(dx.p, 7, dy.p, nullptr, 16, 0, 1.0f, 1, nullptr), kPxQuantErrArg);
  EXPECT_EQ(px_hadamard16_cuda(dx.p, kPxQuantBF16, dy.p, 2, 8, 0, 0, nullptr), kPxQuantErrShape);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Every 1x16 schedule (the single-read kernel keeping groups in shared memory or relying on L2
// alone, and the two kernels) gives the CPU's bits; on a device with cooperative launch (every
// GPU since Pascal) the single-read kernel is the one that ran when asked for.
TEST_F(QuantCuda, Nvfp4EverySchedule) {
  struct Schedule {
    int fused, hold;
  };
  int coop = 0, dev = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev), cudaSuccess);
  for (Schedule s : {Schedule{0, 0}, Schedule{1, 0}, Schedule{1, 1}}) {
    SCOPED_TRACE("fused=" + std::to_string(s.fused) + " hold=" + std::to_string(s.hold));
    ASSERT_EQ(px_quant_cuda_set_schedule(s.fused, s.hold), kPxQuantOk);
    for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
      for (int v = 0; v < 4; ++v) {
        check_nvfp4(t::edge_matrix(64, 256, 21), 64, 256, dt, false, v & 1, v & 2, stream_);
        EXPECT_EQ(px_quant_cuda_last_schedule(), coop ? s.fused : 0);
      }
    // more groups than the resident blocks keep (every block's second pass reads from L2), a
    // group count that is not a multiple of a block's threads, and one group
    check_nvfp4(t::edge_matrix(8192, 2048, 22), 8192, 2048, QdqDtype::kBF16, false, false, false, stream_);
    check_nvfp4(t::edge_matrix(4096, 1024, 23), 4096, 1024, QdqDtype::kF32, false, true, true, stream_);
    check_nvfp4(t::edge_matrix(37, 48, 24), 37, 48, QdqDtype::kBF16, false, true, false, stream_);
    check_nvfp4(t::edge_matrix(1, 16, 25), 1, 16, QdqDtype::kF32, false, false, false, stream_);
  }
  ASSERT_EQ(px_quant_cuda_set_schedule(-1, -1), kPxQuantOk);
}

// 16x1 (mode 2: values and {amax, s_global}) against the CPU.
void check_16x1(const std::vector<float>& x, size_t rows, size_t cols, QdqDtype dt, bool sr, bool rht,
                cudaStream_t stream) {
  SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (dt == QdqDtype::kBF16 ? " bf16" : " f32") +
               " 16x1" + (sr ? " SR" : " RNE") + (rht ? " RHT" : ""));
  const size_t n = rows * cols, w = dt == QdqDtype::kF32 ? 4 : 2;
  const std::vector<uint8_t> in = as_dtype(x, dt);
  std::vector<uint8_t> y_ref(n * w);
  float ws_ref[2];
  nvfp4_qdq_cpu(in.data(), dt, y_ref.data(), nullptr, nullptr, ws_ref, rows, cols, 2, sr, 20251130, rht, 77);
  Dev dx(n * w), dy(n * w), dws(8);
  ASSERT_EQ(cudaMemcpy(dx.p, in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(px_nvfp4_qdq_cuda(dx.p, static_cast<int>(dt), dy.p, nullptr, nullptr, dws.as<float>(), rows, cols, 2, sr,
                              20251130, rht, 77, reinterpret_cast<CUstream_st*>(stream)),
            kPxQuantOk)
      << px_quant_cuda_error_message();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<float> ws = fetch<float>(dws, 2);
  EXPECT_EQ(t::float_bits(ws[0]), t::float_bits(ws_ref[0])) << "amax";
  EXPECT_EQ(t::float_bits(ws[1]), t::float_bits(ws_ref[1])) << "s_global";
  EXPECT_EQ(count_diff_values(fetch<uint8_t>(dy, n * w), y_ref, dt, false), 0u) << "dequantized values";
}

// The bf16 1x16 quantize kernel holds two groups (the next one loading while one is
// quantized, its loop unrolled twice): group counts that leave threads 0, 1, 2 and more groups,
// odd and even, and a last group whose prefetch is skipped; then the same with the previous
// kernels (px_quant_cuda_set_legacy), 1x16 and 16x1, which must give the same bits.
TEST_F(QuantCuda, Nvfp4PrefetchTailsAndTheLegacyKernels) {
  for (int legacy = 0; legacy < 2; ++legacy) {
    SCOPED_TRACE("legacy=" + std::to_string(legacy));
    ASSERT_EQ(px_quant_cuda_set_legacy(legacy), kPxQuantOk);
    for (int v = 0; v < 4; ++v) {
      const bool sr = v & 1, rht = v & 2;
      check_nvfp4(t::edge_matrix(1, 16, 31), 1, 16, QdqDtype::kBF16, false, sr, rht, stream_);
      check_nvfp4(t::edge_matrix(37, 48, 32), 37, 48, QdqDtype::kBF16, false, sr, rht, stream_);
      check_nvfp4(t::edge_matrix(3001, 784, 33), 3001, 784, QdqDtype::kBF16, false, sr, rht, stream_);
      check_16x1(t::column_edge_matrix(48, 34, 34), 48, 34, QdqDtype::kBF16, sr, rht, stream_);
      check_16x1(t::column_edge_matrix(1024, 770, 35), 1024, 770, QdqDtype::kBF16, sr, rht, stream_);
    }
    // 16x1 on small tensors: 19 and 32 of 204 blocks on the generic path (out of line) beside fast ones
    for (int e : {-135, -140}) {
      std::vector<float> x = t::column_edge_matrix(96, 34, 38);
      for (float& f : x) f = std::ldexp(f, e);
      check_16x1(x, 96, 34, QdqDtype::kBF16, true, true, stream_);
      check_16x1(x, 96, 34, QdqDtype::kF32, false, false, stream_);
    }
    // more groups than the grid has threads several times over (odd counts per thread too)
    check_nvfp4(t::edge_matrix(12289, 784, 36), 12289, 784, QdqDtype::kBF16, false, true, false, stream_);
    check_nvfp4(t::edge_matrix(8192, 2048, 37), 8192, 2048, QdqDtype::kBF16, false, false, false, stream_);
  }
  ASSERT_EQ(px_quant_cuda_set_legacy(0), kPxQuantOk);
}

// The column parts of a wider tensor, each against the CPU on a dense copy of it with its own
// seed: values and {amax, s_global} per part, in every mode; the columns outside are untouched.
TEST_F(QuantCuda, Nvfp4PartsAreTheDenseParts) {
  const size_t rows = 96, parts = 3, width = 128, cols = parts * width;
  const std::vector<float> x = t::edge_matrix(rows, cols, 26);
  const uint64_t seeds[parts] = {11, 1u << 20, 0x7FFFFFFFFFFFFFFFull};
  for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
    for (int mode = 0; mode < 3; ++mode)
      for (int v = 0; v < 4; ++v) {
        const bool sr = v & 1, rht = v & 2;
        SCOPED_TRACE("mode=" + std::to_string(mode) + " sr=" + std::to_string(sr) + " rht=" + std::to_string(rht) +
                     (dt == QdqDtype::kBF16 ? " bf16" : " f32"));
        const size_t w = dt == QdqDtype::kF32 ? 4 : 2;
        const std::vector<uint8_t> in = as_dtype(x, dt);
        Dev dx(in.size()), dy(in.size()), dws(2 * parts * 4);
        ASSERT_EQ(cudaMemcpy(dx.p, in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(px_nvfp4_qdq_parts_cuda(dx.p, static_cast<int>(dt), dy.p, dws.as<float>(), rows, cols, parts, mode, sr,
                                          seeds, nullptr, rht, 77, reinterpret_cast<CUstream_st*>(stream_)),
                  kPxQuantOk)
            << px_quant_cuda_error_message();
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        const std::vector<uint8_t> y = fetch<uint8_t>(dy, in.size());
        const std::vector<float> ws = fetch<float>(dws, 2 * parts);
        for (size_t p = 0; p < parts; ++p) {
          std::vector<uint8_t> part(rows * width * w), ref(part.size()), got(part.size());
          for (size_t r = 0; r < rows; ++r) {
            std::memcpy(part.data() + r * width * w, in.data() + (r * cols + p * width) * w, width * w);
            std::memcpy(got.data() + r * width * w, y.data() + (r * cols + p * width) * w, width * w);
          }
          float ws_ref[2];
          nvfp4_qdq_cpu(part.data(), dt, ref.data(), nullptr, nullptr, ws_ref, rows, width, mode, sr, seeds[p], rht, 77);
          EXPECT_EQ(count_diff_values(got, ref, dt, false), 0u) << "part " << p;
          EXPECT_EQ(t::float_bits(ws[2 * p]), t::float_bits(ws_ref[0])) << "amax of part " << p;
          EXPECT_EQ(t::float_bits(ws[2 * p + 1]), t::float_bits(ws_ref[1])) << "s_global of part " << p;
        }
      }
  Dev dx(4096), dy(4096), dws(64);
  EXPECT_EQ(px_nvfp4_qdq_parts_cuda(dx.p, kPxQuantF32, dy.p, dws.as<float>(), 16, 96, 4, 0, 0, seeds, nullptr, 0, 0,
                                    nullptr),
            kPxQuantErrShape);  // 96 columns into 4 parts of 24: not 16-wide blocks
  EXPECT_EQ(px_nvfp4_qdq_parts_cuda(dx.p, kPxQuantF32, dy.p, dws.as<float>(), 16, 90, 2, 2, 0, seeds, nullptr, 0, 0,
                                    nullptr),
            kPxQuantErrAlign);  // 45 floats a part row: not 16-byte multiples
  EXPECT_EQ(px_nvfp4_qdq_parts_cuda(dx.p, kPxQuantF32, dy.p, dws.as<float>(), 16, 64, 0, 0, 0, seeds, nullptr, 0, 0,
                                    nullptr),
            kPxQuantErrArg);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}
