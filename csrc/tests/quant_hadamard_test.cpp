// The 16x16 random Hadamard transform (csrc/quant/nvfp4.h): orthonormal, exact inverse up to
// float rounding, signs fixed by the seed.
#include <gtest/gtest.h>

#include <bitset>
#include <cmath>
#include <random>
#include <vector>

#include "quant/minifloat.h"
#include "quant/nvfp4.h"

using namespace parallax::quant;

namespace {
// Column j of the forward transform: the transform of unit vector e_j.
std::vector<float> forward_matrix(uint64_t seed) {
  std::vector<float> m(256);
  for (int j = 0; j < 16; ++j) {
    float e[16] = {}, y[16];
    e[j] = 1.0f;
    hadamard16(e, y, 1, 16, seed, false);
    for (int i = 0; i < 16; ++i) m[i * 16 + j] = y[i];
  }
  return m;
}
}  // namespace

TEST(QuantHadamard, SylvesterEntriesAndOrthonormal) {
  for (uint64_t seed : {0ULL, 1ULL, 99ULL}) {
    float s[16];
    hadamard16_signs(seed, s);
    const std::vector<float> m = forward_matrix(seed);  // M = H D
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        const float h = m[i * 16 + j] * s[j];  // H = M D
        const float want = (std::bitset<4>(i & j).count() % 2) ? -0.25f : 0.25f;
        EXPECT_EQ(h, want) << i << "," << j;
      }
    // M M^T = I exactly (entries are ±1/4, sums of 16 products ±1/16)
    for (int i = 0; i < 16; ++i)
      for (int k = 0; k < 16; ++k) {
        float dot = 0;
        for (int j = 0; j < 16; ++j) dot += m[i * 16 + j] * m[k * 16 + j];
        EXPECT_EQ(dot, i == k ? 1.0f : 0.0f) << i << "," << k;
      }
  }
}

TEST(QuantHadamard, InverseRecoversInput) {
  std::mt19937 g(3);
  std::normal_distribution<float> d(0.0f, 3.0f);
  const size_t R = 5, C = 64;
  std::vector<float> x(R * C), y(R * C), z(R * C);
  for (float& v : x) v = d(g);
  hadamard16(x.data(), y.data(), R, C, 42, false);
  hadamard16(y.data(), z.data(), R, C, 42, true);
  double nx = 0, ne = 0, ny = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    nx += double(x[i]) * x[i];
    ny += double(y[i]) * y[i];
    ne += double(z[i] - x[i]) * (z[i] - x[i]);
    EXPECT_NEAR(z[i], x[i], 1e-6 * 16 * 3.0 * 4) << i;  // few ulps of the group's magnitude
  }
  EXPECT_LT(std::sqrt(ne / nx), 1e-6);
  EXPECT_NEAR(ny, nx, 1e-5 * nx);  // norm preserved
  // In place works and the wrong seed does not invert.
  std::vector<float> w = x;
  hadamard16(w.data(), w.data(), R, C, 42, false);
  EXPECT_EQ(w, y);
  hadamard16(y.data(), z.data(), R, C, 43, true);
  double bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += double(z[i] - x[i]) * (z[i] - x[i]);
  EXPECT_GT(bad, 0.1 * nx);
}

TEST(QuantHadamard, SignsAreDeterministicPerSeed) {
  float a[16], b[16], c[16];
  hadamard16_signs(5, a);
  hadamard16_signs(5, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(a[j], b[j]);
    EXPECT_TRUE(a[j] == 1.0f || a[j] == -1.0f);
    EXPECT_EQ(a[j], (hash32(5, j) >> 31) ? -1.0f : 1.0f);
  }
  int differs = 0;
  for (uint64_t seed = 6; seed < 16; ++seed) {
    hadamard16_signs(seed, c);
    for (int j = 0; j < 16; ++j) differs += (c[j] != a[j]);
  }
  EXPECT_GT(differs, 40);  // ~80 expected over 160 signs
}
