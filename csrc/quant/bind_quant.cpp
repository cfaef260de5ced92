// parallax._native quantization bindings: the CPU reference of NVFP4 / FP8 (quant/nvfp4.h,
// quant/minifloat.h) on float32 NumPy arrays. Every function returns new arrays.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/map.h>

#include <cstring>
#include <optional>

#include "quant/minifloat.h"
#include "quant/mx.h"
#include "quant/nvfp4.h"
#include "quant/qdq_math.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace parallax::quant;

namespace {

using Matrix = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using AnyF32 = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using AnyU8 = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;

template <typename T>
nb::ndarray<nb::numpy, T> owned(size_t n, std::vector<size_t> shape) {
  T* data = new T[n == 0 ? 1 : n];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::ndarray<nb::numpy, T>(data, shape.size(), shape.data(), owner);
}

// A new array of T shaped like `like` (any ndim).
template <typename T, typename Array>
nb::ndarray<nb::numpy, T> owned_like(const Array& like) {
  std::vector<size_t> shape(like.ndim());
  for (size_t i = 0; i < like.ndim(); ++i) shape[i] = like.shape(i);
  return owned<T>(like.size(), shape);
}

Nvfp4Mode parse_mode(const std::string& mode) {
  if (mode == "1x16") return Nvfp4Mode::k1x16;
  if (mode == "16x16") return Nvfp4Mode::k16x16;
  throw QuantError("mode must be \"1x16\" or \"16x16\", got \"" + mode + "\"");
}

Fp8Format parse_fmt(const std::string& fmt) {
  if (fmt == "e4m3") return Fp8Format::kE4M3;
  if (fmt == "e5m2") return Fp8Format::kE5M2;
  throw QuantError("fmt must be \"e4m3\" or \"e5m2\", got \"" + fmt + "\"");
}

MxElem parse_mx_elem(const std::string& elem) {
  if (elem == "e4m3") return MxElem::kE4M3;
  if (elem == "e5m2") return MxElem::kE5M2;
  if (elem == "e2m1") return MxElem::kE2M1;
  throw QuantError("elem must be \"e4m3\", \"e5m2\" or \"e2m1\", got \"" + elem + "\"");
}

MxRule parse_mx_rule(const std::string& rule) {
  if (rule == "floor") return MxRule::kFloor;
  if (rule == "rceil") return MxRule::kRceil;
  throw QuantError("rule must be \"floor\" or \"rceil\", got \"" + rule + "\"");
}

Nvfp4Tensor quantize(const Matrix& x, const std::string& mode, bool stochastic, uint64_t seed) {
  const Nvfp4Options o{parse_mode(mode), stochastic, seed};
  nb::gil_scoped_release unlocked;
  return nvfp4_quantize(x.data(), x.shape(0), x.shape(1), o);
}

nb::ndarray<nb::numpy, float> dequantized(const Nvfp4Tensor& t) {
  auto y = owned<float>(t.rows * t.cols, {t.rows, t.cols});
  nvfp4_dequantize(t, y.data());
  return y;
}

}  // namespace

void bind_quant(nb::module_& m) {
  nb::exception<QuantError>(m, "QuantError", PyExc_ValueError);

  m.def(
      "quant_nvfp4",
      [](const Matrix& x, const std::string& mode, bool stochastic, uint64_t seed) {
        return dequantized(quantize(x, mode, stochastic, seed));
      },
      "x"_a, "mode"_a = "1x16", "stochastic"_a = false, "seed"_a = 0,
      "NVFP4 quantize-dequantize of a float32 [rows, cols] matrix (csrc/quant/nvfp4.h).");

  m.def(
      "quant_nvfp4_codes",
      [](const Matrix& x, const std::string& mode, bool stochastic, uint64_t seed) {
        const Nvfp4Tensor t = quantize(x, mode, stochastic, seed);
        auto codes = owned<uint8_t>(t.codes.size(), {t.rows, t.cols / 2});
        if (!t.codes.empty()) std::memcpy(codes.data(), t.codes.data(), t.codes.size());
        auto scales = owned<uint8_t>(t.scales.size(), {t.scale_rows, t.scale_cols});
        if (!t.scales.empty()) std::memcpy(scales.data(), t.scales.data(), t.scales.size());
        return std::make_tuple(dequantized(t), codes, scales, t.global_scale);
      },
      "x"_a, "mode"_a = "1x16", "stochastic"_a = false, "seed"_a = 0,
      "(dequantized float32, packed E2M1 codes uint8 [rows, cols/2] low nibble first, E4M3 scale "
      "bytes uint8 [rows or rows/16, cols/16], global scale float).");

  m.def(
      "quant_mx_codes",
      [](const Matrix& x, const std::string& elem, const std::string& rule, bool stochastic, uint64_t seed) {
        const MxOptions o{parse_mx_elem(elem), parse_mx_rule(rule), stochastic, seed};
        MxTensor t;
        {
          nb::gil_scoped_release unlocked;
          t = mx_quantize(x.data(), x.shape(0), x.shape(1), o);
        }
        auto y = owned<float>(t.rows * t.cols, {t.rows, t.cols});
        mx_dequantize(t, y.data());
        auto codes = owned<uint8_t>(t.codes.size(), {t.rows, t.cols});
        if (!t.codes.empty()) std::memcpy(codes.data(), t.codes.data(), t.codes.size());
        auto scales = owned<uint8_t>(t.scales.size(), {t.rows, t.cols / 32});
        if (!t.scales.empty()) std::memcpy(scales.data(), t.scales.data(), t.scales.size());
        return std::make_tuple(y, codes, scales);
      },
      "x"_a, "elem"_a = "e4m3", "rule"_a = "floor", "stochastic"_a = false, "seed"_a = 0,
      "MX quantize-dequantize of a float32 [rows, cols] matrix, blocks of 32 along the rows (csrc/quant/mx.h): "
      "(dequantized float32, codes uint8 [rows, cols] one per element, E8M0 scales uint8 [rows, cols/32]). "
      "elem: e4m3, e5m2, e2m1; rule: floor (OCP) or rceil.");

  m.def(
      "quant_mx_scale_code",
      [](float amax, const std::string& elem, const std::string& rule) {
        return mx_scale_code_ref(amax, parse_mx_elem(elem), parse_mx_rule(rule));
      },
      "amax"_a, "elem"_a = "e4m3", "rule"_a = "floor", "The E8M0 scale code of a block amax (csrc/quant/mx.h).");

  m.def(
      "fp8_encode",
      [](const AnyF32& x, const std::string& fmt, float scale, std::optional<bool> saturate) {
        const Fp8Format f = parse_fmt(fmt);
        const bool sat = saturate.value_or(fp8_default_saturate(f));
        auto codes = owned_like<uint8_t>(x);
        for (size_t i = 0; i < x.size(); ++i) codes.data()[i] = fp8_encode(x.data()[i] / scale, f, sat);
        return codes;
      },
      "x"_a, "fmt"_a = "e4m3", "scale"_a = 1.0f, "saturate"_a = nb::none(),
      "FP8 codes of x / scale (RNE; saturate defaults to True for e4m3, False for e5m2).");

  m.def(
      "fp8_decode",
      [](const AnyU8& c, const std::string& fmt, float scale) {
        const Fp8Format f = parse_fmt(fmt);
        auto y = owned_like<float>(c);
        for (size_t i = 0; i < c.size(); ++i) y.data()[i] = fp8_decode(c.data()[i], f) * scale;
        return y;
      },
      "codes"_a, "fmt"_a = "e4m3", "scale"_a = 1.0f, "decode(code) * scale as float32.");

  m.def(
      "quant_fp8",
      [](const AnyF32& x, const std::string& fmt, float scale, std::optional<bool> saturate) {
        const Fp8Format f = parse_fmt(fmt);
        const bool sat = saturate.value_or(fp8_default_saturate(f));
        auto y = owned_like<float>(x);
        for (size_t i = 0; i < x.size(); ++i) y.data()[i] = fp8_decode(fp8_encode(x.data()[i] / scale, f, sat), f) * scale;
        return y;
      },
      "x"_a, "fmt"_a = "e4m3", "scale"_a = 1.0f, "saturate"_a = nb::none(),
      "FP8 quantize-dequantize: decode(encode(x / scale)) * scale, float32.");

  m.def(
      "hadamard16",
      [](const Matrix& x, uint64_t seed, bool inverse) {
        auto y = owned<float>(x.size(), {x.shape(0), x.shape(1)});
        hadamard16(x.data(), y.data(), x.shape(0), x.shape(1), seed, inverse);
        return y;
      },
      "x"_a, "seed"_a = 0, "inverse"_a = false,
      "16x16 random Hadamard transform of each group of 16 along each row (csrc/quant/nvfp4.h).");

  m.def("quant_hash32", &hash32, "seed"_a, "index"_a, "The counter-based hash of SR and RHT signs.");
  m.def(
      "quant_step_seed", [](uint64_t seed, uint32_t counter) { return parallax::quant::qdq::step_seed(seed, counter); },
      "seed"_a, "counter"_a,
      "The stochastic-rounding seed of step `counter` for per-run seed `seed` (qdq_math.h step_seed): what the "
      "counter variants of the CUDA kernel and of the JAX FFI call compute at run time.");

  m.def(
      "quant_bindings",
      []() {
#if defined(PARALLAX_HAVE_CUDA)
        const bool cuda = true;
#else
        const bool cuda = false;
#endif
#if defined(PARALLAX_HAVE_JAX_FFI)
        const bool jax_ffi = true;
#else
        const bool jax_ffi = false;
#endif
        return std::map<std::string, bool>{{"cpu", true}, {"cuda", cuda}, {"jax_ffi", jax_ffi}};
      },
      "Which quantization bindings this build has: {'cpu': True, 'cuda': CUDA kernels compiled in, "
      "'jax_ffi': XLA FFI handlers compiled in}.");
}
