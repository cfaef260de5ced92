// Random GEMM operands: never zero, never NaN or infinite, reproducible from the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "probe/gemm_inputs.h"

namespace parallax {
namespace {

std::vector<unsigned char> filled(Element e, size_t size, uint64_t seed) {
  std::vector<unsigned char> bytes(size);
  fill_random(e, bytes.data(), bytes.size(), seed);
  return bytes;
}

TEST(GemmInputs, Bf16IsNonZeroFiniteAndBelowOne) {
  auto bytes = filled(Element::bf16, 20000, 1);
  bool negative = false, positive = false;
  for (size_t i = 0; i < bytes.size(); i += 2) {
    const uint32_t bits = static_cast<uint32_t>(bytes[i] | (bytes[i + 1] << 8)) << 16;
    float v;
    std::memcpy(&v, &bits, sizeof v);
    ASSERT_TRUE(std::isfinite(v));
    ASSERT_GE(std::fabs(v), 0.25f);
    ASSERT_LT(std::fabs(v), 1.0f);
    (v < 0 ? negative : positive) = true;
  }
  EXPECT_TRUE(negative && positive);
}

TEST(GemmInputs, E4m3HasExponentsTwoToMinusTwoThroughTwoToOne) {
  for (unsigned char b : filled(Element::e4m3, 10000, 2)) {
    const int exponent = (b >> 3) & 0xF;
    ASSERT_GE(exponent, 5);
    ASSERT_LE(exponent, 8);
  }
}

TEST(GemmInputs, E2m1NibblesAreNeverZero) {
  std::vector<int> seen(16, 0);
  for (unsigned char b : filled(Element::e2m1, 10000, 3)) {
    ++seen[b & 0xF];
    ++seen[b >> 4];
  }
  EXPECT_EQ(seen[0], 0);  // +0
  EXPECT_EQ(seen[8], 0);  // -0
  for (int code : {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15}) EXPECT_GT(seen[code], 0) << code;
}

TEST(GemmInputs, Ue4m3ScalesArePositiveNearOne) {
  for (unsigned char b : filled(Element::ue4m3, 10000, 4)) {
    ASSERT_EQ(b & 0x80, 0);
    const int exponent = (b >> 3) & 0xF;
    ASSERT_TRUE(exponent == 6 || exponent == 7);
  }
}

TEST(GemmInputs, SameSeedSameBytesOtherSeedOtherBytes) {
  EXPECT_EQ(filled(Element::bf16, 4096, 9), filled(Element::bf16, 4096, 9));
  EXPECT_NE(filled(Element::bf16, 4096, 9), filled(Element::bf16, 4096, 10));
}

TEST(GemmInputs, ElementBytes) {
  EXPECT_EQ(element_bytes(Element::bf16, 10), 20u);
  EXPECT_EQ(element_bytes(Element::e4m3, 10), 10u);
  EXPECT_EQ(element_bytes(Element::e2m1, 10), 5u);
  EXPECT_EQ(element_bytes(Element::e2m1, 11), 6u);
  EXPECT_EQ(element_bytes(Element::ue4m3, 7), 7u);
}

}  // namespace
}  // namespace parallax
