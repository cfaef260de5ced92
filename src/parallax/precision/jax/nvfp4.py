"""NVFP4 for JAX: planned with the nvfp4 issue (Parallax's native quantization kernels through
XLA's FFI: quantize-dequantize of every block GEMM's operands, bf16 GEMMs, labelled emulated)."""

from __future__ import annotations

from parallax.precision.recipe import Backend, Recipe

NATIVE_QUANT = Backend("parallax._native.quant", module="parallax._native")

RECIPES = (
    Recipe(framework="jax", name="emulated-nvfp4", format="nvfp4", default=True, backend=NATIVE_QUANT,
           hooks=None, emulated=True,
           summary="NVFP4 quantize-dequantize with Parallax's native kernels, bf16 GEMMs (emulated)",
           planned="the nvfp4 issue: native quantization kernels through XLA's FFI"),
)
