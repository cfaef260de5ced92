"""JAX bindings of Parallax's native quantization kernels: XLA FFI custom calls.

The handlers are C++ (csrc/quant/jax_ffi.cpp, written against jaxlib's ``xla/ffi/api/ffi.h``
and compiled into parallax._native only when those headers were found at build time). They
are registered with ``jax.ffi.register_ffi_target`` on first use: on the CPU they run the CPU
implementation, on CUDA GPUs the CUDA kernels on the stream XLA hands them. Inside ``jit`` each
call is one opaque custom call. Inputs are float32 or bfloat16, quantized along the last
dimension; results have the input's dtype (computed in float32, bfloat16 rounded to nearest
even). The per-tensor amax is over the whole operand, so ``vmap`` runs the call once per
example (``vmap_method="sequential"``) rather than quantizing a batch as one tensor.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from parallax.quant import (MODE_CODES, MX_BLOCK, MX_ELEMS, MX_RULES, available_bindings, check_fp8, check_mx, check_seed,
                            check_shape, native)

_PLATFORMS = {"cpu": "cpu", "cuda": "CUDA"}


@functools.lru_cache(maxsize=1)
def register() -> dict[str, list[str]]:
    """Register the handlers with XLA once; {'cpu': [names], 'cuda': [names]}. RuntimeError
    when this build has no JAX FFI handlers."""
    if not available_bindings()["jax_ffi"]:
        raise RuntimeError("parallax quant: this build has no JAX FFI handlers (jaxlib's FFI headers were not "
                           "found when parallax._native was built); reinstall with jax installed "
                           "(pip install --no-deps -e .)")
    done: dict[str, list[str]] = {}
    for platform, handlers in native().jax_ffi_targets().items():
        for name, capsule in handlers.items():
            jax.ffi.register_ffi_target(name, capsule, platform=_PLATFORMS[platform])
        done[platform] = sorted(handlers)
    return done


def _check_dtype(x, what: str) -> None:
    if x.dtype not in (jnp.float32, jnp.bfloat16):
        raise ValueError(f"{what}: x must be float32 or bfloat16, got {x.dtype}")


def nvfp4_quantize(x, mode: str = "1x16", stochastic: bool = False, seed: int = 0, rht: bool = False,
                   rht_seed: int = 0, with_codes: bool = True):
    """(y, codes uint8 [rows, cols/2], scales uint8, {amax, s_global} f32[2]); rows is the product
    of the leading dimensions. with_codes=False: codes and scales are empty (not written); mode
    16x1 (the 1x16 blocks of the transpose, in x's layout) gives no codes."""
    register()
    x = jnp.asarray(x)
    _check_dtype(x, "nvfp4")
    if with_codes and mode == "16x1":
        raise ValueError("nvfp4_quantize: mode 16x1 gives the dequantized values only; use nvfp4_qdq, or "
                         "quantize the transpose in 1x16 for codes and scales")
    rows, cols = check_shape(tuple(x.shape), mode)
    srows = rows // 16 if mode == "16x16" else rows
    out = (jax.ShapeDtypeStruct(x.shape, x.dtype),
           jax.ShapeDtypeStruct((rows, cols // 2) if with_codes else (0,), jnp.uint8),
           jax.ShapeDtypeStruct((srows, cols // 16) if with_codes else (0,), jnp.uint8),
           jax.ShapeDtypeStruct((2,), jnp.float32))
    call = jax.ffi.ffi_call("parallax_nvfp4_qdq", out, vmap_method="sequential")
    return call(x, mode=np.int32(MODE_CODES[mode]), stochastic=np.bool_(stochastic),
                seed=np.uint64(check_seed(seed)), rht=np.bool_(rht), rht_seed=np.uint64(check_seed(rht_seed, "rht_seed")))


def nvfp4_qdq(x, mode: str = "1x16", stochastic: bool = False, seed: int = 0, rht: bool = False, rht_seed: int = 0):
    """NVFP4 quantize-dequantize along the last dimension (optionally after the 16x16 RHT)."""
    return nvfp4_quantize(x, mode, stochastic, seed, rht, rht_seed, with_codes=False)[0]


def nvfp4_qdq_counter(x, counter, mode: str = "1x16", stochastic: bool = False, seed: int = 0, rht: bool = False,
                      rht_seed: int = 0):
    """nvfp4_qdq with the stochastic-rounding seed ``step_seed(seed, counter)`` (csrc/quant/qdq_math.h),
    ``counter`` a traced scalar (converted to uint32; exact for integer values below 2**24 when
    it is a float32): a jitted step advances it without recompiling."""
    register()
    x = jnp.asarray(x)
    _check_dtype(x, "nvfp4")
    check_shape(tuple(x.shape), mode)
    counter = jnp.asarray(counter).astype(jnp.uint32).reshape(())
    out = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((0,), jnp.uint8),
           jax.ShapeDtypeStruct((0,), jnp.uint8), jax.ShapeDtypeStruct((2,), jnp.float32))
    call = jax.ffi.ffi_call("parallax_nvfp4_qdq_counter", out, vmap_method="sequential")
    return call(x, counter, mode=np.int32(MODE_CODES[mode]), stochastic=np.bool_(stochastic),
                seed=np.uint64(check_seed(seed)), rht=np.bool_(rht),
                rht_seed=np.uint64(check_seed(rht_seed, "rht_seed")))[0]


def hadamard16(x, seed: int = 0, inverse: bool = False):
    """The 16x16 random Hadamard transform of each group of 16 along the last dimension."""
    register()
    x = jnp.asarray(x)
    _check_dtype(x, "hadamard16")
    check_shape(tuple(x.shape), "1x16", "hadamard16")
    call = jax.ffi.ffi_call("parallax_hadamard16", jax.ShapeDtypeStruct(x.shape, x.dtype), vmap_method="broadcast_all")
    return call(x, seed=np.uint64(check_seed(seed)), inverse=np.bool_(inverse))


def fp8_qdq(x, fmt: str = "e4m3", scale: float = 1.0, saturate: bool | None = None):
    """FP8 quantize-dequantize with a given scale: decode(encode(x / scale)) * scale."""
    register()
    x = jnp.asarray(x)
    _check_dtype(x, "fp8_qdq")
    sat = check_fp8(fmt, saturate)
    out = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((0,), jnp.uint8))
    call = jax.ffi.ffi_call("parallax_fp8_qdq", out, vmap_method="broadcast_all")
    return call(x, fmt=np.int32(0 if fmt == "e4m3" else 1), scale=np.float32(scale), saturate=np.bool_(sat))[0]


def mx_quantize(x, elem: str = "e4m3", rule: str = "floor", stochastic: bool = False, seed: int = 0,
                counter=None, with_codes: bool = True):
    """(y, codes uint8 [rows, cols] one per element, E8M0 scales uint8 [rows, cols/32]): MX
    quantize-dequantize along the last dimension (csrc/quant/mx.h). ``counter`` (a traced scalar,
    converted to uint32): the SR seed is step_seed(seed, counter). with_codes=False: codes and
    scales are empty (not written)."""
    register()
    x = jnp.asarray(x)
    _check_dtype(x, "mx")
    rows, cols = check_mx(tuple(x.shape), elem, rule)
    use_counter = counter is not None
    counter = jnp.asarray(counter if use_counter else 0).astype(jnp.uint32).reshape(())
    out = (jax.ShapeDtypeStruct(x.shape, x.dtype),
           jax.ShapeDtypeStruct((rows, cols) if with_codes else (0,), jnp.uint8),
           jax.ShapeDtypeStruct((rows, cols // MX_BLOCK) if with_codes else (0,), jnp.uint8))
    call = jax.ffi.ffi_call("parallax_mx_qdq", out, vmap_method="sequential")
    return call(x, counter, elem=np.int32(MX_ELEMS[elem]), rule=np.int32(MX_RULES[rule]),
                stochastic=np.bool_(stochastic), seed=np.uint64(check_seed(seed)), use_counter=np.bool_(use_counter))


def mx_qdq(x, elem: str = "e4m3", rule: str = "floor", stochastic: bool = False, seed: int = 0, counter=None):
    """MX quantize-dequantize along the last dimension (blocks of 32, E8M0 scales)."""
    return mx_quantize(x, elem, rule, stochastic, seed, counter, with_codes=False)[0]
