// parallax._native bindings of the CUDA quantization kernels (quant_cuda.h), compiled only
// where CUDA is. Tensors travel as integers: device pointers (torch's data_ptr()) and the
// cudaStream_t as an integer (torch.cuda.current_stream().cuda_stream). The caller
// (parallax.quant.torch_ops) checks devices, dtypes, contiguity and allocates the outputs;
// these functions only queue the kernels on that stream and never synchronise.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "quant/nvfp4.h"
#include "quant/quant_cuda.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

int parse_dtype(const std::string& d) {
  if (d == "float32") return kPxQuantF32;
  if (d == "bfloat16") return kPxQuantBF16;
  throw parallax::quant::QuantError("dtype must be \"float32\" or \"bfloat16\", got \"" + d + "\"");
}

template <typename T>
T* ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

void check(int status, const char* what) {
  if (status == kPxQuantOk) return;
  const std::string msg = std::string(what) + ": " + px_quant_cuda_error_message();
  if (status == kPxQuantErrCuda) throw std::runtime_error(msg);
  throw parallax::quant::QuantError(msg);
}

CUstream_st* stream_of(uintptr_t s) { return reinterpret_cast<CUstream_st*>(s); }

}  // namespace

void bind_quant_cuda(nb::module_& m) {
  m.def(
      "quant_nvfp4_cuda",
      [](uintptr_t x, const std::string& dtype, uintptr_t y, uintptr_t codes, uintptr_t scales, uintptr_t scale_ws,
         size_t rows, size_t cols, int mode, bool stochastic, uint64_t seed, bool rht, uint64_t rht_seed,
         uintptr_t stream) {
        check(px_nvfp4_qdq_cuda(ptr<const void>(x), parse_dtype(dtype), ptr<void>(y), ptr<uint8_t>(codes),
                                ptr<uint8_t>(scales), ptr<float>(scale_ws), rows, cols, mode, stochastic, seed,
                                rht, rht_seed, stream_of(stream)),
              "quant_nvfp4_cuda");
      },
      "x"_a, "dtype"_a, "y"_a, "codes"_a, "scales"_a, "scale_ws"_a, "rows"_a, "cols"_a, "mode"_a,
      "stochastic"_a, "seed"_a, "rht"_a, "rht_seed"_a, "stream"_a,
      "Queue NVFP4 quantize-dequantize on a CUDA stream (device pointers as integers; 0 = no "
      "output; scale_ws: float[2] {amax, s_global}; mode 0 1x16, 1 16x16, 2 16x1). See csrc/quant/quant_cuda.h.");

  m.def(
      "quant_nvfp4_counter_cuda",
      [](uintptr_t x, const std::string& dtype, uintptr_t y, uintptr_t codes, uintptr_t scales, uintptr_t scale_ws,
         size_t rows, size_t cols, int mode, bool stochastic, uint64_t seed, uintptr_t seed_counter, bool rht,
         uint64_t rht_seed, uintptr_t stream) {
        check(px_nvfp4_qdq_counter_cuda(ptr<const void>(x), parse_dtype(dtype), ptr<void>(y), ptr<uint8_t>(codes),
                                        ptr<uint8_t>(scales), ptr<float>(scale_ws), rows, cols, mode,
                                        stochastic, seed, ptr<const uint32_t>(seed_counter), rht, rht_seed,
                                        stream_of(stream)),
              "quant_nvfp4_counter_cuda");
      },
      "x"_a, "dtype"_a, "y"_a, "codes"_a, "scales"_a, "scale_ws"_a, "rows"_a, "cols"_a, "mode"_a,
      "stochastic"_a, "seed"_a, "seed_counter"_a, "rht"_a, "rht_seed"_a, "stream"_a,
      "quant_nvfp4_cuda with the SR seed step_seed(seed, *seed_counter), the counter a device uint32 read by "
      "the kernel (see csrc/quant/quant_cuda.h).");

  m.def(
      "quant_nvfp4_parts_cuda",
      [](uintptr_t x, const std::string& dtype, uintptr_t y, uintptr_t scale_ws, size_t rows, size_t cols, int mode,
         bool stochastic, const std::vector<uint64_t>& seeds, uintptr_t seed_counter, bool rht, uint64_t rht_seed,
         uintptr_t stream) {
        check(px_nvfp4_qdq_parts_cuda(ptr<const void>(x), parse_dtype(dtype), ptr<void>(y), ptr<float>(scale_ws), rows,
                                      cols, seeds.size(), mode, stochastic, seeds.data(),
                                      ptr<const uint32_t>(seed_counter), rht, rht_seed, stream_of(stream)),
              "quant_nvfp4_parts_cuda");
      },
      "x"_a, "dtype"_a, "y"_a, "scale_ws"_a, "rows"_a, "cols"_a, "mode"_a, "stochastic"_a, "seeds"_a,
      "seed_counter"_a, "rht"_a, "rht_seed"_a, "stream"_a,
      "Queue NVFP4 quantize-dequantize of len(seeds) equal column parts of x, each as its own tensor with its own "
      "seed (scale_ws: float[2 * parts]; seed_counter 0 = none). See csrc/quant/quant_cuda.h.");

  m.def(
      "quant_cuda_set_schedule",
      [](int fused, int hold) { check(px_quant_cuda_set_schedule(fused, hold), "quant_cuda_set_schedule"); },
      "fused"_a, "hold"_a,
      "How NVFP4 1x16 runs from now on, process-wide: fused 1 (the single-read kernel) or 0 (the amax and quantize "
      "kernels, the default), -1 the environment's default (PARALLAX_QUANT_FUSED=1: fused); hold: the single-read "
      "kernel keeps groups in shared memory (-1: yes). Every schedule gives the same bits.");

  m.def("quant_cuda_last_schedule", &px_quant_cuda_last_schedule,
        "The 1x16 schedule the last NVFP4 1x16 call of this thread queued: 1 single-read, 0 two kernels, -1 none.");

  m.def(
      "quant_cuda_set_legacy", [](bool on) { check(px_quant_cuda_set_legacy(on ? 1 : 0), "quant_cuda_set_legacy"); },
      "on"_a,
      "The previous NVFP4 kernels for bf16 inputs from now on (True: the amax and 1x16 quantize kernels without "
      "their prefetch, the previous stochastic rounding), or the current ones (False, the default), process-wide: "
      "the benchmark's old-versus-new measurement. The same bits either way.");

  m.def(
      "quant_mx_cuda",
      [](uintptr_t x, const std::string& dtype, uintptr_t y, uintptr_t codes, uintptr_t scales, size_t rows,
         size_t cols, int elem, int rule, bool stochastic, uint64_t seed, uintptr_t seed_counter, uintptr_t stream) {
        check(px_mx_qdq_cuda(ptr<const void>(x), parse_dtype(dtype), ptr<void>(y), ptr<uint8_t>(codes),
                             ptr<uint8_t>(scales), rows, cols, elem, rule, stochastic, seed,
                             ptr<const uint32_t>(seed_counter), stream_of(stream)),
              "quant_mx_cuda");
      },
      "x"_a, "dtype"_a, "y"_a, "codes"_a, "scales"_a, "rows"_a, "cols"_a, "elem"_a, "rule"_a, "stochastic"_a,
      "seed"_a, "seed_counter"_a, "stream"_a,
      "Queue MX quantize-dequantize on a CUDA stream (elem 0 e4m3, 1 e5m2, 2 e2m1; rule 0 floor, 1 rceil; "
      "seed_counter 0 = the seed as given). See csrc/quant/quant_cuda.h.");

  m.def(
      "hadamard16_cuda",
      [](uintptr_t x, const std::string& dtype, uintptr_t y, size_t rows, size_t cols, uint64_t seed, bool inverse,
         uintptr_t stream) {
        check(px_hadamard16_cuda(ptr<const void>(x), parse_dtype(dtype), ptr<void>(y), rows, cols, seed, inverse,
                                 stream_of(stream)),
              "hadamard16_cuda");
      },
      "x"_a, "dtype"_a, "y"_a, "rows"_a, "cols"_a, "seed"_a, "inverse"_a, "stream"_a,
      "Queue the 16x16 random Hadamard transform on a CUDA stream.");

  m.def(
      "quant_fp8_cuda",
      [](uintptr_t x, const std::string& dtype, uintptr_t y, uintptr_t codes, size_t n, const std::string& fmt,
         float scale, bool saturate, uintptr_t stream) {
        int f = -1;
        if (fmt == "e4m3") f = 0;
        if (fmt == "e5m2") f = 1;
        if (f < 0) throw parallax::quant::QuantError("fmt must be \"e4m3\" or \"e5m2\", got \"" + fmt + "\"");
        check(px_fp8_qdq_cuda(ptr<const void>(x), parse_dtype(dtype), ptr<void>(y), ptr<uint8_t>(codes), n, f, scale,
                              saturate, stream_of(stream)),
              "quant_fp8_cuda");
      },
      "x"_a, "dtype"_a, "y"_a, "codes"_a, "n"_a, "fmt"_a, "scale"_a, "saturate"_a, "stream"_a,
      "Queue FP8 quantize-dequantize with a given scale on a CUDA stream.");
}
