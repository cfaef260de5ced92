"""The hooks of the Flax fp8 recipes (``flax_fp8.py``): an fp8 ``dot_general`` class for the
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

from parallax.engines.jax.recipes.base import JaxHooks


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
