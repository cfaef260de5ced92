// E2M1 / E4M3 / E5M2 encode-decode (csrc/quant/minifloat.h): grids, ties to even, saturation,
// subnormals, NaN/inf, and exhaustive round trips of every code.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "quant/minifloat.h"

using namespace parallax::quant;

namespace {
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TEST(QuantE2M1, GridDecodes) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint8_t c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_decode(c), grid[c]);
    EXPECT_EQ(e2m1_decode(c | 0x8), -grid[c]);
    EXPECT_EQ(e2m1_encode(grid[c]), c);
    EXPECT_EQ(e2m1_encode(-grid[c]), c | 0x8);
  }
}

TEST(QuantE2M1, MidpointTiesGoToTheEvenCode) {
  // midpoint -> expected value (the neighbour whose code is even)
  const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float want[7] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(e2m1_decode(e2m1_encode(mid[i])), want[i]) << mid[i];
    EXPECT_EQ(e2m1_decode(e2m1_encode(-mid[i])), -want[i]) << mid[i];
    EXPECT_EQ(e2m1_encode(mid[i]) % 2, 0) << mid[i];
    // just off the midpoint goes to the nearer neighbour
    EXPECT_EQ(e2m1_encode(std::nextafter(mid[i], 0.0f)), i) << mid[i];
    EXPECT_EQ(e2m1_encode(std::nextafter(mid[i], 10.0f)), i + 1) << mid[i];
  }
}

TEST(QuantE2M1, SaturatesSignedZeroAndNaN) {
  EXPECT_EQ(e2m1_encode(6.5f), 0x7);
  EXPECT_EQ(e2m1_encode(1e30f), 0x7);
  EXPECT_EQ(e2m1_encode(-7.0f), 0xF);
  EXPECT_EQ(e2m1_encode(kInf), 0x7);
  EXPECT_EQ(e2m1_encode(-kInf), 0xF);
  EXPECT_EQ(e2m1_encode(-0.0f), 0x8);
  EXPECT_TRUE(std::signbit(e2m1_decode(0x8)));
  EXPECT_EQ(e2m1_decode(0x8), 0.0f);
  EXPECT_EQ(e2m1_encode(-0.1f), 0x8);  // rounds to zero, keeps the sign
  EXPECT_EQ(e2m1_encode(kNaN), 0x7);   // documented: NaN -> +6 (no NaN in E2M1)
}

TEST(QuantE4M3, HandWorkedValues) {
  EXPECT_EQ(e4m3_encode(1.0f), 0x38);            // exp 7 (bias 7), mantissa 0
  EXPECT_EQ(e4m3_encode(448.0f), 0x7E);          // 1.75 * 2^8
  EXPECT_EQ(e4m3_encode(-448.0f), 0xFE);
  EXPECT_EQ(e4m3_encode(5.0f), 0x4A);            // 1.25 * 2^2: exp 9, mantissa 010
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -6)), 0x08);   // smallest normal
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(e4m3_encode(std::ldexp(7.0f, -9)), 0x07);   // largest subnormal
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -10)), 0x00);  // tie 0 / 2^-9 -> 0 (even)
  EXPECT_EQ(e4m3_encode(std::ldexp(3.0f, -10)), 0x02);  // tie 1 / 2 subnormal -> 2
  EXPECT_EQ(e4m3_encode(1.0625f), 0x38);         // tie 1.0 / 1.125 -> 1.0
  EXPECT_EQ(e4m3_encode(1.1875f), 0x3A);         // tie 1.125 / 1.25 -> 1.25
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x4A), 5.0f);
}

TEST(QuantE4M3, SaturationInfNaNAndSignedZero) {
  EXPECT_EQ(e4m3_encode(464.0f, false), 0x7E);  // tie 448 / (480): even mantissa 110 -> 448
  EXPECT_EQ(e4m3_encode(465.0f, false), 0x7F);  // overflow without saturation -> NaN
  EXPECT_EQ(e4m3_encode(465.0f), 0x7E);         // default saturates
  EXPECT_EQ(e4m3_encode(1e9f), 0x7E);
  EXPECT_EQ(e4m3_encode(kInf), 0x7E);
  EXPECT_EQ(e4m3_encode(-kInf), 0xFE);
  EXPECT_EQ(e4m3_encode(kInf, false), 0x7F);
  EXPECT_EQ(e4m3_encode(kNaN), 0x7F);
  EXPECT_EQ(e4m3_encode(-kNaN), 0xFF);
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_decode(0xFF)));
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(e4m3_decode(0x80)));
}

TEST(QuantE5M2, HandWorkedValues) {
  EXPECT_EQ(e5m2_encode(1.0f), 0x3C);
  EXPECT_EQ(e5m2_encode(57344.0f), 0x7B);  // 1.75 * 2^15
  EXPECT_EQ(e5m2_encode(std::ldexp(1.0f, -14)), 0x04);  // smallest normal
  EXPECT_EQ(e5m2_encode(std::ldexp(1.0f, -16)), 0x01);  // smallest subnormal
  EXPECT_EQ(e5m2_encode(std::ldexp(3.0f, -16)), 0x03);
  EXPECT_EQ(e5m2_encode(std::ldexp(1.0f, -17)), 0x00);  // tie -> 0
  EXPECT_EQ(e5m2_encode(61439.0f), 0x7B);
  EXPECT_EQ(e5m2_encode(61440.0f), 0x7C);  // tie 57344 / 65536(inf code, even) -> inf
  EXPECT_EQ(e5m2_encode(61440.0f, true), 0x7B);
  EXPECT_EQ(e5m2_encode(kInf), 0x7C);
  EXPECT_EQ(e5m2_encode(-kInf), 0xFC);
  EXPECT_EQ(e5m2_encode(kInf, true), 0x7B);
  EXPECT_EQ(e5m2_encode(kNaN), 0x7F);
  EXPECT_EQ(e5m2_decode(0x7C), kInf);
  EXPECT_EQ(e5m2_decode(0xFC), -kInf);
  for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(e5m2_decode(c)));
  EXPECT_EQ(e5m2_encode(-0.0f), 0x80);
}

namespace {
void exhaustive(Fp8Format f, int n_nan, uint8_t max_finite, float max_value) {
  const bool sat = fp8_default_saturate(f);
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_decode(static_cast<uint8_t>(c), f);
    const uint8_t back = fp8_encode(v, f, sat);
    if (std::isnan(v)) {
      ++nans;
      EXPECT_TRUE(std::isnan(fp8_decode(back, f))) << c;
      EXPECT_EQ(back & 0x80, c & 0x80) << c;
    } else {
      EXPECT_EQ(back, c) << c;
    }
  }
  EXPECT_EQ(nans, n_nan);
  EXPECT_EQ(fp8_decode(max_finite, f), max_value);
  // Between consecutive finite codes: strictly increasing, the midpoint goes to the even
  // code, one float either side to the nearer code.
  for (int c = 0; c < max_finite; ++c) {
    const float a = fp8_decode(static_cast<uint8_t>(c), f), b = fp8_decode(static_cast<uint8_t>(c + 1), f);
    ASSERT_LT(a, b) << c;
    const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
    EXPECT_EQ(fp8_encode(mid, f, sat), (c % 2 == 0) ? c : c + 1) << c;
    EXPECT_EQ(fp8_encode(std::nextafter(mid, 0.0f), f, sat), c) << c;
    EXPECT_EQ(fp8_encode(std::nextafter(mid, 1e30f), f, sat), c + 1) << c;
    EXPECT_EQ(fp8_encode(-mid, f, sat), ((c % 2 == 0) ? c : c + 1) | 0x80) << c;
  }
}
}  // namespace

TEST(QuantE4M3, ExhaustiveRoundTripAndTies) { exhaustive(Fp8Format::kE4M3, 2, 0x7E, 448.0f); }
TEST(QuantE5M2, ExhaustiveRoundTripAndTies) { exhaustive(Fp8Format::kE5M2, 6, 0x7B, 57344.0f); }

TEST(QuantE2M1, ExhaustiveRoundTrip) {
  for (uint8_t c = 0; c < 16; ++c) EXPECT_EQ(e2m1_encode(e2m1_decode(c)), c);
}

TEST(QuantHash, FixedGoldenBitsAndUniformRange) {
  // mix64 is the SplitMix64 finalizer: from state 0, SplitMix64's first output is
  // mix64(0 + G) = 0xE220A8397B1DCDAF.
  EXPECT_EQ(quant_mix64(0x9E3779B97F4A7C15ULL), 0xE220A8397B1DCDAFULL);
  // hash32(0, 0) = upper half of mix64(mix64(G)) = mix64(0xE220A8397B1DCDAF) >> 32
  EXPECT_EQ(hash32(0, 0), static_cast<uint32_t>(quant_mix64(0xE220A8397B1DCDAFULL) >> 32));
  // Golden bits from an independent Python implementation of the documented formula.
  EXPECT_EQ(hash32(0, 0), 0x48218226u);
  EXPECT_EQ(hash32(0, 1), 0xA706DD2Fu);
  EXPECT_EQ(hash32(42, 7), 0x32028F50u);
  EXPECT_EQ(hash32(~0ULL, 123456789), 0x8DA849AFu);
  std::set<uint32_t> seen;
  for (uint64_t i = 0; i < 1000; ++i) {
    seen.insert(hash32(7, i));
    const float u = uniform01(7, i);
    EXPECT_GE(u, 0.0f);
    EXPECT_LT(u, 1.0f);
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_NE(hash32(1, 5), hash32(2, 5));
}
