// qdq_math.h, the arithmetic the CUDA kernels run, checked on the host against the CPU
// reference (minifloat.h, nvfp4.h) bit for bit: every encoder over all bf16 bit patterns, a
// stride through all float patterns and the neighbourhood of every code and midpoint; the
// hash, stochastic rounding, bf16 rounding; and a host emulation of the kernels (per-block
// scale, codes, values, the Hadamard butterfly) against nvfp4_qdq_cpu on the edge matrices.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
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

// ---- The kernels' fast paths (qdq_math.h, "fast paths"), against the functions above ----------

namespace {

// The magnitude of the fast path for |x| with bits a, and the reference: e2m1_encode of the
// IEEE quotient.
uint32_t fast_mag(float x, const uint32_t thr[7]) { return qdq::mag_from_thresholds(float_bits(x) & 0x7FFFFFFFu, thr); }
uint32_t division_mag(float x, float denom) { return qdq::e2m1_encode(qdq::div(x, denom)) & 7u; }

void thresholds_of(float denom, uint32_t thr[7]) {
  for (int k = 0; k < 7; ++k) thr[k] = qdq::e2m1_threshold(denom, k);
}

// Denominators for the threshold tests: powers of two over the whole fast range, all-ones and
// single-bit mantissas, products d * s_global of E4M3 scales, and random floats >= 2^-120.
std::vector<float> test_denominators(size_t random_count) {
  std::vector<float> d;
  for (int e = -120; e <= 120; e += 7) d.push_back(std::ldexp(1.0f, e));
  for (int e = -120; e <= 120; e += 31) {
    d.push_back(std::ldexp(bits_float(0x3FFFFFFFu), e));  // 1.99999988 * 2^e
    d.push_back(std::ldexp(bits_float(0x3F800001u), e));  // 1 + 2^-23
    d.push_back(std::ldexp(1.5f, e));
    d.push_back(std::ldexp(1.0f / 3.0f, e));
  }
  d.push_back(1.0f);
  d.push_back(bits_float(0x7E7FFFFFu));  // large: thresholds up to ~5.3e37
  std::mt19937 g(11);
  for (int c = 1; c < 0x7F; c += 9)
    for (float sg : {1.0f, 0.0173f, 3.1e-20f, 7.7e15f}) d.push_back(qdq::mul(qdq::e4m3_decode(static_cast<uint8_t>(c)), sg));
  std::uniform_int_distribution<uint32_t> bits(float_bits(qdq::fast_min_denom()), 0x7E7FFFFFu);
  for (size_t k = 0; k < random_count; ++k) d.push_back(bits_float(bits(g)));
  return d;
}

}  // namespace

// The cut points: with denominator 1 the fast path is e2m1_encode itself, checked on every float
// in [2^-3, 8] (below 2^-3 everything is magnitude 0: a stride there) and far above.
TEST(QuantQdqFast, ThresholdsAtDenominatorOneAreTheE2m1Encoder) {
  uint32_t thr[7];
  thresholds_of(1.0f, thr);
  size_t bad = 0;
  for (uint32_t u = 0x3E000000u; u <= 0x41000000u; ++u) bad += fast_mag(bits_float(u), thr) != division_mag(bits_float(u), 1.0f);
  for (uint32_t u = 0; u < 0x3E000000u; u += 97) bad += fast_mag(bits_float(u), thr) != division_mag(bits_float(u), 1.0f);
  for (uint32_t u = 0x41000000u; u < 0x7F800000u; u += 997) bad += fast_mag(bits_float(u), thr) != division_mag(bits_float(u), 1.0f);
  EXPECT_EQ(bad, 0u);
}

// For many denominators: the thresholds ascend, and the magnitude of every float within 2^16 ulps
// of every threshold, and of random floats, is the one of the IEEE division (both signs).
TEST(QuantQdqFast, ThresholdsMatchTheDivisionNearEveryCut) {
  const std::vector<float> dens = test_denominators(120);
  std::mt19937 g(12);
  size_t bad = 0, checked = 0;
  for (size_t n = 0; n < dens.size(); ++n) {
    const float den = dens[n];
    uint32_t thr[7];
    thresholds_of(den, thr);
    for (int k = 0; k + 1 < 7; ++k) ASSERT_LE(thr[k], thr[k + 1]) << den;
    const int reach = n < 40 ? (1 << 16) : (1 << 12);
    for (int k = 0; k < 7; ++k)
      for (int64_t o = -reach; o <= reach; ++o) {
        const float x = bits_float(static_cast<uint32_t>(static_cast<int64_t>(thr[k]) + o));
        const float sx = (o & 1) ? -x : x;
        bad += fast_mag(sx, thr) != division_mag(sx, den);
        ++checked;
      }
    std::uniform_int_distribution<uint32_t> near(thr[0] > (48u << 23) ? thr[0] - (48u << 23) : 0u,
                                                 std::min(thr[6] + (8u << 23), 0x7F7FFFFFu));
    for (int r = 0; r < 20000; ++r) {
      const float x = bits_float(near(g) | (g() & 0x80000000u));
      bad += fast_mag(x, thr) != division_mag(x, den);
      ++checked;
    }
    if (bad) {
      ADD_FAILURE() << "denominator bits 0x" << std::hex << float_bits(den);
      break;
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << checked;
}

// Tens of millions of random (float, denominator) pairs over the whole fast range.
TEST(QuantQdqFast, ThresholdsMatchTheDivisionOnRandomPairs) {
  std::mt19937 g(13);
  std::uniform_int_distribution<uint32_t> dbits(float_bits(qdq::fast_min_denom()), 0x7E7FFFFFu);
  size_t bad = 0;
  for (int n = 0; n < 4000; ++n) {
    const float den = bits_float(dbits(g));
    uint32_t thr[7];
    thresholds_of(den, thr);
    // |x| within 2^-8 .. 2^8 of the denominator, where all the codes are
    const uint32_t lo = float_bits(den) > (8u << 23) ? float_bits(den) - (8u << 23) : 0u;
    std::uniform_int_distribution<uint32_t> xbits(lo, std::min(float_bits(den) + (8u << 23), 0x7F7FFFFFu));
    for (int r = 0; r < 5000; ++r) {
      const float x = bits_float(xbits(g) | (g() & 0x80000000u));
      bad += fast_mag(x, thr) != division_mag(x, den);
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(QuantQdqFast, E4m3EncodeFastIsTheEncoder) {
  size_t bad = 0;
  // every float whose E4M3 code is not 0 or saturated: |x| in [2^-11, 2^9] (2^-10 and below -> 0,
  // above 464 -> 0x7E), both signs; then a stride through everything, bf16 patterns, specials
  for (uint32_t u = 0x3A000000u; u <= 0x44000000u; ++u) {
    bad += qdq::e4m3_encode_fast(bits_float(u)) != qdq::e4m3_encode(bits_float(u));
    bad += qdq::e4m3_encode_fast(bits_float(u | 0x80000000u)) != qdq::e4m3_encode(bits_float(u | 0x80000000u));
  }
  for (uint64_t u = 0; u < 0x100000000ULL; u += 251) bad += qdq::e4m3_encode_fast(bits_float(static_cast<uint32_t>(u))) != qdq::e4m3_encode(bits_float(static_cast<uint32_t>(u)));
  for (uint32_t h = 0; h < 0x10000; ++h) bad += qdq::e4m3_encode_fast(bits_float(h << 16)) != qdq::e4m3_encode(bits_float(h << 16));
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 448.0f, 464.0f, bits_float(0x43E7FFFFu), 480.0f})
    bad += qdq::e4m3_encode_fast(x) != qdq::e4m3_encode(x);
  EXPECT_EQ(bad, 0u);
}

TEST(QuantQdqFast, StochasticFastIsTheStochasticRounding) {
  size_t bad = 0;
  for (uint32_t m = 0; m < 8; ++m) EXPECT_TRUE(same_bits(qdq::e2m1_magnitude_bits(m), qdq::e2m1_magnitude(m))) << m;
  for (uint32_t h = 0; h < 0x10000; ++h)
    for (uint64_t s : {0ULL, 77ULL, 0xFFFFFFFFFFFFFFFFULL}) {
      const float v = qdq::bf16_to_f32(static_cast<uint16_t>(h));
      const uint64_t key = qdq::hash_key(s), i = h * 977ULL + s;
      bad += qdq::e2m1_stochastic_fast(v, key, i) != qdq::e2m1_stochastic(v, key, i);
    }
  std::mt19937_64 g(14);
  std::uniform_int_distribution<uint32_t> grid(0, 0x40C80000u);  // [0, 6.25]
  for (int r = 0; r < 10000000; ++r) {
    const uint32_t b = grid(g) | (r & 1 ? 0x80000000u : 0u);
    const uint64_t key = g(), i = g();
    bad += qdq::e2m1_stochastic_fast(bits_float(b), key, i) != qdq::e2m1_stochastic(bits_float(b), key, i);
  }
  const std::vector<float> xs = probe_floats();
  for (size_t k = 0; k < xs.size(); k += 5) bad += qdq::e2m1_stochastic_fast(xs[k], qdq::hash_key(k), k) != qdq::e2m1_stochastic(xs[k], qdq::hash_key(k), k);
  EXPECT_EQ(bad, 0u);
}

namespace {

// nvfp4.cpp's e2m1_stochastic with the draw given: u = k * 2^-24 instead of uniform01(seed, i).
uint32_t stochastic_with_draw(float v, uint32_t k) {
  static const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const uint32_t sign = std::signbit(v) ? 8u : 0u;
  const float m = std::fabs(v);
  if (m >= 6.0f) return sign | 7u;
  uint32_t lo = 0;
  while (lo < 7 && grid[lo + 1] <= m) ++lo;
  if (grid[lo] == m) return sign | lo;
  const float p = (m - grid[lo]) / (grid[lo + 1] - grid[lo]);
  const float u = static_cast<float>(k) * (1.0f / 16777216.0f);
  return sign | (u < p ? lo + 1 : lo);
}

// The draws that decide v: 0, 1, the last, and both sides of ceil(p * 2^24) (p in double).
std::vector<uint32_t> deciding_draws(float v) {
  std::vector<uint32_t> ks = {0u, 1u, 0xFFFFFEu, 0xFFFFFFu};
  static const double grid[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  const double m = std::fabs(static_cast<double>(v));
  if (m < 6.0) {
    int lo = 0;
    while (lo < 7 && grid[lo + 1] <= m) ++lo;
    const double cut = std::ceil((m - grid[lo]) / (grid[lo + 1] - grid[lo]) * 16777216.0);
    for (double d : {-2.0, -1.0, 0.0, 1.0})
      if (cut + d >= 0.0 && cut + d < 16777216.0) ks.push_back(static_cast<uint32_t>(cut + d));
  }
  return ks;
}

}  // namespace

// sr_draw is hash_keyed(key, index0 + j) >> 8 (so uniform_keyed is draw * 2^-24), wrapping too.
TEST(QuantQdqFast, SrDrawIsTheHash) {
  std::mt19937_64 g(21);
  for (int t = 0; t < 200000; ++t) {
    const uint64_t key = g(), index0 = t % 3 == 0 ? ~uint64_t{0} - (g() % 40) : g() >> (t % 64);
    const uint64_t base = qdq::sr_base(key, index0);
    for (uint32_t j : {0u, 1u, 7u, 15u, static_cast<uint32_t>(g() % 1000)}) {
      ASSERT_EQ(qdq::sr_draw(base, j), qdq::hash_keyed(key, index0 + j) >> 8) << t;
      ASSERT_TRUE(same_bits(static_cast<float>(qdq::sr_draw(base, j)) * (1.0f / 16777216.0f),
                            qdq::uniform_keyed(key, index0 + j)));
    }
  }
}

// e2m1_sr_code against the reference's rounding: with the hash (nvfp4.h's e2m1_stochastic, every
// non-NaN bf16 pattern, random values in [0, 6.25], the probe floats) and with the draws on both
// sides of each value's decision (stochastic_with_draw, which the first part ties to the hash).
TEST(QuantQdqFast, SrCodeIsTheStochasticRounding) {
  size_t bad = 0, tried = 0;
  auto check = [&](float v, uint32_t k) {
    ++tried;
    const uint32_t got = qdq::e2m1_sr_code(v, k), want = stochastic_with_draw(v, k);
    if (got != want && ++bad < 5)
      ADD_FAILURE() << "v bits 0x" << std::hex << float_bits(v) << " k 0x" << k << ": " << got << " want " << want;
  };
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float v = qdq::bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    for (uint64_t s : {0ULL, 77ULL, 0xFFFFFFFFFFFFFFFFULL}) {
      const uint64_t i = h * 977ULL + s;
      const uint32_t k = qdq::hash_keyed(qdq::hash_key(s), i) >> 8;
      bad += qdq::e2m1_sr_code(v, k) != e2m1_stochastic(v, s, i);
      bad += stochastic_with_draw(v, k) != e2m1_stochastic(v, s, i);
    }
    for (uint32_t k : deciding_draws(v)) check(v, k);
  }
  std::mt19937_64 g(22);
  std::uniform_int_distribution<uint32_t> grid(0, 0x40C80000u);  // [0, 6.25]
  for (int r = 0; r < 4000000; ++r) {
    const float v = bits_float(grid(g) | (r & 1 ? 0x80000000u : 0u));
    const uint64_t seed = g(), i = g();
    bad += qdq::e2m1_sr_code(v, qdq::hash_keyed(qdq::hash_key(seed), i) >> 8) != e2m1_stochastic(v, seed, i);
    for (uint32_t k : deciding_draws(v)) check(v, k);
  }
  const std::vector<float> xs = probe_floats();
  for (size_t k = 0; k < xs.size(); k += 5) {
    if (std::isnan(xs[k])) continue;
    bad += qdq::e2m1_sr_code(xs[k], qdq::hash_keyed(qdq::hash_key(k), k) >> 8) != e2m1_stochastic(xs[k], k, k);
    for (uint32_t d : deciding_draws(xs[k])) check(xs[k], d);
  }
  EXPECT_EQ(bad, 0u) << "of " << tried << " draws";
  EXPECT_GT(tried, 20000000u);
}

TEST(QuantQdqFast, BitHelpersAreTheInstructions) {
  // prmt: byte n of the result is byte sel[4n+2:4n] of {b, a}
  EXPECT_EQ(qdq::prmt(0x33221100u, 0x77665544u, 0x5410u), 0x55441100u);
  EXPECT_EQ(qdq::prmt(0x33221100u, 0x77665544u, 0x7632u), 0x77663322u);
  EXPECT_EQ(qdq::prmt(0x33221100u, 0x77665544u, 0x5140u), 0x55114400u);
  EXPECT_EQ(qdq::prmt(0x33221100u, 0x77665544u, 0x7362u), 0x77336622u);
  EXPECT_EQ(qdq::prmt(0x33221100u, 0x77665544u, 0xFFFF0123u), 0x00112233u);  // high half of sel unread
  EXPECT_EQ(qdq::gt_mask2(0x00050003u, 0x00040004u), 0xFFFF0000u);
  EXPECT_EQ(qdq::gt_mask2(0x7F7F0000u, 0x7FFF0000u), 0x00000000u);
  EXPECT_EQ(qdq::max_u16x2(0x80000001u, 0x7FFF0002u), 0x80000002u);
  EXPECT_EQ(qdq::max_s16x2(0x80000001u, 0x7FFFFFFFu), 0x7FFF0001u);
}

namespace {

// A group of 16 values with the block cases of nvfp4.h: random magnitudes, zeros of both signs,
// subnormals, E2M1 midpoints, NaN/inf, values at the top of the range.
std::vector<float> random_group(std::mt19937& g) {
  std::vector<float> v(16);
  const int kind = static_cast<int>(g() % 8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float s = std::ldexp(1.0f, static_cast<int>(g() % 200) - 100);
  for (int k = 0; k < 16; ++k) {
    switch (kind) {
      case 0: v[k] = 0.0f; break;
      case 1: v[k] = (g() & 1) ? -0.0f : 0.0f; break;
      case 2: v[k] = bits_float(static_cast<uint32_t>(g() & 0x807FFFFFu)); break;  // subnormals
      case 3: v[k] = (g() & 1 ? -1.0f : 1.0f) * s * (0.25f * static_cast<float>(1 + g() % 24)); break;  // grid/midpoints
      case 4: v[k] = bits_float(static_cast<uint32_t>(g())); break;  // any pattern (NaN, inf)
      default: v[k] = nd(g) * s; break;
    }
  }
  if (g() % 13 == 0) v[g() % 16] = (g() & 1) ? INFINITY : NAN;
  return v;
}

float random_sg(std::mt19937& g) {
  switch (g() % 5) {
    case 0: return 1.0f;
    case 1: return qdq::global_scale(bits_float(static_cast<uint32_t>(g() % 0x7F800000u)));  // any amax, subnormal too
    case 2: return std::ldexp(1.0f, static_cast<int>(g() % 200) - 110);
    default: return qdq::global_scale(std::ldexp(1.0f + static_cast<float>(g() % 1000) / 997.0f, static_cast<int>(g() % 60) - 30));
  }
}

// The rows of every scale code for s_global sg, in the layout of the kernel of that kind.
std::vector<qdq::FastScale> table_of(float sg, bool pairs, bool bf16_out, bool thresholds) {
  std::vector<qdq::FastScale> t(128);
  for (uint32_t c = 0; c < 128; ++c) t[c] = qdq::fast_scale(c, sg, pairs, bf16_out, thresholds);
  return t;
}

}  // namespace

// Every fast path on groups of 16, each output against element_code / element_value for the
// block's scale (block_scale): RNE with bf16 lanes, RNE on f32 (bf16 and f32 out), SR.
TEST(QuantQdqFast, GroupPathsMatchTheElementFunctions) {
  std::mt19937 g(15);
  size_t bad = 0, fast = 0, generic = 0;
  for (int t = 0; t < 3000; ++t) {
    const float sg = random_sg(g);
    const auto tp = table_of(sg, true, true, true), tf = table_of(sg, false, false, true),
               tb = table_of(sg, false, true, true), ts = table_of(sg, false, false, false),
               tsb = table_of(sg, false, true, false);
    for (int r = 0; r < 20; ++r) {
      std::vector<float> v = random_group(g);
      uint32_t u[16], w[8];
      for (int k = 0; k < 16; ++k) u[k] = float_bits(v[k]);
      // bf16 input: the values rounded to bf16 (their f32 widening is what the kernel sees)
      std::vector<float> vb(16);
      uint32_t ub[16];
      for (int k = 0; k < 16; ++k) {
        vb[k] = qdq::bf16_to_f32(qdq::f32_to_bf16(v[k]));
        ub[k] = float_bits(vb[k]);
      }
      for (int j = 0; j < 8; ++j) w[j] = (ub[2 * j] >> 16) | (ub[2 * j + 1] & 0xFFFF0000u);
      uint32_t a[8], signs[2];
      qdq::split_bf16x8(w, a, signs[0]);
      qdq::split_bf16x8(w + 4, a + 4, signs[1]);
      ASSERT_EQ(qdq::amax_bits_pairs(a), qdq::amax_bits_f32(ub));
      const uint64_t key = qdq::hash_key(static_cast<uint64_t>(t) * 31 + r), index0 = static_cast<uint64_t>(r) * 16;
      for (int path = 0; path < 7; ++path) {  // 5, 6: the previous SR path (group_sr_v1)
        const bool bf16_in = path == 0 || path == 2 || path == 4 || path == 6;
        const std::vector<float>& x = bf16_in ? vb : v;
        const uint32_t* xu = bf16_in ? ub : u;
        const uint32_t amax = qdq::amax_bits_f32(xu);
        const uint32_t sc = qdq::block_code(amax, sg);
        const float amax_b = amax >= 0x7F800000u ? INFINITY : bits_float(amax);
        const qdq::BlockScale b = qdq::block_scale(amax_b, sg);
        ASSERT_EQ(sc, b.code) << "amax bits 0x" << std::hex << amax;
        const bool sr = path >= 3, bf16_out = bf16_in;
        const auto& tab = path == 0 ? tp : path == 1 ? tf : path == 2 ? tb : path == 3 || path == 5 ? ts : tsb;
        if (sc > 0x7F || tab[sc].flags == qdq::kFlagGeneric) {
          ++generic;
          continue;
        }
        ++fast;
        uint32_t codes[2], y[16];
        if (path == 0) qdq::group_rne_pairs(w, a, signs, tab[sc], codes, y);
        else if (path == 1) qdq::group_rne_f32<false>(xu, tab[sc], codes, y);
        else if (path == 2) qdq::group_rne_f32<true>(xu, tab[sc], codes, y);
        else if (path == 3) qdq::group_sr<false>(xu, tab[sc], key, index0, codes, y);
        else if (path == 4) qdq::group_sr<true>(xu, tab[sc], key, index0, codes, y);
        else if (path == 5) qdq::group_sr_v1<false>(xu, tab[sc], key, index0, codes, y);
        else qdq::group_sr_v1<true>(xu, tab[sc], key, index0, codes, y);
        for (int k = 0; k < 16; ++k) {
          const uint8_t c = qdq::element_code(x[k], b, sr, key, index0 + k);
          const float val = qdq::element_value(c, b, sg);
          const uint32_t got_c = (codes[k >> 3] >> (4 * (k & 7))) & 0xFu;
          const uint32_t got_y = bf16_out ? ((y[k >> 1] >> (16 * (k & 1))) & 0xFFFFu) : y[k];
          const uint32_t want_y = bf16_out ? qdq::f32_to_bf16(val) : float_bits(val);
          if (got_c != c || got_y != want_y) {
            if (++bad < 5)
              ADD_FAILURE() << "path " << path << " x bits 0x" << std::hex << float_bits(x[k]) << " sg 0x" << float_bits(sg)
                            << " sc 0x" << sc << ": code " << got_c << " want " << unsigned(c) << ", value 0x" << got_y
                            << " want 0x" << want_y;
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(fast, 100000u);
  EXPECT_GT(generic, 100u);  // the generic path is taken too (tiny s_global)
}

namespace {

// The new kernels' computation on the host (quant_cuda.cu: amax_kernel, nvfp4_1x16_kernel,
// nvfp4_16x16_kernel), qdq_math.h's functions in the kernels' order, input and output in the
// dtype (bf16 as bits): the amax by the integer keys, one table row per scale code, per group the
// fast path of its kind or the generic one.
void emulate_kernels(const std::vector<uint8_t>& in, QdqDtype dt, size_t rows, size_t cols, bool tile, bool sr,
                     uint64_t seed, bool rht, uint64_t rht_seed, std::vector<uint8_t>& y, std::vector<uint8_t>& codes,
                     std::vector<uint8_t>& scales, float ws[2]) {
  const bool bf16 = dt == QdqDtype::kBF16, pairs = bf16 && !rht && !sr;
  const size_t n = rows * cols, groups = n / 16, gpr = cols / 16;
  float s[16];
  for (int j = 0; j < 16; ++j) s[j] = qdq::hadamard_sign(qdq::hash_key(rht_seed), j);
  // per group: the raw words (bf16) and the f32 bits of the (transformed) values
  std::vector<std::array<uint32_t, 16>> u(groups);
  std::vector<std::array<uint32_t, 8>> w(groups);
  for (size_t gi = 0; gi < groups; ++gi) {
    float v[16];
    for (int k = 0; k < 16; ++k) {
      if (bf16) {
        uint16_t h;
        std::memcpy(&h, in.data() + 2 * (gi * 16 + k), 2);
        v[k] = qdq::bf16_to_f32(h);
      } else {
        std::memcpy(&v[k], in.data() + 4 * (gi * 16 + k), 4);
      }
    }
    for (int j = 0; j < 8; ++j) w[gi][j] = (float_bits(v[2 * j]) >> 16) | (float_bits(v[2 * j + 1]) & 0xFFFF0000u);
    if (rht) qdq::hadamard16_group(v, s, false);
    for (int k = 0; k < 16; ++k) u[gi][k] = float_bits(v[k]);
  }
  // amax_kernel
  uint32_t m = 0;
  if (pairs || (bf16 && !rht)) {
    uint32_t lanes = 0;
    for (size_t gi = 0; gi < groups; ++gi)
      for (int j = 0; j < 8; ++j) lanes = qdq::max_s16x2(lanes, (w[gi][j] & 0x7FFF7FFFu) + 0x00800080u);
    const int32_t l = std::max<int32_t>(static_cast<int16_t>(lanes & 0xFFFFu), static_cast<int16_t>(lanes >> 16));
    m = l > 0x80 ? static_cast<uint32_t>(l - 0x80) << 16 : 0u;
  } else {
    int32_t key = 0;
    for (size_t gi = 0; gi < groups; ++gi)
      for (int k = 0; k < 16; ++k) key = std::max(key, static_cast<int32_t>((u[gi][k] & 0x7FFFFFFFu) + 0x00800000u));
    m = key > 0x00800000 ? static_cast<uint32_t>(key - 0x00800000) : 0u;
  }
  ws[0] = bits_float(m);
  const float sg = qdq::global_scale(ws[0]);
  ws[1] = sg;
  const auto table = table_of(sg, pairs, bf16, !sr);
  const uint64_t key = qdq::hash_key(seed);
  const size_t ow = bf16 ? 2 : 4;
  y.assign(n * ow, 0);
  codes.assign(n / 2, 0);
  scales.assign((tile ? rows / 16 : rows) * gpr, 0);
  // the block amax of each group: its own, or its 16x16 tile's
  std::vector<uint32_t> amax(groups);
  for (size_t gi = 0; gi < groups; ++gi) {
    if (pairs) {
      uint32_t a[8], sg2;
      qdq::split_bf16x8(w[gi].data(), a, sg2);
      qdq::split_bf16x8(w[gi].data() + 4, a + 4, sg2);
      amax[gi] = qdq::amax_bits_pairs(a);
    } else {
      amax[gi] = qdq::amax_bits_f32(u[gi].data());
    }
  }
  if (tile)
    for (size_t br = 0; br < rows / 16; ++br)
      for (size_t bc = 0; bc < gpr; ++bc) {
        uint32_t t = 0;
        for (size_t r = 0; r < 16; ++r) t = std::max(t, amax[(br * 16 + r) * gpr + bc]);
        for (size_t r = 0; r < 16; ++r) amax[(br * 16 + r) * gpr + bc] = t;
      }
  for (size_t gi = 0; gi < groups; ++gi) {
    const size_t row = gi / gpr, col = gi % gpr;
    const uint32_t sc = qdq::block_code(amax[gi], sg);
    scales[(tile ? row / 16 : row) * gpr + col] = static_cast<uint8_t>(sc);
    uint32_t c[2], out[16];
    if (sc > 0x7F || table[sc].flags == qdq::kFlagGeneric) {
      float v[16], yf[16];
      for (int k = 0; k < 16; ++k) v[k] = bits_float(u[gi][k]);
      qdq::generic_group(v, amax[gi], sg, sr, key, gi * 16, c, yf);
      for (int k = 0; k < 16; ++k) out[k] = bf16 ? qdq::f32_to_bf16(yf[k]) : float_bits(yf[k]);
      if (bf16)
        for (int j = 0; j < 8; ++j) out[j] = out[2 * j] | (out[2 * j + 1] << 16);
    } else if (pairs) {
      uint32_t a[8], sgn[2];
      qdq::split_bf16x8(w[gi].data(), a, sgn[0]);
      qdq::split_bf16x8(w[gi].data() + 4, a + 4, sgn[1]);
      qdq::group_rne_pairs(w[gi].data(), a, sgn, table[sc], c, out);
    } else if (sr) {
      bf16 ? qdq::group_sr<true>(u[gi].data(), table[sc], key, gi * 16, c, out)
           : qdq::group_sr<false>(u[gi].data(), table[sc], key, gi * 16, c, out);
    } else {
      bf16 ? qdq::group_rne_f32<true>(u[gi].data(), table[sc], c, out) : qdq::group_rne_f32<false>(u[gi].data(), table[sc], c, out);
    }
    std::memcpy(codes.data() + gi * 8, c, 8);
    std::memcpy(y.data() + gi * 16 * ow, out, 16 * ow);
  }
}

void expect_kernel_emulation_matches(const std::vector<float>& x, size_t rows, size_t cols) {
  for (QdqDtype dt : {QdqDtype::kF32, QdqDtype::kBF16})
    for (int variant = 0; variant < 8; ++variant) {
      const bool tile = variant & 1, sr = variant & 2, rht = variant & 4;
      const size_t w = dt == QdqDtype::kF32 ? 4 : 2;
      std::vector<uint8_t> in(x.size() * w);
      for (size_t i = 0; i < x.size(); ++i) {
        if (w == 4) {
          std::memcpy(in.data() + 4 * i, &x[i], 4);
        } else {
          const uint16_t h = qdq::f32_to_bf16(x[i]);
          std::memcpy(in.data() + 2 * i, &h, 2);
        }
      }
      std::vector<uint8_t> y, c, s, yr(in.size()), cr(x.size() / 2), sr_((tile ? rows / 16 : rows) * (cols / 16));
      float ws[2], wsr[2];
      emulate_kernels(in, dt, rows, cols, tile, sr, 1234, rht, 99, y, c, s, ws);
      nvfp4_qdq_cpu(in.data(), dt, yr.data(), cr.data(), sr_.data(), wsr, rows, cols, tile, sr, 1234, rht, 99);
      SCOPED_TRACE(std::string(w == 4 ? "f32" : "bf16") + " tile=" + std::to_string(tile) + " sr=" + std::to_string(sr) +
                   " rht=" + std::to_string(rht));
      EXPECT_EQ(float_bits(ws[0]), float_bits(wsr[0]));
      EXPECT_EQ(float_bits(ws[1]), float_bits(wsr[1]));
      EXPECT_EQ(c, cr);
      EXPECT_EQ(s, sr_);
      size_t bad = 0;
      for (size_t i = 0; i < y.size(); i += w) bad += std::memcmp(y.data() + i, yr.data() + i, w) != 0;
      EXPECT_EQ(bad, 0u);
    }
}

}  // namespace

TEST(QuantQdqFast, KernelEmulationMatchesTheCpuImplementation) {
  expect_kernel_emulation_matches(parallax::quant::testing::edge_matrix(64, 128, 1), 64, 128);
  expect_kernel_emulation_matches(parallax::quant::testing::edge_matrix(32, 48, 2, false), 32, 48);
  expect_kernel_emulation_matches(parallax::quant::testing::tiny_matrix(16, 32, 3), 16, 32);
  expect_kernel_emulation_matches(std::vector<float>(16 * 16, 0.0f), 16, 16);
  // tensors whose amax is small but normal: denominators on both sides of the fast path's 2^-120
  for (int e : {-100, -110, -118}) {
    std::vector<float> small = parallax::quant::testing::edge_matrix(32, 64, 5, false);
    for (float& v : small) v = std::ldexp(v, e);
    expect_kernel_emulation_matches(small, 32, 64);
  }
}
