// NVFP4 block quantization (csrc/quant/nvfp4.h): a hand-worked block, the global scale,
// zero / underflow / non-finite blocks, shape errors, 16x16 tiles and stochastic rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "quant/minifloat.h"
#include "quant/nvfp4.h"

using namespace parallax::quant;

namespace {

std::vector<uint8_t> unpack(const Nvfp4Tensor& t) {
  std::vector<uint8_t> c(t.rows * t.cols);
  for (size_t i = 0; i < c.size(); ++i) c[i] = (i % 2 == 0) ? (t.codes[i / 2] & 0xF) : (t.codes[i / 2] >> 4);
  return c;
}

std::vector<float> dequant(const Nvfp4Tensor& t) {
  std::vector<float> y(t.rows * t.cols);
  nvfp4_dequantize(t, y.data());
  return y;
}

std::vector<float> randn(size_t n, unsigned seed, float sigma = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace

TEST(QuantNvfp4, HandWorkedBlocks) {
  // One row, two blocks. Global amax = 2688, so s_global = 2688 / 2688 = 1.
  // Block 0: amax 2688 -> scale 2688 / 6 / 1 = 448 -> E4M3 0x7E (448 exactly).
  //   x / 448 = 6, -3, .25, .75, 1.25, 1.75, 2.5, 3.5, 5, 0.1, -.5, 1, 1.5, 2, 4, 0
  //   E2M1 RNE (ties to even code): 7, D(-3), 0(tie), 2(tie->1.0), 2(tie->1.0), 4(tie->2),
  //   4(tie->2), 6(tie->4), 6(tie->4), 0, 9(-0.5), 2, 3, 4, 6, 0
  // Block 1: amax 26.4 -> 26.4 / 6 = 4.4 -> E4M3 quantum 0.5 in [4, 8): 4.5 -> 0x49
  //   (exp 2 + 7 = 9, mantissa 001). x / 4.5: 26.4 -> 5.87 -> 6 (7); 9 -> 2 (4);
  //   -4.5 -> -1 (A); 2.25 -> .5 (1); 1.125 -> .25 tie -> 0; 13.5 -> 3 (5); zeros -> 0.
  std::vector<float> x = {2688, -1344, 112, 336, 560, 784, 1120, 1568, 2240, 44.8f, -224, 448, 672, 896, 1792, 0,
                          26.4f, 9, -4.5f, 2.25f, 1.125f, 13.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const Nvfp4Tensor t = nvfp4_quantize(x.data(), 1, 32, {});
  EXPECT_EQ(t.global_scale, 1.0f);
  ASSERT_EQ(t.scales.size(), 2u);
  EXPECT_EQ(t.scales[0], 0x7E);
  EXPECT_EQ(t.scales[1], 0x49);
  const std::vector<uint8_t> want = {0x7, 0xD, 0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0x0, 0x9, 0x2, 0x3, 0x4, 0x6, 0x0,
                                     0x7, 0x4, 0xA, 0x1, 0x0, 0x5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(unpack(t), want);
  EXPECT_EQ(t.codes[0], 0xD7);  // low nibble first: element 0 = 7, element 1 = D
  const std::vector<float> y = dequant(t);
  EXPECT_EQ(y[0], 2688.0f);
  EXPECT_EQ(y[1], -1344.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 448.0f);
  EXPECT_EQ(y[7], 1792.0f);
  EXPECT_EQ(y[16], 27.0f);  // 6 * 4.5 * 1
  EXPECT_EQ(y[18], -4.5f);
  EXPECT_EQ(y[20], 0.0f);
}

TEST(QuantNvfp4, GlobalScaleFormula) {
  std::vector<float> x = randn(64, 1);
  x[17] = -100.0f;  // the amax
  EXPECT_EQ(nvfp4_global_scale(x.data(), x.size()), 100.0f / 2688.0f);
  const Nvfp4Tensor t = nvfp4_quantize(x.data(), 2, 32, {});
  EXPECT_EQ(t.global_scale, 100.0f / 2688.0f);
  // The block holding the amax gets scale 448 (up to float rounding of amax/6/s_global).
  EXPECT_EQ(t.scales[1], 0x7E);
  // Every block's scale follows the formula.
  for (size_t b = 0; b < 4; ++b) {
    float amax = 0;
    for (size_t j = 0; j < 16; ++j) amax = std::fmax(amax, std::fabs(x[b * 16 + j]));
    EXPECT_EQ(t.scales[b], e4m3_encode((amax / 6.0f) / t.global_scale)) << b;
  }
}

TEST(QuantNvfp4, RandomMatrixErrorIsBounded) {
  const std::vector<float> x = randn(8 * 64, 3);
  const Nvfp4Tensor t = nvfp4_quantize(x.data(), 8, 64, {});
  const std::vector<float> y = dequant(t);
  for (size_t i = 0; i < x.size(); ++i) {
    const float d = e4m3_decode(t.scales[i / 16]) * t.global_scale;
    // half the largest E2M1 step (2), relative to the block scale, plus float slack
    EXPECT_LE(std::fabs(y[i] - x[i]), 1.0f * d * 1.0001f + 1e-7f) << i;
  }
}

TEST(QuantNvfp4, AllZeroTensorAndBlock) {
  std::vector<float> z(64, 0.0f);
  const Nvfp4Tensor t = nvfp4_quantize(z.data(), 2, 32, {});
  EXPECT_EQ(t.global_scale, 1.0f);  // documented: all-zero tensor -> scale 1
  for (uint8_t s : t.scales) EXPECT_EQ(s, 0);
  for (uint8_t c : t.codes) EXPECT_EQ(c, 0);
  for (float v : dequant(t)) EXPECT_EQ(v, 0.0f);

  std::vector<float> x = randn(32, 4);
  for (int j = 16; j < 32; ++j) x[j] = 0.0f;
  x[16] = 1e-6f;  // block 1: amax far below the tensor amax -> its scale rounds to E4M3 zero
  const Nvfp4Tensor u = nvfp4_quantize(x.data(), 1, 32, {});
  EXPECT_NE(u.scales[0], 0);
  EXPECT_EQ(u.scales[1], 0);
  const std::vector<float> y = dequant(u);
  for (int j = 16; j < 32; ++j) EXPECT_EQ(y[j], 0.0f);
}

TEST(QuantNvfp4, NonFiniteValuesPoisonOnlyTheirBlock) {
  std::vector<float> x = randn(48, 5);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[40] = -std::numeric_limits<float>::infinity();
  float amax = 0;  // over the finite elements
  for (float v : x)
    if (std::isfinite(v)) amax = std::fmax(amax, std::fabs(v));
  const Nvfp4Tensor t = nvfp4_quantize(x.data(), 1, 48, {});
  EXPECT_EQ(t.global_scale, amax / 2688.0f);
  EXPECT_EQ(t.scales[0], 0x7F);
  EXPECT_NE(t.scales[1], 0x7F);
  EXPECT_EQ(t.scales[2], 0x7F);
  const std::vector<float> y = dequant(t);
  for (int j = 0; j < 16; ++j) EXPECT_TRUE(std::isnan(y[j])) << j;
  for (int j = 16; j < 32; ++j) EXPECT_TRUE(std::isfinite(y[j])) << j;
  for (int j = 32; j < 48; ++j) EXPECT_TRUE(std::isnan(y[j])) << j;
}

TEST(QuantNvfp4, ShapeErrors) {
  std::vector<float> x(16 * 40, 1.0f);
  EXPECT_THROW(nvfp4_quantize(x.data(), 16, 40, {}), QuantError);
  EXPECT_THROW(nvfp4_quantize(x.data(), 10, 32, {Nvfp4Mode::k16x16, false, 0}), QuantError);
  EXPECT_NO_THROW(nvfp4_quantize(x.data(), 10, 32, {}));
  try {
    nvfp4_quantize(x.data(), 1, 20, {});
    FAIL();
  } catch (const QuantError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 16"), std::string::npos);
  }
  std::vector<float> out(x.size());
  EXPECT_THROW(hadamard16(x.data(), out.data(), 1, 24, 0, false), QuantError);
  const Nvfp4Tensor empty = nvfp4_quantize(x.data(), 0, 32, {});
  EXPECT_TRUE(empty.codes.empty());
}

TEST(QuantNvfp4, TwoDimensionalTiles) {
  const size_t R = 32, C = 48;
  std::vector<float> x = randn(R * C, 6);
  x[20 * C + 40] = 9.0f;  // tile (1, 2) holds the amax
  const Nvfp4Tensor t = nvfp4_quantize(x.data(), R, C, {Nvfp4Mode::k16x16, false, 0});
  ASSERT_EQ(t.scale_rows, 2u);
  ASSERT_EQ(t.scale_cols, 3u);
  EXPECT_EQ(t.global_scale, 9.0f / 2688.0f);
  for (size_t tr = 0; tr < 2; ++tr)
    for (size_t tc = 0; tc < 3; ++tc) {
      float amax = 0;
      for (size_t r = tr * 16; r < tr * 16 + 16; ++r)
        for (size_t c = tc * 16; c < tc * 16 + 16; ++c) amax = std::fmax(amax, std::fabs(x[r * C + c]));
      EXPECT_EQ(t.scales[tr * 3 + tc], e4m3_encode((amax / 6.0f) / t.global_scale));
    }
  EXPECT_EQ(t.scales[1 * 3 + 2], 0x7E);
  // Each element follows the tile's scale.
  const std::vector<uint8_t> codes = unpack(t);
  const std::vector<float> y = dequant(t);
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) {
      const float d = e4m3_decode(t.scales[(r / 16) * 3 + c / 16]);
      const size_t i = r * C + c;
      EXPECT_EQ(codes[i], e2m1_encode(x[i] / (d * t.global_scale)));
      EXPECT_EQ(y[i], (e2m1_decode(codes[i]) * d) * t.global_scale);
    }
  // When every row of a tile has the same block amax, 16x16 and 1x16 agree.
  std::vector<float> same(16 * 16);
  for (size_t r = 0; r < 16; ++r)
    for (size_t c = 0; c < 16; ++c) same[r * 16 + c] = (c == r ? 5.0f : 0.37f * static_cast<float>(c + r) / 31.0f);
  const Nvfp4Tensor a = nvfp4_quantize(same.data(), 16, 16, {Nvfp4Mode::k16x16, false, 0});
  const Nvfp4Tensor b = nvfp4_quantize(same.data(), 16, 16, {});
  EXPECT_EQ(dequant(a), dequant(b));
}

TEST(QuantStochastic, DeterministicPerSeed) {
  const std::vector<float> x = randn(4 * 64, 7);
  const Nvfp4Options s1{Nvfp4Mode::k1x16, true, 1}, s2{Nvfp4Mode::k1x16, true, 2};
  const Nvfp4Tensor a = nvfp4_quantize(x.data(), 4, 64, s1);
  const Nvfp4Tensor b = nvfp4_quantize(x.data(), 4, 64, s1);
  const Nvfp4Tensor c = nvfp4_quantize(x.data(), 4, 64, s2);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_NE(a.codes, c.codes);
  EXPECT_EQ(a.scales, c.scales);  // scales never depend on the seed
  // Each SR code is one of the two grid neighbours of |v| (sign kept).
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  const std::vector<uint8_t> ca = unpack(a);
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i] / (e4m3_decode(a.scales[i / 16]) * a.global_scale);
    const float m = std::fmin(std::fabs(v), 6.0f);
    int lo = 0;
    while (lo < 7 && grid[lo + 1] <= m) ++lo;
    const int hi = (grid[lo] == m) ? lo : lo + 1;
    const int got = ca[i] & 7;
    EXPECT_TRUE(got == lo || got == hi) << i;
    EXPECT_EQ((ca[i] & 8) != 0, std::signbit(v)) << i;
  }
}

TEST(QuantStochastic, UnbiasedOnAverage) {
  // Element level: the mean of SR over many indices equals v.
  for (float v : {0.3f, -0.3f, 0.8f, 1.1f, 2.7f, -3.3f, 5.5f}) {
    const int n = 40000;
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += e2m1_decode(e2m1_stochastic(v, 11, static_cast<uint64_t>(i)));
    EXPECT_NEAR(sum / n, v, 0.012) << v;  // sigma <= 1 / (2 sqrt(n)) = 0.0025 for a step of 2
  }
  // Tensor level: the mean over seeds of the dequantized tensor approaches x.
  const std::vector<float> x = randn(64, 8);
  const int seeds = 2000;
  std::vector<double> mean(x.size(), 0.0);
  Nvfp4Tensor t;
  for (int s = 0; s < seeds; ++s) {
    t = nvfp4_quantize(x.data(), 1, 64, {Nvfp4Mode::k1x16, true, static_cast<uint64_t>(s)});
    const std::vector<float> y = dequant(t);
    for (size_t i = 0; i < x.size(); ++i) mean[i] += y[i] / seeds;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = e4m3_decode(t.scales[i / 16]) * static_cast<double>(t.global_scale);
    // step <= 2 d, sigma <= d / sqrt(seeds); allow 6 sigma
    EXPECT_NEAR(mean[i], x[i], 6.0 * d / std::sqrt(static_cast<double>(seeds))) << i;
  }
}

TEST(QuantStochastic, GridValuesNeverMove) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint64_t s = 0; s < 200; ++s)
    for (int k = 0; k < 8; ++k) {
      EXPECT_EQ(e2m1_stochastic(grid[k], s, 3 * s + k), k);
      EXPECT_EQ(e2m1_stochastic(-grid[k], s, 3 * s + k), k | 8);
    }
  EXPECT_EQ(e2m1_stochastic(7.0f, 1, 1), 0x7);  // saturates
  EXPECT_EQ(e2m1_stochastic(std::numeric_limits<float>::quiet_NaN(), 1, 1), 0x7);
  // A whole block already on the grid (scale 448 * s_global = 1) is unchanged by SR.
  std::vector<float> x(16);
  for (int j = 0; j < 16; ++j) x[j] = 448.0f * grid[j % 8] * (j >= 8 ? -1.0f : 1.0f);
  x[0] = 2688.0f;
  for (uint64_t s = 0; s < 50; ++s) {
    const Nvfp4Tensor t = nvfp4_quantize(x.data(), 1, 16, {Nvfp4Mode::k1x16, true, s});
    EXPECT_EQ(dequant(t), x);
  }
}
