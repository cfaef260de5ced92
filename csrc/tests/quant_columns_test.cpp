// NVFP4 16x1 (qdq_columns.h): the CPU implementation equals the 1x16 reference on the transpose,
// transposed back, bit for bit; and the kernels' unit functions, run on the host over every unit
// as the CUDA kernels run them on the GPU, equal the CPU implementation bit for bit (bf16 and
// float32, round-to-nearest and stochastic, with and without the Hadamard transform), on the
// edge matrices laid out so that the planted special blocks run down the columns.
#include <gtest/gtest.h>

#include <cmath>

#include <cstring>
#include <vector>

#include "quant/nvfp4.h"
#include "quant/qdq_columns.h"
#include "quant/qdq_cpu.h"
#include "quant/qdq_math.h"
#include "quant_test_inputs.h"

using namespace parallax::quant;
using parallax::quant::testing::column_edge_matrix;
using parallax::quant::testing::edge_matrix;
using parallax::quant::testing::transpose;
using parallax::quant::testing::float_bits;

namespace {

constexpr uint64_t kSeed = 1234, kRhtSeed = 99;

std::vector<uint16_t> to_bf16(const std::vector<float>& f) {
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) h[i] = qdq::f32_to_bf16(f[i]);
  return h;
}

// The output bits of nvfp4_qdq_cpu in `mode` on x (as dtype), and its {amax, s_global}.
std::vector<uint32_t> cpu_bits(const std::vector<float>& x, QdqDtype dt, size_t rows, size_t cols, int mode, bool sr,
                               bool rht, float ws[2]) {
  std::vector<uint32_t> out(x.size());
  if (dt == QdqDtype::kF32) {
    std::vector<float> y(x.size());
    nvfp4_qdq_cpu(x.data(), dt, y.data(), nullptr, nullptr, ws, rows, cols, mode, sr, kSeed, rht, kRhtSeed);
    for (size_t i = 0; i < y.size(); ++i) out[i] = float_bits(y[i]);
  } else {
    const std::vector<uint16_t> xb = to_bf16(x);
    std::vector<uint16_t> y(x.size());
    nvfp4_qdq_cpu(xb.data(), dt, y.data(), nullptr, nullptr, ws, rows, cols, mode, sr, kSeed, rht, kRhtSeed);
    for (size_t i = 0; i < y.size(); ++i) out[i] = y[i];
  }
  return out;
}

// The kernels' path on the host: the amax pass over every unit, the scale table, then every unit
// (kV1: the previous stochastic rounding path, px_quant_cuda_set_legacy's).
template <bool kBf16, bool kRht, bool kSr, bool kV1 = false>
std::vector<uint32_t> emulated_bits(const std::vector<float>& x, size_t rows, size_t cols, float ws[2]) {
  std::vector<uint16_t> xb;
  const void* in = x.data();
  if (kBf16) {
    xb = to_bf16(x);
    in = xb.data();
  }
  float s[16];
  const uint64_t sign_key = qdq::hash_key(kRhtSeed);
  for (int j = 0; j < 16; ++j) s[j] = qdq::hadamard_sign(sign_key, j);
  int32_t key = 0;
  for (size_t row0 = 0; row0 < rows; row0 += 16)
    for (size_t col = 0; col < cols; col += 2) key = qdq::unit_amax_key<kBf16, kRht>(in, cols, row0, col, s, key);
  ws[0] = qdq::u2f(qdq::amax_of_key(key));
  const float sg = qdq::global_scale(ws[0]);
  ws[1] = sg;
  std::vector<qdq::FastScale> table(128);
  for (uint32_t sc = 0; sc < 128; ++sc) table[sc] = qdq::fast_scale(sc, sg, false, kBf16, !kSr);
  const uint64_t sr_key = qdq::hash_key(kSeed);
  std::vector<uint32_t> out(x.size());
  if (kBf16) {
    std::vector<uint16_t> y(x.size());
    for (size_t row0 = 0; row0 < rows; row0 += 16)
      for (size_t col = 0; col < cols; col += 2)
        qdq::unit_qdq<true, kRht, kSr, kV1>(in, y.data(), rows, cols, row0, col, s, table.data(), sg, sr_key);
    for (size_t i = 0; i < y.size(); ++i) out[i] = y[i];
  } else {
    std::vector<float> y(x.size());
    for (size_t row0 = 0; row0 < rows; row0 += 16)
      for (size_t col = 0; col < cols; col += 2)
        qdq::unit_qdq<false, kRht, kSr, kV1>(in, y.data(), rows, cols, row0, col, s, table.data(), sg, sr_key);
    for (size_t i = 0; i < y.size(); ++i) out[i] = float_bits(y[i]);
  }
  return out;
}

size_t mismatches(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

}  // namespace

TEST(QuantColumns, CpuIsTheReferenceOfTheTransposeTransposedBack) {
  const size_t rows = 64, cols = 48;
  const std::vector<float> x = column_edge_matrix(rows, cols, 5);
  const std::vector<float> xt = transpose(x, rows, cols);
  for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
    for (bool sr : {false, true})
      for (bool rht : {false, true}) {
        float ws[2], wst[2];
        const std::vector<uint32_t> got = cpu_bits(x, dt, rows, cols, 2, sr, rht, ws);
        const std::vector<uint32_t> row_major = cpu_bits(xt, dt, cols, rows, 0, sr, rht, wst);
        std::vector<uint32_t> want(got.size());
        for (size_t r = 0; r < rows; ++r)
          for (size_t c = 0; c < cols; ++c) want[r * cols + c] = row_major[c * rows + r];
        EXPECT_EQ(mismatches(got, want), 0u) << "bf16=" << (dt == QdqDtype::kBF16) << " sr=" << sr << " rht=" << rht;
        EXPECT_EQ(float_bits(ws[0]), float_bits(wst[0]));
        EXPECT_EQ(float_bits(ws[1]), float_bits(wst[1]));
      }
}

template <bool kBf16, bool kRht, bool kSr, bool kV1 = false>
void expect_kernel_path_equals_cpu(size_t rows, size_t cols, unsigned seed, int exponent = 0) {
  std::vector<float> x = column_edge_matrix(rows, cols, seed);
  for (float& v : x) v = std::ldexp(v, exponent);  // small tensors: blocks on the generic path
  float ws_cpu[2], ws_kernel[2];
  const std::vector<uint32_t> want =
      cpu_bits(x, kBf16 ? QdqDtype::kBF16 : QdqDtype::kF32, rows, cols, 2, kSr, kRht, ws_cpu);
  const std::vector<uint32_t> got = emulated_bits<kBf16, kRht, kSr, kV1>(x, rows, cols, ws_kernel);
  EXPECT_EQ(mismatches(got, want), 0u) << "bf16=" << kBf16 << " rht=" << kRht << " sr=" << kSr << " v1=" << kV1;
  EXPECT_EQ(float_bits(ws_kernel[0]), float_bits(ws_cpu[0]));
  EXPECT_EQ(float_bits(ws_kernel[1]), float_bits(ws_cpu[1]));
}

TEST(QuantColumns, KernelUnitsEqualTheCpuBf16) {
  expect_kernel_path_equals_cpu<true, false, false>(64, 48, 1);
  expect_kernel_path_equals_cpu<true, true, false>(64, 48, 2);
  expect_kernel_path_equals_cpu<true, false, true>(64, 48, 3);
  expect_kernel_path_equals_cpu<true, true, true>(96, 34, 4);
  expect_kernel_path_equals_cpu<true, false, true, true>(64, 48, 3);
  expect_kernel_path_equals_cpu<true, true, true, true>(96, 34, 4);
}

// The edge matrix scaled by 2^-135 and 2^-140 (tensor amax ~2^-104, ~2^-109): 10-36 of the 192
// blocks have d * s_global below the fast path's 2^-120 and take the generic path (out of line
// on the device) beside fast ones.
TEST(QuantColumns, KernelUnitsEqualTheCpuOnSmallTensors) {
  for (int e : {-135, -140}) {
    expect_kernel_path_equals_cpu<true, false, false>(64, 48, 9, e);
    expect_kernel_path_equals_cpu<true, true, true>(64, 48, 10, e);
    expect_kernel_path_equals_cpu<false, false, true>(64, 48, 11, e);
    expect_kernel_path_equals_cpu<false, true, false>(64, 48, 12, e);
  }
}

TEST(QuantColumns, KernelUnitsEqualTheCpuFloat32) {
  expect_kernel_path_equals_cpu<false, false, false>(64, 48, 5);
  expect_kernel_path_equals_cpu<false, true, false>(64, 48, 6);
  expect_kernel_path_equals_cpu<false, false, true>(64, 48, 7);
  expect_kernel_path_equals_cpu<false, true, true>(32, 18, 8);
}

TEST(QuantColumns, RefusesWhatItCannotTile) {
  std::vector<float> x(32 * 16), y(x.size());
  float ws[2];
  uint8_t codes[256];
  EXPECT_THROW(nvfp4_qdq_cpu(x.data(), QdqDtype::kF32, y.data(), nullptr, nullptr, ws, 24, 16, 2, false, 0, false, 0),
               QuantError);  // rows % 16
  EXPECT_THROW(nvfp4_qdq_cpu(x.data(), QdqDtype::kF32, y.data(), nullptr, nullptr, ws, 16, 31, 2, false, 0, false, 0),
               QuantError);  // odd cols
  EXPECT_THROW(nvfp4_qdq_cpu(x.data(), QdqDtype::kF32, y.data(), codes, nullptr, ws, 32, 16, 2, false, 0, false, 0),
               QuantError);  // no codes in 16x1
  EXPECT_THROW(nvfp4_qdq_cpu(x.data(), QdqDtype::kF32, y.data(), nullptr, nullptr, ws, 32, 16, 3, false, 0, false, 0),
               QuantError);  // no mode 3
}
