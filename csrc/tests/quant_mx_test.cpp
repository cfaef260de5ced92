// MX quantization: qdq_mx.h (the arithmetic the CUDA kernel runs, host and device) against the
// CPU reference mx.h (written from the OCP specification with minifloat.h's encoders) bit for
// bit: the E8M0 scale code of both rules over a stride through every float pattern and around
// every power of two and every max_elem * 2^k; every representable element value round-tripping
// exactly; saturation; zero, signed-zero, NaN and inf blocks; random blocks with RNE and
// stochastic rounding through mx_block and through mx_qdq_cpu (float32 and bf16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/minifloat.h"
#include "quant/mx.h"
#include "quant/qdq_cpu.h"
#include "quant/qdq_mx.h"
#include "quant_test_inputs.h"

using namespace parallax::quant;
using parallax::quant::testing::bits_float;
using parallax::quant::testing::float_bits;

namespace {

const MxElem kElems[] = {MxElem::kE4M3, MxElem::kE5M2, MxElem::kE2M1};
const MxRule kRules[] = {MxRule::kFloor, MxRule::kRceil};
const float kMax[] = {448.0f, 57344.0f, 6.0f};

std::vector<float> amax_probes() {
  std::vector<float> v = {0.0f, bits_float(1), bits_float(0x007FFFFF), bits_float(0x00800000), bits_float(0x7F7FFFFF)};
  for (uint64_t u = 1; u < 0x7F800000ULL; u += 4099) v.push_back(bits_float(static_cast<uint32_t>(u)));
  for (int k = -149; k <= 127; ++k)
    for (float base : {1.0f, 1.5f, 1.75f, 6.0f, 448.0f, 57344.0f}) {
      const float a = std::ldexp(base, k);
      if (!std::isfinite(a) || a == 0.0f) continue;
      v.push_back(a);
      v.push_back(std::nextafter(a, 0.0f));
      v.push_back(std::nextafter(a, INFINITY));
    }
  return v;
}

}  // namespace

TEST(QuantMx, ScaleCodeMatchesTheReference) {
  const std::vector<float> probes = amax_probes();
  for (MxElem e : kElems)
    for (MxRule r : kRules) {
      const qdq::MxSpec m = qdq::mx_spec(static_cast<int>(e));
      size_t bad = 0;
      for (float a : probes) bad += qdq::mx_scale_code(a, m, static_cast<int>(r)) != mx_scale_code_ref(a, e, r);
      EXPECT_EQ(bad, 0u) << "elem " << static_cast<int>(e) << " rule " << static_cast<int>(r);
      EXPECT_EQ(qdq::mx_scale_code(INFINITY, m, static_cast<int>(r)), 0xFF);
      EXPECT_EQ(qdq::mx_scale_code(NAN, m, static_cast<int>(r)), 0xFF);
    }
}

TEST(QuantMx, ScaleRulesOnKnownValues) {
  // E4M3: amax 448 -> 2^0 under both rules; 449 -> floor 2^0 (449 saturates to 448), rceil 2^1;
  // 256 -> floor 2^0, rceil 2^0 (256 <= 448); 1 -> floor 2^-8, rceil 2^-8 (ceil(log2(1/448)) = -8).
  EXPECT_EQ(mx_scale_code_ref(448.0f, MxElem::kE4M3, MxRule::kFloor), 127);
  EXPECT_EQ(mx_scale_code_ref(448.0f, MxElem::kE4M3, MxRule::kRceil), 127);
  EXPECT_EQ(mx_scale_code_ref(449.0f, MxElem::kE4M3, MxRule::kFloor), 127);
  EXPECT_EQ(mx_scale_code_ref(449.0f, MxElem::kE4M3, MxRule::kRceil), 128);
  EXPECT_EQ(mx_scale_code_ref(1.0f, MxElem::kE4M3, MxRule::kRceil), 127 - 8);
  EXPECT_EQ(mx_scale_code_ref(7.0f, MxElem::kE2M1, MxRule::kFloor), 127);   // floor(log2 7) - 2 = 0
  EXPECT_EQ(mx_scale_code_ref(7.0f, MxElem::kE2M1, MxRule::kRceil), 128);   // 7/6 -> 2^1
  EXPECT_EQ(mx_scale_code_ref(0.0f, MxElem::kE2M1, MxRule::kRceil), 0);     // clamped to 2^-127
  EXPECT_EQ(mx_scale_code_ref(bits_float(1), MxElem::kE4M3, MxRule::kFloor), 0);  // 2^-157 -> 2^-127
  EXPECT_EQ(mx_scale_code_ref(bits_float(0x7F7FFFFF), MxElem::kE2M1, MxRule::kFloor), 127 + 125);
  EXPECT_EQ(float_bits(e8m0_decode(0)), 0x00400000u);
  EXPECT_EQ(float_bits(qdq::e8m0_value(0)), 0x00400000u);
  EXPECT_EQ(float_bits(qdq::e8m0_value(254)), 0x7F000000u);
  EXPECT_TRUE(std::isnan(qdq::e8m0_value(0xFF)));
}

TEST(QuantMx, EveryRepresentableValueRoundTrips) {
  // A block holding every element code (both signs) scaled by 2^k, its amax max_elem * 2^k (the
  // scale is 2^k under both rules): codes and values come back exactly.
  for (int ei = 0; ei < 3; ++ei) {
    const MxElem e = kElems[ei];
    std::vector<uint8_t> codes;
    for (int c = 0; c < 256; ++c) {
      const float d = ei == 2 ? (c < 16 ? e2m1_decode(static_cast<uint8_t>(c)) : NAN)
                              : fp8_decode(static_cast<uint8_t>(c), ei == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
      if (std::isfinite(d)) codes.push_back(static_cast<uint8_t>(c));
    }
    for (int k : {-127, -100, -3, 0, 5, 90}) {
      std::vector<float> x;
      std::vector<uint8_t> want;
      for (size_t i = 0; i < codes.size(); ++i) {
        if (x.size() % 32 == 0) {  // each block starts with its amax
          x.push_back(std::ldexp(kMax[ei], k));
          want.push_back(ei == 2 ? 0x7 : (ei == 0 ? 0x7E : 0x7B));
        }
        const uint8_t c = codes[i];
        const float d = ei == 2 ? e2m1_decode(c) : fp8_decode(c, ei == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
        x.push_back(std::ldexp(d, k));
        want.push_back(c);
      }
      while (x.size() % 32) {
        x.push_back(0.0f);
        want.push_back(0);
      }
      for (MxRule r : kRules) {
        const MxTensor t = mx_quantize(x.data(), 1, x.size(), MxOptions{e, r, false, 0});
        std::vector<float> y(x.size());
        mx_dequantize(t, y.data());
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(t.codes[i], want[i]) << "elem " << ei << " k " << k << " i " << i;
          ASSERT_EQ(float_bits(y[i]), float_bits(x[i])) << "elem " << ei << " k " << k << " i " << i;
        }
        for (uint8_t s : t.scales) ASSERT_EQ(s, k + 127);
      }
    }
  }
}

namespace {

// Both implementations on one [rows, cols] float32 matrix, every field compared.
void expect_same(const std::vector<float>& x, size_t rows, size_t cols, MxElem e, MxRule r, bool sr, uint64_t seed) {
  SCOPED_TRACE("elem " + std::to_string(static_cast<int>(e)) + " rule " + std::to_string(static_cast<int>(r)) +
               (sr ? " SR" : " RNE"));
  const MxTensor t = mx_quantize(x.data(), rows, cols, MxOptions{e, r, sr, seed});
  std::vector<float> y(x.size());
  mx_dequantize(t, y.data());
  const qdq::MxSpec m = qdq::mx_spec(static_cast<int>(e));
  const uint64_t key = qdq::hash_key(seed);
  size_t bad = 0;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    uint8_t c[32];
    float v[32];
    const uint8_t s = qdq::mx_block(x.data() + 32 * b, 32, m, static_cast<int>(r), sr, key, 32 * b, c, v);
    bad += s != t.scales[b];
    for (int i = 0; i < 32; ++i) bad += c[i] != t.codes[32 * b + i] || float_bits(v[i]) != float_bits(y[32 * b + i]);
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace

TEST(QuantMx, BlocksMatchTheReferenceOnEdgeAndRandomMatrices) {
  std::vector<std::vector<float>> inputs = {parallax::quant::testing::edge_matrix(64, 256, 5), parallax::quant::testing::tiny_matrix(64, 256, 6)};
  std::vector<float> all_bf16;  // every bf16 pattern, NaN and inf blocks included
  for (uint32_t h = 0; h < 0x10000; ++h) all_bf16.push_back(bits_float(h << 16));
  inputs.push_back(all_bf16);
  for (const auto& x : inputs)
    for (MxElem e : kElems)
      for (MxRule r : kRules)
        for (bool sr : {false, true}) expect_same(x, x.size() / 256, 256, e, r, sr, 1234);
}

TEST(QuantMx, StochasticRoundingIsUnbiasedAndKeepsTheGrid) {
  // 1.1 (between E4M3's 1.0 and 1.125) rounds up with probability 0.8; on-grid values never move.
  std::vector<float> x(32 * 2048, 1.1f);
  for (size_t b = 0; b < x.size() / 32; ++b) x[32 * b] = 448.0f;  // scale 2^0
  const MxTensor t = mx_quantize(x.data(), 1, x.size(), MxOptions{MxElem::kE4M3, MxRule::kRceil, true, 3});
  size_t up = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 32 == 0) {
      EXPECT_EQ(t.codes[i], 0x7E);
      continue;
    }
    ++n;
    up += t.codes[i] == 0x39;  // 1.125
    EXPECT_TRUE(t.codes[i] == 0x38 || t.codes[i] == 0x39);
  }
  EXPECT_NEAR(static_cast<double>(up) / n, 0.8, 0.01);
}

TEST(QuantMx, SpecialBlocksAndShapes) {
  std::vector<float> x(4 * 32, 1.0f);
  for (int i = 0; i < 32; ++i) x[i] = i % 2 ? -0.0f : 0.0f;  // a zero block keeps its signs
  x[32 + 5] = NAN;                                              // a NaN block
  x[64 + 7] = -INFINITY;                                        // an inf block
  for (MxElem e : kElems) {
    const MxTensor t = mx_quantize(x.data(), 1, x.size(), MxOptions{e, MxRule::kFloor, false, 0});
    std::vector<float> y(x.size());
    mx_dequantize(t, y.data());
    EXPECT_EQ(t.scales[0], 0);
    EXPECT_EQ(t.scales[1], 0xFF);
    EXPECT_EQ(t.scales[2], 0xFF);
    EXPECT_EQ(t.scales[3], 127 - (e == MxElem::kE4M3 ? 8 : (e == MxElem::kE5M2 ? 15 : 2)));
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(float_bits(y[i]), float_bits(x[i]));
      EXPECT_TRUE(std::isnan(y[32 + i]) && std::isnan(y[64 + i]));
      EXPECT_EQ(t.codes[32 + i], 0);
      EXPECT_EQ(y[96 + i], 1.0f);
    }
  }
  EXPECT_THROW(mx_quantize(x.data(), 1, 48, MxOptions{}), QuantError);
  std::vector<uint16_t> out(64);
  EXPECT_THROW(mx_qdq_cpu(x.data(), QdqDtype::kF32, out.data(), nullptr, nullptr, 1, 32, 3, 0, false, 0), QuantError);
  EXPECT_THROW(mx_qdq_cpu(x.data(), QdqDtype::kF32, out.data(), nullptr, nullptr, 1, 32, 0, 2, false, 0), QuantError);
}

TEST(QuantMx, TheCpuFunctionIsTheReferenceInBothDtypes) {
  const std::vector<float> x = parallax::quant::testing::edge_matrix(32, 128, 8);
  std::vector<uint16_t> xb(x.size()), yb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = qdq::f32_to_bf16(x[i]);
  std::vector<float> wide(x.size()), y(x.size()), yref(x.size());
  for (size_t i = 0; i < x.size(); ++i) wide[i] = qdq::bf16_to_f32(xb[i]);
  std::vector<uint8_t> codes(x.size()), scales(x.size() / 32);
  mx_qdq_cpu(xb.data(), QdqDtype::kBF16, yb.data(), codes.data(), scales.data(), 32, 128, 2, 1, true, 11);
  const MxTensor t = mx_quantize(wide.data(), 32, 128, MxOptions{MxElem::kE2M1, MxRule::kRceil, true, 11});
  mx_dequantize(t, yref.data());
  EXPECT_EQ(codes, t.codes);
  EXPECT_EQ(scales, t.scales);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(yb[i], qdq::f32_to_bf16(yref[i])) << i;
  mx_qdq_cpu(x.data(), QdqDtype::kF32, y.data(), nullptr, nullptr, 32, 128, 0, 0, false, 0);
  const MxTensor t2 = mx_quantize(x.data(), 32, 128, MxOptions{});
  mx_dequantize(t2, yref.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(float_bits(y[i]), float_bits(yref[i])) << i;
}
