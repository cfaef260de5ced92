// The training GEMMs of llama-100m and the model-shape ceiling arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "probe/gemm_shapes.h"

namespace parallax {
namespace {

const ModelDims kLlama100m{768, 12, 12, 64, 2048, 10000};
constexpr int64_t kTokens = 32 * 1024;

struct Expected {
  const char* name;
  int64_t m, n, k, count;
};

TEST(GemmShapes, Llama100mAt32768TokensExactly) {
  const Expected expected[] = {
      {"qkv.forward", 32768, 2304, 768, 12},     {"qkv.dgrad", 32768, 768, 2304, 12},
      {"qkv.wgrad", 768, 2304, 32768, 12},       {"attn_out.forward", 32768, 768, 768, 12},
      {"attn_out.dgrad", 32768, 768, 768, 12},   {"attn_out.wgrad", 768, 768, 32768, 12},
      {"gate_up.forward", 32768, 4096, 768, 12}, {"gate_up.dgrad", 32768, 768, 4096, 12},
      {"gate_up.wgrad", 768, 4096, 32768, 12},   {"down.forward", 32768, 768, 2048, 12},
      {"down.dgrad", 32768, 2048, 768, 12},      {"down.wgrad", 2048, 768, 32768, 12},
      {"lm_head.forward", 32768, 10000, 768, 1}, {"lm_head.dgrad", 32768, 768, 10000, 1},
      {"lm_head.wgrad", 768, 10000, 32768, 1},
  };
  const auto shapes = model_gemm_shapes(kLlama100m, kTokens);
  ASSERT_EQ(shapes.size(), std::size(expected));
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(shapes[i].name, expected[i].name);
    EXPECT_EQ(shapes[i].name, shapes[i].linear + "." + shapes[i].pass);
    EXPECT_EQ(shapes[i].m, expected[i].m);
    EXPECT_EQ(shapes[i].n, expected[i].n);
    EXPECT_EQ(shapes[i].k, expected[i].k);
    EXPECT_EQ(shapes[i].count, expected[i].count);
  }
}

// 6 FLOPs per weight per token: 6 · 92,614,656 weights outside the embedding and norms.
TEST(GemmShapes, StepFlopsAreSixTimesLinearWeightsTimesTokens) {
  double total = 0;
  for (const auto& s : model_gemm_shapes(kLlama100m, kTokens)) total += s.flops() * static_cast<double>(s.count);
  EXPECT_EQ(total, 6.0 * 92'614'656 * kTokens);
}

TEST(GemmShapes, NonPositiveDimensionsAreRefused) {
  EXPECT_THROW(model_gemm_shapes(kLlama100m, 0), std::invalid_argument);
  ModelDims bad = kLlama100m;
  bad.d_ff = -1;
  EXPECT_THROW(model_gemm_shapes(bad, kTokens), std::invalid_argument);
}

TEST(ModelShapeCeiling, WeighsFlopsAndTimesByCount) {
  // (2·1e12 + 1·3e12) FLOP over (2·1 + 1·4) ms = 5e12 / 6e-3 s = 833.33 TFLOP/s.
  EXPECT_DOUBLE_EQ(model_shape_ceiling_tflops({{1e12, 2, 1.0}, {3e12, 1, 4.0}}), 5e12 / 6e-3 / 1e12);
  // A zero count drops a GEMM out of both sums.
  EXPECT_DOUBLE_EQ(model_shape_ceiling_tflops({{1e12, 1, 2.0}, {9e12, 0, 1.0}}), 500.0);
}

TEST(ModelShapeCeiling, RefusesWhatCannotBeAveraged) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(model_shape_ceiling_tflops({}), std::invalid_argument);
  EXPECT_THROW(model_shape_ceiling_tflops({{1e12, 1, 0.0}}), std::invalid_argument);
  EXPECT_THROW(model_shape_ceiling_tflops({{1e12, 1, nan}}), std::invalid_argument);
  EXPECT_THROW(model_shape_ceiling_tflops({{1e12, -1, 1.0}}), std::invalid_argument);
  EXPECT_THROW(model_shape_ceiling_tflops({{0.0, 1, 1.0}}), std::invalid_argument);
  EXPECT_THROW(model_shape_ceiling_tflops({{1e12, 0, 1.0}}), std::invalid_argument);
}

}  // namespace
}  // namespace parallax
