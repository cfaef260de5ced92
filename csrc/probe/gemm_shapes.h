#pragma once
// The GEMMs of one training step of a LLaMA decoder, and the "model-shape ceiling": the
// throughput a GEMM library reaches on exactly those shapes, weighted by how often each runs.
//
// Every linear y = x·W (x: [T, K_in], W: [K_in, N_out], T = batch·seq tokens) costs three GEMMs:
//   forward  y  = x·W       M = T,    K = K_in, N = N_out
//   dgrad    dx = dy·Wᵀ     M = T,    K = N_out, N = K_in
//   wgrad    dW = xᵀ·dy     M = K_in, K = T,    N = N_out
// Attention's score/value products and the embedding lookup are not GEMMs with weights and
// are not listed.
#include <cstdint>
#include <string>
#include <vector>

namespace parallax {

struct ModelDims {
  int64_t d_model = 0, n_layers = 0, n_heads = 0, head_dim = 0, d_ff = 0, vocab = 0;
};

struct GemmShape {
  std::string name;    // "<linear>.<pass>", e.g. "qkv.forward"
  std::string linear;  // qkv | attn_out | gate_up | down | lm_head
  std::string pass;    // forward | dgrad | wgrad
  int64_t m = 0, n = 0, k = 0;
  int64_t count = 0;   // times per training step
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// Fused projections as fast stacks run them: q,k,v as one GEMM (N = 3·H·hd) and gate,up as one
// (N = 2·d_ff). Per-layer shapes count n_layers times, lm_head once. Throws std::invalid_argument
// for a non-positive dimension.
std::vector<GemmShape> model_gemm_shapes(const ModelDims& dims, int64_t tokens);

struct TimedGemm {
  double flops = 0;   // one call
  int64_t count = 0;  // calls per step
  double ms = 0;      // one call, measured
};

// Σ flops·count / Σ ms·count in TFLOP/s. Throws std::invalid_argument when the list is empty,
// a count is negative, or a time or FLOP count is not a positive finite number.
double model_shape_ceiling_tflops(const std::vector<TimedGemm>& gemms);

}  // namespace parallax
