"""JAX fp8 with MaxText's numerics: Flax's fp8 dot_generals in every linear of the blocks
(embedding and lm_head stay bf16).

- ``flax-fp8-delayed``: ``flax.linen.Fp8DotGeneralOp`` — delayed scaling: each GEMM operand's
  scale comes from an amax history kept in the ``_overwrite_with_gradient`` collection (E4M3
  forward, E5M2 gradients), as MaxText's ``fp8_gpu`` mode did before Qwix; the torch
  counterpart is TE DelayedScaling, so this is the JAX default for ``--precision fp8``;
- ``flax-fp8-direct``: ``flax.linen.Fp8DirectDotGeneralOp`` — MaxText's ``quantization: fp8``
  (REFERENCE.md §1). Its scaling is delayed too: in Flax 0.12 it keeps the same amax histories
  and scales in the same collection (read from the op by ``FlaxFp8Hooks``); what differs is
  that it hands fp8 operands straight to the dot, where the other op quantizes and dequantizes
  in bf16 and leaves XLA to match the pattern into an fp8 GEMM.

Flax 0.12 marks ``Fp8DotGeneralOp`` deprecated (in favour of the direct op and ``Fp8Einsum``);
it still ships and is what MaxText's ``fp8_gpu`` used, so it stays the delayed-scaling recipe.

The hooks (``FlaxFp8Hooks``): an fp8 ``dot_general`` class for the
seven block linears of every layer; the embedding and lm_head keep XLA's bf16 dot.

Both Flax ops quantize the GEMM operands to E4M3 in the forward pass and the output gradient
to E5M2 in the backward pass, each with a scale from a history of amaxes (delayed scaling).
The histories and scales are Flax variables of the collection
``flax.linen.fp8_ops.OVERWRITE_WITH_GRADIENT``: the ops' custom_vjp returns their new values
as their 'gradients', so the training step replaces them by their gradient instead of
applying an optimizer (``engines/jax/runtime.py``).

Which collections an op keeps is read from the op itself (``declared_collections``), not
assumed: in Flax 0.12 ``Fp8DirectDotGeneralOp`` keeps the same amax histories and scales as
``Fp8DotGeneralOp`` (it feeds fp8 operands straight into the dot instead of leaving XLA to
match quantize-dequantize patterns; its scaling is delayed too).
"""

from __future__ import annotations

import functools

from parallax.engines.jax.recipes.base import FLAX, JaxHooks
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

HOOKS = "parallax.engines.jax.recipes.flax_fp8:FlaxFp8Hooks"

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


class FlaxFp8Hooks(JaxHooks):
    def dot_general_cls(self):
        """The Flax op class named by the recipe's ``dot_general`` ("flax.linen.<Class>")."""
        import flax.linen as nn

        name = self.recipe.params["dot_general"].rpartition(".")[2]
        return getattr(nn, name)

    def extra_collections(self) -> tuple[str, ...]:
        return declared_collections(self.dot_general_cls())

    def details(self) -> dict:
        import flax

        op = self.dot_general_cls()
        return {**super().details(),
                "flax": flax.__version__,
                "dot_general": f"{op.__module__}.{op.__qualname__}",
                "fwd_dtype": op.e4m3_dtype.__name__, "bwd_dtype": op.e5m2_dtype.__name__,
                "amax_history_length": op.amax_history_length,
                "collections": list(self.extra_collections()),
                "quantized": "wq wk wv wo w_gate w_up w_down of every layer",
                "not_quantized": "embedding and lm_head in bf16"}


@functools.cache
def declared_collections(op_cls) -> tuple[str, ...]:
    """The variable collections ``op_cls`` creates, found by initialising it on abstract
    [2, 16] x [16, 16] bf16 operands (``jax.eval_shape``: nothing is computed)."""
    import warnings

    import jax
    import jax.numpy as jnp

    operand = jax.ShapeDtypeStruct((2, 16), jnp.bfloat16)
    kernel = jax.ShapeDtypeStruct((16, 16), jnp.bfloat16)
    dims = (((1,), (0,)), ((), ()))
    with warnings.catch_warnings():  # Fp8DotGeneralOp warns that it is deprecated (details say so)
        warnings.simplefilter("ignore", DeprecationWarning)
        shapes = jax.eval_shape(lambda x, k: op_cls().init(jax.random.key(0), x, k, dims), operand, kernel)
    return tuple(sorted(c for c in shapes if c != "params"))
