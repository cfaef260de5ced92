// XLA FFI handlers of the quantization kernels for JAX (jax.ffi.register_ffi_target), CPU and,
// where CUDA is compiled, CUDA: the same native functions the PyTorch op calls (qdq_cpu.h on
// the host, quant_cuda.h on XLA's stream). Compiled only when jaxlib's FFI headers were found
// at build time (csrc/CMakeLists.txt); parallax._native.jax_ffi_targets() hands out the
// handlers as capsules, parallax/quant/jax_ffi.py registers them.
//
// Operands: x, float32 or bfloat16, any rank >= 1: rows = product of the leading dimensions,
// cols = the last. Results have the shapes parallax/quant/jax_ffi.py gives them; a codes or
// scales result of zero elements means "not wanted" and is not written.
#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <utility>

#include "quant/nvfp4.h"
#include "quant/qdq_cpu.h"
#include "quant/qdq_math.h"
#include "xla/ffi/api/ffi.h"
#if defined(PARALLAX_HAVE_CUDA)
#include "quant/quant_cuda.h"
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

namespace nb = nanobind;
namespace ffi = xla::ffi;
using parallax::quant::QdqDtype;
using parallax::quant::QuantError;

namespace {

// XLA may run host computations with denormals flushed (FTZ/DAZ); the reference keeps them.
// This restores IEEE behaviour for the duration of a handler.
class IeeeDenormals {
 public:
#if defined(__x86_64__) || defined(_M_X64)
  IeeeDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~(0x8040u)); }  // FTZ bit 15, DAZ bit 6
  ~IeeeDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

ffi::ErrorOr<QdqDtype> dtype_of(const ffi::AnyBuffer& x) {
  if (x.element_type() == ffi::DataType::F32) return QdqDtype::kF32;
  if (x.element_type() == ffi::DataType::BF16) return QdqDtype::kBF16;
  return ffi::Unexpected(ffi::Error::InvalidArgument("parallax quant: x must be float32 or bfloat16"));
}

struct Shape2 {
  size_t rows, cols;
};

Shape2 shape_of(const ffi::AnyBuffer& x) {
  const auto d = x.dimensions();
  if (d.size() == 0) return {1, 1};
  size_t rows = 1;
  for (size_t i = 0; i + 1 < d.size(); ++i) rows *= static_cast<size_t>(d[i]);
  return {rows, static_cast<size_t>(d[d.size() - 1])};
}

template <typename B>
uint8_t* optional_u8(B& b) {
  return b->element_count() == 0 ? nullptr : b->typed_data();
}

ffi::Error nvfp4_cpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::Buffer<ffi::U8>> codes,
                     ffi::Result<ffi::Buffer<ffi::U8>> scales, ffi::Result<ffi::Buffer<ffi::F32>> ws, int32_t mode,
                     bool stochastic, uint64_t seed, bool rht, uint64_t rht_seed) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  const Shape2 s = shape_of(x);
  try {
    IeeeDenormals ieee;
    parallax::quant::nvfp4_qdq_cpu(x.untyped_data(), dt.value(), y->untyped_data(), optional_u8(codes),
                                   optional_u8(scales), ws->typed_data(), s.rows, s.cols, mode, stochastic, seed, rht,
                                   rht_seed);
  } catch (const QuantError& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
  return ffi::Error::Success();
}

// nvfp4_cpu with the SR seed step_seed(seed, counter), the counter a uint32 scalar operand (a
// traced value: a training step advances it without recompiling).
ffi::Error nvfp4_counter_cpu(ffi::AnyBuffer x, ffi::Buffer<ffi::U32> counter, ffi::Result<ffi::AnyBuffer> y,
                             ffi::Result<ffi::Buffer<ffi::U8>> codes, ffi::Result<ffi::Buffer<ffi::U8>> scales,
                             ffi::Result<ffi::Buffer<ffi::F32>> ws, int32_t mode, bool stochastic, uint64_t seed, bool rht,
                             uint64_t rht_seed) {
  if (counter.element_count() != 1)
    return ffi::Error::InvalidArgument("parallax quant: the seed counter must be one uint32");
  const uint64_t s = parallax::quant::qdq::step_seed(seed, counter.typed_data()[0]);
  return nvfp4_cpu(x, y, codes, scales, ws, mode, stochastic, s, rht, rht_seed);
}

ffi::Error hadamard_cpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, uint64_t seed, bool inverse) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  const Shape2 s = shape_of(x);
  try {
    IeeeDenormals ieee;
    parallax::quant::hadamard16_cpu(x.untyped_data(), dt.value(), y->untyped_data(), s.rows, s.cols, seed, inverse);
  } catch (const QuantError& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
  return ffi::Error::Success();
}

ffi::Error fp8_cpu(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::Buffer<ffi::U8>> codes,
                   int32_t fmt, float scale, bool saturate) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  try {
    IeeeDenormals ieee;
    parallax::quant::fp8_qdq_cpu(x.untyped_data(), dt.value(), y->untyped_data(), optional_u8(codes),
                                 x.element_count(), fmt, scale, saturate);
  } catch (const QuantError& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
  return ffi::Error::Success();
}

// MX quantize-dequantize (mx.h): the SR seed is `seed`, or step_seed(seed, counter) with
// use_counter (the counter a uint32 scalar operand, a traced value).
ffi::Error mx_cpu(ffi::AnyBuffer x, ffi::Buffer<ffi::U32> counter, ffi::Result<ffi::AnyBuffer> y,
                  ffi::Result<ffi::Buffer<ffi::U8>> codes, ffi::Result<ffi::Buffer<ffi::U8>> scales, int32_t elem,
                  int32_t rule, bool stochastic, uint64_t seed, bool use_counter) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  if (counter.element_count() != 1)
    return ffi::Error::InvalidArgument("parallax quant: the seed counter must be one uint32");
  const uint64_t s = use_counter ? parallax::quant::qdq::step_seed(seed, counter.typed_data()[0]) : seed;
  const Shape2 sh = shape_of(x);
  try {
    IeeeDenormals ieee;
    parallax::quant::mx_qdq_cpu(x.untyped_data(), dt.value(), y->untyped_data(), optional_u8(codes),
                                optional_u8(scales), sh.rows, sh.cols, elem, rule, stochastic, s);
  } catch (const QuantError& e) {
    return ffi::Error::InvalidArgument(e.what());
  }
  return ffi::Error::Success();
}

#if defined(PARALLAX_HAVE_CUDA)
ffi::Error cuda_error(int status) {
  if (status == kPxQuantOk) return ffi::Error::Success();
  const ffi::ErrorCode code = status == kPxQuantErrCuda ? ffi::ErrorCode::kInternal : ffi::ErrorCode::kInvalidArgument;
  return ffi::Error(code, std::string("parallax quant (CUDA): ") + px_quant_cuda_error_message());
}

ffi::Error nvfp4_cuda(CUstream_st* stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                      ffi::Result<ffi::Buffer<ffi::U8>> codes, ffi::Result<ffi::Buffer<ffi::U8>> scales,
                      ffi::Result<ffi::Buffer<ffi::F32>> ws, int32_t mode, bool stochastic, uint64_t seed, bool rht,
                      uint64_t rht_seed) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  const Shape2 s = shape_of(x);
  return cuda_error(px_nvfp4_qdq_cuda(x.untyped_data(), static_cast<int>(dt.value()), y->untyped_data(),
                                      optional_u8(codes), optional_u8(scales), ws->typed_data(), s.rows, s.cols, mode,
                                      stochastic, seed, rht, rht_seed, stream));
}

ffi::Error nvfp4_counter_cuda(CUstream_st* stream, ffi::AnyBuffer x, ffi::Buffer<ffi::U32> counter,
                              ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::Buffer<ffi::U8>> codes,
                              ffi::Result<ffi::Buffer<ffi::U8>> scales, ffi::Result<ffi::Buffer<ffi::F32>> ws,
                              int32_t mode, bool stochastic, uint64_t seed, bool rht, uint64_t rht_seed) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  if (counter.element_count() != 1)
    return ffi::Error::InvalidArgument("parallax quant: the seed counter must be one uint32");
  const Shape2 s = shape_of(x);
  return cuda_error(px_nvfp4_qdq_counter_cuda(x.untyped_data(), static_cast<int>(dt.value()), y->untyped_data(),
                                              optional_u8(codes), optional_u8(scales), ws->typed_data(), s.rows,
                                              s.cols, mode, stochastic, seed, counter.typed_data(), rht, rht_seed,
                                              stream));
}

ffi::Error hadamard_cuda(CUstream_st* stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, uint64_t seed,
                         bool inverse) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  const Shape2 s = shape_of(x);
  return cuda_error(px_hadamard16_cuda(x.untyped_data(), static_cast<int>(dt.value()), y->untyped_data(), s.rows,
                                       s.cols, seed, inverse, stream));
}

ffi::Error fp8_cuda(CUstream_st* stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                    ffi::Result<ffi::Buffer<ffi::U8>> codes, int32_t fmt, float scale, bool saturate) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  return cuda_error(px_fp8_qdq_cuda(x.untyped_data(), static_cast<int>(dt.value()), y->untyped_data(),
                                    optional_u8(codes), x.element_count(), fmt, scale, saturate, stream));
}
ffi::Error mx_cuda(CUstream_st* stream, ffi::AnyBuffer x, ffi::Buffer<ffi::U32> counter, ffi::Result<ffi::AnyBuffer> y,
                   ffi::Result<ffi::Buffer<ffi::U8>> codes, ffi::Result<ffi::Buffer<ffi::U8>> scales, int32_t elem,
                   int32_t rule, bool stochastic, uint64_t seed, bool use_counter) {
  auto dt = dtype_of(x);
  if (dt.has_error()) return dt.error();
  if (counter.element_count() != 1)
    return ffi::Error::InvalidArgument("parallax quant: the seed counter must be one uint32");
  const Shape2 s = shape_of(x);
  return cuda_error(px_mx_qdq_cuda(x.untyped_data(), static_cast<int>(dt.value()), y->untyped_data(),
                                   optional_u8(codes), optional_u8(scales), s.rows, s.cols, elem, rule, stochastic,
                                   seed, use_counter ? counter.typed_data() : nullptr, stream));
}
#endif

}  // namespace

// Each handler's signature once: its arguments after x (the seed counter of the counter variants)
// and its results and attributes; the CUDA handlers bind XLA's stream first, the CPU ones nothing.
namespace {

auto on_cpu() { return ffi::Ffi::Bind(); }
#if defined(PARALLAX_HAVE_CUDA)
auto on_cuda() { return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<CUstream_st*>>(); }
#endif

template <typename B>
auto nvfp4_results(B b) {
  return std::move(b).template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::Buffer<ffi::U8>>()
      .template Ret<ffi::Buffer<ffi::U8>>()
      .template Ret<ffi::Buffer<ffi::F32>>()
      .template Attr<int32_t>("mode")
      .template Attr<bool>("stochastic")
      .template Attr<uint64_t>("seed")
      .template Attr<bool>("rht")
      .template Attr<uint64_t>("rht_seed");
}
template <typename B>
auto nvfp4_signature(B b) { return nvfp4_results(std::move(b).template Arg<ffi::AnyBuffer>()); }
template <typename B>
auto nvfp4_counter_signature(B b) {
  return nvfp4_results(std::move(b).template Arg<ffi::AnyBuffer>().template Arg<ffi::Buffer<ffi::U32>>());
}
template <typename B>
auto hadamard_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<uint64_t>("seed")
      .template Attr<bool>("inverse");
}
template <typename B>
auto fp8_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::Buffer<ffi::U8>>()
      .template Attr<int32_t>("fmt")
      .template Attr<float>("scale")
      .template Attr<bool>("saturate");
}

template <typename B>
auto mx_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::Buffer<ffi::U32>>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::Buffer<ffi::U8>>()
      .template Ret<ffi::Buffer<ffi::U8>>()
      .template Attr<int32_t>("elem")
      .template Attr<int32_t>("rule")
      .template Attr<bool>("stochastic")
      .template Attr<uint64_t>("seed")
      .template Attr<bool>("use_counter");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PxNvfp4Cpu, nvfp4_cpu, nvfp4_signature(on_cpu()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxNvfp4CounterCpu, nvfp4_counter_cpu, nvfp4_counter_signature(on_cpu()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxHadamardCpu, hadamard_cpu, hadamard_signature(on_cpu()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxFp8Cpu, fp8_cpu, fp8_signature(on_cpu()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxMxCpu, mx_cpu, mx_signature(on_cpu()));
#if defined(PARALLAX_HAVE_CUDA)
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxNvfp4Cuda, nvfp4_cuda, nvfp4_signature(on_cuda()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxNvfp4CounterCuda, nvfp4_counter_cuda, nvfp4_counter_signature(on_cuda()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxHadamardCuda, hadamard_cuda, hadamard_signature(on_cuda()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxFp8Cuda, fp8_cuda, fp8_signature(on_cuda()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(PxMxCuda, mx_cuda, mx_signature(on_cuda()));
#endif

void bind_quant_jax_ffi(nb::module_& m) {
  m.def(
      "jax_ffi_targets",
      []() {
        auto cap = [](XLA_FFI_Handler* h) { return nb::capsule(reinterpret_cast<void*>(h)); };
        nb::dict cpu, cuda;
        cpu["parallax_nvfp4_qdq"] = cap(PxNvfp4Cpu);
        cpu["parallax_nvfp4_qdq_counter"] = cap(PxNvfp4CounterCpu);
        cpu["parallax_hadamard16"] = cap(PxHadamardCpu);
        cpu["parallax_fp8_qdq"] = cap(PxFp8Cpu);
        cpu["parallax_mx_qdq"] = cap(PxMxCpu);
#if defined(PARALLAX_HAVE_CUDA)
        cuda["parallax_nvfp4_qdq"] = cap(PxNvfp4Cuda);
        cuda["parallax_nvfp4_qdq_counter"] = cap(PxNvfp4CounterCuda);
        cuda["parallax_hadamard16"] = cap(PxHadamardCuda);
        cuda["parallax_fp8_qdq"] = cap(PxFp8Cuda);
        cuda["parallax_mx_qdq"] = cap(PxMxCuda);
#endif
        nb::dict out;
        out["cpu"] = cpu;
        out["cuda"] = cuda;
        return out;
      },
      "XLA FFI handlers as capsules: {'cpu': {name: capsule}, 'cuda': {name: capsule}} (empty "
      "'cuda' without the CUDA kernels).");
}
