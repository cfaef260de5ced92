// qdq_math.h, the arithmetic the CUDA kernels run, checked on the host against the CPU
// reference (minifloat.h, nvfp4.h) bit for bit: every encoder over all bf16 bit patterns, a
// stride through all float patterns and the neighbourhood of every code and midpoint; the
// hash, stochastic rounding, bf16 rounding; and a host emulation of the kernels (per-block
// scale, codes, values, the Hadamard butterfly) against nvfp4_qdq_cpu on the edge matrices.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quant/minifloat.h"
#include "quant/nvfp4.h"
#include "quant/qdq_cpu.h"
#include "quant/qdq_math.h"
#include "quant_test_inputs.h"

using namespace parallax::quant;
using parallax::quant::testing::bits_float;
using parallax::quant::testing::float_bits;

namespace {

// The floats worth trying: all bf16 patterns, a stride through the float patterns, and
// +-3 ulps around every decoded value of every format and every midpoint between neighbours.
std::vector<float> probe_floats() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000; ++h) v.push_back(bits_float(h << 16));
  for (uint64_t u = 0; u < 0x100000000ULL; u += 1021) v.push_back(bits_float(static_cast<uint32_t>(u)));
  std::vector<float> anchors;
  for (int c = 0; c < 256; ++c) {
    anchors.push_back(e4m3_decode(static_cast<uint8_t>(c)));
    anchors.push_back(e5m2_decode(static_cast<uint8_t>(c)));
    if (c < 16) anchors.push_back(e2m1_decode(static_cast<uint8_t>(c)));
  }
  for (int c = 0; c + 1 < 0x7F; ++c) {
    anchors.push_back(0.5f * (e4m3_decode(c) + e4m3_decode(c + 1)));
    anchors.push_back(0.5f * (e5m2_decode(c) + e5m2_decode(c + 1)));
  }
  for (int c = 0; c < 7; ++c) anchors.push_back(0.5f * (e2m1_decode(c) + e2m1_decode(c + 1)));
  for (float a : anchors) {
    if (!std::isfinite(a)) continue;
    for (float s : {a, -a}) {
      float lo = s, hi = s;
      v.push_back(s);
      for (int k = 0; k < 3; ++k) {
        lo = std::nextafter(lo, -INFINITY);
        hi = std::nextafter(hi, INFINITY);
        v.push_back(lo);
        v.push_back(hi);
      }
    }
  }
  return v;
}

bool same_bits(float a, float b) { return float_bits(a) == float_bits(b); }

}  // namespace

TEST(QuantQdqMath, EncodersMatchTheReference) {
  const std::vector<float> xs = probe_floats();
  size_t bad = 0;
  for (float x : xs) {
    bad += qdq::e2m1_encode(x) != e2m1_encode(x);
    bad += qdq::e4m3_encode(x) != e4m3_encode(x, true);
    bad += qdq::fp8_encode(x, qdq::e4m3_spec(), false) != e4m3_encode(x, false);
    bad += qdq::fp8_encode(x, qdq::e5m2_spec(), false) != e5m2_encode(x, false);
    bad += qdq::fp8_encode(x, qdq::e5m2_spec(), true) != e5m2_encode(x, true);
    if (bad && bad < 5) ADD_FAILURE() << "first mismatch at x bits 0x" << std::hex << float_bits(x);
  }
  EXPECT_EQ(bad, 0u) << "of " << xs.size() << " floats x 5 encoders";
}

TEST(QuantQdqMath, DecodersMatchTheReference) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t b = static_cast<uint8_t>(c);
    EXPECT_TRUE(same_bits(qdq::e4m3_decode(b), e4m3_decode(b))) << c;
    EXPECT_TRUE(same_bits(qdq::fp8_decode(b, qdq::e5m2_spec()), e5m2_decode(b))) << c;
    if (c < 16) EXPECT_TRUE(same_bits(qdq::e2m1_decode(b), e2m1_decode(b))) << c;
  }
}

TEST(QuantQdqMath, HashAndStochasticRoundingMatchTheReference) {
  EXPECT_EQ(qdq::hash_keyed(qdq::hash_key(0), 0), 0x48218226u);
  EXPECT_EQ(qdq::hash_keyed(qdq::hash_key(42), 7), 0x32028F50u);
  std::mt19937_64 g(5);
  for (int t = 0; t < 20000; ++t) {
    const uint64_t seed = g(), i = g() >> (t % 64);
    ASSERT_EQ(qdq::hash_keyed(qdq::hash_key(seed), i), hash32(seed, i));
    ASSERT_TRUE(same_bits(qdq::uniform_keyed(qdq::hash_key(seed), i), uniform01(seed, i)));
  }
  const std::vector<float> xs = probe_floats();
  size_t bad = 0;
  for (size_t k = 0; k < xs.size(); k += 3) {
    const float v = std::isfinite(xs[k]) ? std::fmod(xs[k], 8.0f) : xs[k];
    bad += qdq::e2m1_stochastic(v, qdq::hash_key(k), k * 31) != e2m1_stochastic(v, k, k * 31);
  }
  EXPECT_EQ(bad, 0u);
}

TEST(QuantQdqMath, Bf16RoundsToNearestEven) {
  EXPECT_EQ(qdq::f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(qdq::f32_to_bf16(bits_float(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(qdq::f32_to_bf16(bits_float(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(qdq::f32_to_bf16(bits_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(qdq::f32_to_bf16(bits_float(0x7F7FFFFFu)), 0x7F80);  // overflow to inf
  EXPECT_EQ(qdq::f32_to_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(qdq::f32_to_bf16(NAN), 0x7FC0);
  EXPECT_EQ(qdq::f32_to_bf16(-0.0f), 0x8000);
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7FFF) <= 0x7F80) ASSERT_EQ(qdq::f32_to_bf16(qdq::bf16_to_f32(static_cast<uint16_t>(h))), h);
}

namespace {

// The kernels' computation, on the host: qdq_math's functions in the kernels' order.
void emulate(const std::vector<float>& x0, size_t rows, size_t cols, bool tile, bool sr, uint64_t seed, bool rht,
             uint64_t rht_seed, std::vector<float>& y, std::vector<uint8_t>& codes, std::vector<uint8_t>& scales,
             float ws[2]) {
  std::vector<float> x = x0;
  if (rht) {
    float s[16];
    for (int j = 0; j < 16; ++j) s[j] = qdq::hadamard_sign(qdq::hash_key(rht_seed), j);
    for (size_t g = 0; g < x.size(); g += 16) qdq::hadamard16_group(x.data() + g, s, false);
  }
  float amax = 0.0f;
  for (float v : x)
    if (qdq::is_finite(v)) amax = qdq::max_nonneg(amax, qdq::abs_(v));
  const float sg = qdq::global_scale(amax);
  ws[0] = amax;
  ws[1] = sg;
  const size_t bh = tile ? 16 : 1, gpr = cols / 16;
  y.assign(x.size(), 0.0f);
  codes.assign(x.size() / 2, 0);
  scales.assign((rows / bh) * gpr, 0);
  const uint64_t key = qdq::hash_key(seed);
  for (size_t br = 0; br < rows / bh; ++br)
    for (size_t bc = 0; bc < gpr; ++bc) {
      float m = 0.0f;
      for (size_t r = br * bh; r < (br + 1) * bh; ++r)
        for (size_t c = bc * 16; c < bc * 16 + 16; ++c) {
          const float v = x[r * cols + c];
          m = qdq::is_finite(v) ? qdq::max_nonneg(m, qdq::abs_(v)) : INFINITY;
          if (m == INFINITY) break;
        }
      const qdq::BlockScale b = qdq::block_scale(m, sg);
      scales[br * gpr + bc] = b.code;
      for (size_t r = br * bh; r < (br + 1) * bh; ++r)
        for (size_t c = bc * 16; c < bc * 16 + 16; ++c) {
          const size_t i = r * cols + c;
          const uint8_t code = qdq::element_code(x[i], b, sr, key, i);
          codes[i / 2] |= static_cast<uint8_t>(code << (4 * (i % 2)));
          y[i] = qdq::element_value(code, b, sg);
        }
    }
}

void expect_emulation_matches(const std::vector<float>& x, size_t rows, size_t cols) {
  for (int variant = 0; variant < 8; ++variant) {
    const bool tile = variant & 1, sr = variant & 2, rht = variant & 4;
    std::vector<float> y, yr(x.size());
    std::vector<uint8_t> c, s, cr(x.size() / 2), sr_((tile ? rows / 16 : rows) * (cols / 16));
    float ws[2], wsr[2];
    emulate(x, rows, cols, tile, sr, 1234, rht, 99, y, c, s, ws);
    nvfp4_qdq_cpu(x.data(), QdqDtype::kF32, yr.data(), cr.data(), sr_.data(), wsr, rows, cols, tile, sr, 1234, rht, 99);
    SCOPED_TRACE("tile=" + std::to_string(tile) + " sr=" + std::to_string(sr) + " rht=" + std::to_string(rht));
    EXPECT_EQ(float_bits(ws[0]), float_bits(wsr[0]));
    EXPECT_EQ(float_bits(ws[1]), float_bits(wsr[1]));
    EXPECT_EQ(c, cr);
    EXPECT_EQ(s, sr_);
    size_t bad = 0;
    for (size_t i = 0; i < y.size(); ++i) bad += float_bits(y[i]) != float_bits(yr[i]);
    EXPECT_EQ(bad, 0u);
  }
}

}  // namespace

TEST(QuantQdqMath, KernelEmulationMatchesTheCpuImplementation) {
  expect_emulation_matches(parallax::quant::testing::edge_matrix(64, 128, 1), 64, 128);
  expect_emulation_matches(parallax::quant::testing::edge_matrix(32, 48, 2, false), 32, 48);
  expect_emulation_matches(parallax::quant::testing::tiny_matrix(16, 32, 3), 16, 32);
  expect_emulation_matches(std::vector<float>(16 * 16, 0.0f), 16, 16);
}

TEST(QuantQdqMath, CpuImplementationOnBf16IsTheF32OneRounded) {
  const size_t rows = 32, cols = 64;
  std::vector<float> x = parallax::quant::testing::edge_matrix(rows, cols, 4);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = qdq::f32_to_bf16(x[i]);
    x[i] = qdq::bf16_to_f32(xb[i]);
  }
  std::vector<float> yf(x.size());
  std::vector<uint16_t> yb(x.size());
  float ws[2];
  nvfp4_qdq_cpu(x.data(), QdqDtype::kF32, yf.data(), nullptr, nullptr, ws, rows, cols, false, true, 7, true, 8);
  nvfp4_qdq_cpu(xb.data(), QdqDtype::kBF16, yb.data(), nullptr, nullptr, ws, rows, cols, false, true, 7, true, 8);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(yb[i], qdq::f32_to_bf16(yf[i])) << i;
  EXPECT_THROW(nvfp4_qdq_cpu(x.data(), QdqDtype::kF32, yf.data(), nullptr, nullptr, ws, rows, 8, false, false, 0,
                             false, 0),
               QuantError);
}
