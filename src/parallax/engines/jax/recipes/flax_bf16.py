"""JAX bf16: Flax ``dtype=bfloat16`` compute over float32 parameters, as MaxText's
``weight_dtype: float32, dtype: bfloat16``. RMSNorm statistics, RoPE, the attention softmax and
the loss are float32 inside the model (``engines/jax/model.py``)."""

from __future__ import annotations

from parallax.engines.jax.recipes.base import FLAX
from parallax.spec.recipe import Recipe

RECIPES = (
    Recipe(framework="jax", name="bf16", format="bf16", default=True, cpu=True, backend=FLAX,
           summary="Flax bf16 compute dtype over fp32 parameters (XLA)",
           hooks="parallax.engines.jax.recipes.base:JaxHooks"),
)
