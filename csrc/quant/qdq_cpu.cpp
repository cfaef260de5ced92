#include "quant/qdq_cpu.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "quant/minifloat.h"
#include "quant/mx.h"
#include "quant/nvfp4.h"
#include "quant/qdq_math.h"

namespace parallax::quant {
namespace {

std::vector<float> widen(const void* x, QdqDtype dtype, size_t n) {
  std::vector<float> f(n);
  if (n == 0) return f;
  if (dtype == QdqDtype::kF32) {
    std::memcpy(f.data(), x, n * sizeof(float));
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(x);
    for (size_t i = 0; i < n; ++i) f[i] = qdq::bf16_to_f32(h[i]);
  }
  return f;
}

void narrow(const std::vector<float>& f, QdqDtype dtype, void* y) {
  if (!y || f.empty()) return;
  if (dtype == QdqDtype::kF32) {
    std::memcpy(y, f.data(), f.size() * sizeof(float));
  } else {
    uint16_t* h = static_cast<uint16_t*>(y);
    for (size_t i = 0; i < f.size(); ++i) h[i] = qdq::f32_to_bf16(f[i]);
  }
}

void check_dtype(QdqDtype dtype) {
  if (dtype != QdqDtype::kF32 && dtype != QdqDtype::kBF16)
    throw QuantError("dtype must be float32 or bfloat16, got code " + std::to_string(static_cast<int>(dtype)));
}

// {the finite amax of the (transformed) values, s_global} into scale_ws, where given.
void write_scale_ws(const std::vector<float>& values, float global_scale, float* scale_ws) {
  if (!scale_ws) return;
  float amax = 0.0f;
  for (float v : values)
    if (std::isfinite(v)) amax = std::fmax(amax, std::fabs(v));
  scale_ws[0] = amax;
  scale_ws[1] = global_scale;
}

std::vector<float> transposed(const std::vector<float>& f, size_t rows, size_t cols) {
  std::vector<float> t(f.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = f[r * cols + c];
  return t;
}

// 16x1: the reference on xᵀ, transposed back (exact: float32 values move, nothing rounds).
void nvfp4_16x1_cpu(const void* x, QdqDtype dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                    size_t rows, size_t cols, bool stochastic, uint64_t seed, bool rht, uint64_t rht_seed) {
  if (codes || scales) throw QuantError("nvfp4 16x1: gives the dequantized values only (codes and scales must be null)");
  if (rows % 16 != 0)
    throw QuantError("nvfp4 16x1: rows (" + std::to_string(rows) + ") must be a multiple of 16 (blocks run down the columns)");
  if (cols % 2 != 0) throw QuantError("nvfp4 16x1: cols (" + std::to_string(cols) + ") must be even");
  std::vector<float> t = transposed(widen(x, dtype, rows * cols), rows, cols);
  if (rht) hadamard16(t.data(), t.data(), cols, rows, rht_seed, false);
  const Nvfp4Tensor q = nvfp4_quantize(t.data(), cols, rows, Nvfp4Options{Nvfp4Mode::k1x16, stochastic, seed});
  write_scale_ws(t, q.global_scale, scale_ws);
  if (y) {
    nvfp4_dequantize(q, t.data());
    narrow(transposed(t, cols, rows), dtype, y);
  }
}

}  // namespace

void nvfp4_qdq_cpu(const void* x, QdqDtype dtype, void* y, uint8_t* codes, uint8_t* scales, float* scale_ws,
                   size_t rows, size_t cols, int mode, bool stochastic, uint64_t seed, bool rht, uint64_t rht_seed) {
  check_dtype(dtype);
  if (mode == 2) return nvfp4_16x1_cpu(x, dtype, y, codes, scales, scale_ws, rows, cols, stochastic, seed, rht, rht_seed);
  if (mode != 0 && mode != 1) throw QuantError("nvfp4: mode must be 0 (1x16), 1 (16x16) or 2 (16x1), got " +
                                               std::to_string(mode));
  std::vector<float> f = widen(x, dtype, rows * cols);
  if (rht) hadamard16(f.data(), f.data(), rows, cols, rht_seed, false);
  const Nvfp4Options o{mode == 1 ? Nvfp4Mode::k16x16 : Nvfp4Mode::k1x16, stochastic, seed};
  const Nvfp4Tensor t = nvfp4_quantize(f.data(), rows, cols, o);
  write_scale_ws(f, t.global_scale, scale_ws);
  if (codes && !t.codes.empty()) std::memcpy(codes, t.codes.data(), t.codes.size());
  if (scales && !t.scales.empty()) std::memcpy(scales, t.scales.data(), t.scales.size());
  if (y) {
    nvfp4_dequantize(t, f.data());
    narrow(f, dtype, y);
  }
}

void hadamard16_cpu(const void* x, QdqDtype dtype, void* y, size_t rows, size_t cols, uint64_t seed, bool inverse) {
  check_dtype(dtype);
  std::vector<float> f = widen(x, dtype, rows * cols);
  hadamard16(f.data(), f.data(), rows, cols, seed, inverse);
  narrow(f, dtype, y);
}

void fp8_qdq_cpu(const void* x, QdqDtype dtype, void* y, uint8_t* codes, size_t n, int fmt, float scale,
                 bool saturate) {
  check_dtype(dtype);
  if (fmt != 0 && fmt != 1) throw QuantError("fmt must be 0 (e4m3) or 1 (e5m2), got " + std::to_string(fmt));
  const Fp8Format f = fmt == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  std::vector<float> v = widen(x, dtype, n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = fp8_encode(v[i] / scale, f, saturate);
    if (codes) codes[i] = c;
    v[i] = fp8_decode(c, f) * scale;
  }
  narrow(v, dtype, y);
}

void mx_qdq_cpu(const void* x, QdqDtype dtype, void* y, uint8_t* codes, uint8_t* scales, size_t rows, size_t cols,
                int elem, int rule, bool stochastic, uint64_t seed) {
  check_dtype(dtype);
  if (elem < 0 || elem > 2) throw QuantError("mx: elem must be 0 (e4m3), 1 (e5m2) or 2 (e2m1), got " + std::to_string(elem));
  if (rule != 0 && rule != 1) throw QuantError("mx: rule must be 0 (floor) or 1 (rceil), got " + std::to_string(rule));
  std::vector<float> f = widen(x, dtype, rows * cols);
  const MxTensor t = mx_quantize(f.data(), rows, cols,
                                 MxOptions{static_cast<MxElem>(elem), static_cast<MxRule>(rule), stochastic, seed});
  if (codes && !t.codes.empty()) std::memcpy(codes, t.codes.data(), t.codes.size());
  if (scales && !t.scales.empty()) std::memcpy(scales, t.scales.data(), t.scales.size());
  if (y) {
    mx_dequantize(t, f.data());
    narrow(f, dtype, y);
  }
}

}  // namespace parallax::quant
