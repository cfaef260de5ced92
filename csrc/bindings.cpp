// The one place Python meets the native core: parallax._native.
// Each area binds its own functions (probe/bind_probe.cpp, loader/bind_loader.cpp, quant/bind_quant.cpp).
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_probe(nb::module_& m);
void bind_loader(nb::module_& m);
void bind_quant(nb::module_& m);
#if defined(PARALLAX_HAVE_CUDA)
void bind_quant_cuda(nb::module_& m);
#endif
#if defined(PARALLAX_HAVE_JAX_FFI)
void bind_quant_jax_ffi(nb::module_& m);
#endif

NB_MODULE(_native, m) {
  m.doc() = "Parallax native core: GPU probe, measured GEMM ceilings, token loader, NVFP4/FP8 quantization (CPU reference; CUDA kernels and JAX FFI handlers where built)";
  bind_probe(m);
  bind_loader(m);
  bind_quant(m);
#if defined(PARALLAX_HAVE_CUDA)
  bind_quant_cuda(m);
#endif
#if defined(PARALLAX_HAVE_JAX_FFI)
  bind_quant_jax_ffi(m);
#endif
}
