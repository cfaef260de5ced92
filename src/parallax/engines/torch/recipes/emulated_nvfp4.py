"""Emulated NVFP4 for torch: the plain model's block linears quantize-dequantize their GEMM
operands with Parallax's native kernels (``torch.ops.parallax.*``) and multiply in bf16, under
torch.compile. The numerics, the layers kept in bf16 and the seed scheme are those of
``spec/nvfp4_scheme.py``, shared with the JAX recipe of the same name; the hooks are
``emulated_nvfp4_hooks.py``.

Labelled emulated everywhere (``emulated=True``: ``precision.native`` False, MFU against the
bf16 peak): its step time is the cost of emulating NVFP4, never NVFP4 speed. Runs on the CPU
(the native CPU implementation) and on any CUDA GPU the kernels were built for.
"""

from __future__ import annotations

from parallax.spec import nvfp4_scheme
from parallax.spec.recipe import Backend, Recipe

NATIVE_QUANT = Backend("parallax._native.quant", module="parallax._native")
HOOKS = "parallax.engines.torch.recipes.emulated_nvfp4_hooks:EmulatedNvfp4Hooks"

RECIPES = (
    Recipe(framework="torch", name="emulated-nvfp4", format="nvfp4", default=True, cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="NVFP4 quantize-dequantize with Parallax's native kernels, bf16 GEMMs (emulated), "
                   "the last blocks in bf16",
           params=dict(nvfp4_scheme.PARAMS), fsdp="float32 all-gather, NVFP4 quantize-dequantize per GEMM"),
    Recipe(framework="torch", name="emulated-nvfp4-all", format="nvfp4", cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="emulated NVFP4 in every block (no bf16 blocks: the ablation of the last-blocks rule)",
           params=dict(nvfp4_scheme.PARAMS_ALL), fsdp="float32 all-gather, NVFP4 quantize-dequantize per GEMM"),
)
