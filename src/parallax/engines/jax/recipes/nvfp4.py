"""Emulated NVFP4 for JAX: every block linear's Dense gets Parallax's NVFP4 ``dot_general``
(``parallax.quant.jax_nvfp4_linear``): its GEMM operands quantize-dequantized by the native
kernels through XLA's FFI, bf16 GEMMs. The numerics, the blocks kept in bf16 and the seed scheme
are ``spec/nvfp4_scheme.py``'s, shared with the torch recipe of the same name, so both
engines quantize the same tensors to the same bits. Labelled emulated everywhere: its step time
is the cost of emulation, never NVFP4 speed. TE-JAX's NVFP4 is not wired (``te.py``).
"""

from __future__ import annotations

from parallax.spec import nvfp4_scheme
from parallax.spec.recipe import Backend, Recipe

NATIVE_QUANT = Backend("parallax._native.quant", module="parallax._native")
HOOKS = "parallax.engines.jax.recipes.nvfp4_hooks:EmulatedNvfp4Hooks"

RECIPES = (
    Recipe(framework="jax", name="emulated-nvfp4", format="nvfp4", default=True, cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="NVFP4 quantize-dequantize with Parallax's native kernels (XLA FFI), bf16 GEMMs (emulated), "
                   "the last blocks in bf16",
           params=dict(nvfp4_scheme.PARAMS)),
    Recipe(framework="jax", name="emulated-nvfp4-all", format="nvfp4", cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="emulated NVFP4 in every block (no bf16 blocks: the ablation of the last-blocks rule)",
           params=dict(nvfp4_scheme.PARAMS_ALL)),
)
