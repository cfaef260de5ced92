#include "probe/gemm_shapes.h"

#include <cmath>
#include <stdexcept>

namespace parallax {

namespace {

struct Linear {
  const char* name;
  int64_t k_in, n_out, count;
};

void add_passes(std::vector<GemmShape>& out, const Linear& l, int64_t tokens) {
  const std::string name = l.name;
  out.push_back({name + ".forward", name, "forward", tokens, l.n_out, l.k_in, l.count});
  out.push_back({name + ".dgrad", name, "dgrad", tokens, l.k_in, l.n_out, l.count});
  out.push_back({name + ".wgrad", name, "wgrad", l.k_in, l.n_out, tokens, l.count});
}

}  // namespace

std::vector<GemmShape> model_gemm_shapes(const ModelDims& d, int64_t tokens) {
  for (int64_t v : {d.d_model, d.n_layers, d.n_heads, d.head_dim, d.d_ff, d.vocab, tokens})
    if (v <= 0) throw std::invalid_argument("model dimensions and tokens must be positive");
  const int64_t attn = d.n_heads * d.head_dim;
  const Linear linears[] = {
      {"qkv", d.d_model, 3 * attn, d.n_layers},
      {"attn_out", attn, d.d_model, d.n_layers},
      {"gate_up", d.d_model, 2 * d.d_ff, d.n_layers},
      {"down", d.d_ff, d.d_model, d.n_layers},
      {"lm_head", d.d_model, d.vocab, 1},
  };
  std::vector<GemmShape> shapes;
  for (const auto& l : linears) add_passes(shapes, l, tokens);
  return shapes;
}

double model_shape_ceiling_tflops(const std::vector<TimedGemm>& gemms) {
  if (gemms.empty()) throw std::invalid_argument("no GEMMs to aggregate");
  double flops = 0, ms = 0;
  for (const auto& g : gemms) {
    if (g.count < 0) throw std::invalid_argument("a GEMM count is negative");
    if (!(std::isfinite(g.ms) && g.ms > 0)) throw std::invalid_argument("a GEMM time is not a positive number");
    if (!(std::isfinite(g.flops) && g.flops > 0)) throw std::invalid_argument("a GEMM FLOP count is not positive");
    flops += g.flops * static_cast<double>(g.count);
    ms += g.ms * static_cast<double>(g.count);
  }
  if (ms <= 0) throw std::invalid_argument("every GEMM count is zero");
  return flops / (ms * 1e-3) / 1e12;
}

}  // namespace parallax
