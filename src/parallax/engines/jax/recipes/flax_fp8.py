"""JAX fp8 with MaxText's numerics: Flax's fp8 dot_generals in every linear of the blocks
(embedding and lm_head stay bf16).

- ``flax-fp8-delayed``: ``flax.linen.Fp8DotGeneralOp`` — delayed scaling: each GEMM operand's
  scale comes from an amax history kept in the ``_overwrite_with_gradient`` collection (E4M3
  forward, E5M2 gradients), as MaxText's ``fp8_gpu`` mode did before Qwix; the torch
  counterpart is TE DelayedScaling, so this is the JAX default for ``--precision fp8``;
- ``flax-fp8-direct``: ``flax.linen.Fp8DirectDotGeneralOp`` — MaxText's ``quantization: fp8``
  (REFERENCE.md §1). Its scaling is delayed too: in Flax 0.12 it keeps the same amax histories
  and scales in the same collection (read from the op in ``flax_fp8_hooks.py``); what differs is
  that it hands fp8 operands straight to the dot, where the other op quantizes and dequantizes
  in bf16 and leaves XLA to match the pattern into an fp8 GEMM.

Flax 0.12 marks ``Fp8DotGeneralOp`` deprecated (in favour of the direct op and ``Fp8Einsum``);
it still ships and is what MaxText's ``fp8_gpu`` used, so it stays the delayed-scaling recipe.
"""

from __future__ import annotations

from parallax.engines.jax.recipes.base import FLAX
from parallax.spec.recipe import Recipe

# XLA flags of each recipe: the ones under which its step's optimized HLO holds fp8 GEMMs and runs
# fastest (HLO and throughput: docs/results/2026-12-01-h200/, scripts/device/jax_fp8_hlo.py):
# - the delayed op needs --xla_allow_excess_precision=false, or XLA folds its quantize-dequantize
#   pairs away and the step silently runs in bf16; with --xla_gpu_enable_triton_gemm=false too,
#   every block GEMM is a cuBLASLt fp8 GEMM. It carries both;
# - the direct op's fp8 dots become Triton GEMM fusions with default flags, faster than the
#   cuBLASLt fp8 GEMMs that --xla_gpu_enable_triton_gemm=false gives. It carries no flag.
CUBLASLT_FP8 = ("--xla_gpu_enable_triton_gemm=false",)
KEEP_QDQ = ("--xla_allow_excess_precision=false",)

HOOKS = "parallax.engines.jax.recipes.flax_fp8_hooks:FlaxFp8Hooks"

RECIPES = (
    Recipe(framework="jax", name="flax-fp8-delayed", format="fp8", default=True, backend=FLAX, hooks=HOOKS,
           min_cc=(8, 9), cpu=True,
           summary="Flax Fp8DotGeneralOp: delayed scaling, amax history in its own collection (MaxText fp8_gpu)",
           params={"dot_general": "flax.linen.Fp8DotGeneralOp", "fwd_dtype": "float8_e4m3fn",
                   "bwd_dtype": "float8_e5m2", "collection": "_overwrite_with_gradient",
                   "xla_flags": list(CUBLASLT_FP8 + KEEP_QDQ)}),
    Recipe(framework="jax", name="flax-fp8-direct", format="fp8", backend=FLAX, hooks=HOOKS,
           min_cc=(8, 9), cpu=True,
           summary="Flax Fp8DirectDotGeneralOp: fp8 operands straight into the dot, delayed scaling "
                   "(MaxText quantization=fp8)",
           params={"dot_general": "flax.linen.Fp8DirectDotGeneralOp", "fwd_dtype": "float8_e4m3fn",
                   "bwd_dtype": "float8_e5m2", "collection": "_overwrite_with_gradient",
                   "xla_flags": []}),
)
