"""TransformerEngine for JAX (``transformer_engine.jax.flax`` under its fp8 autocast): planned.

Its extension builds on the lent H200 from source (~190 s a fresh machine); wiring the Flax
model's blocks to TE's ``DenseGeneral``/``LayerNormMLP`` is not done yet, so the recipes are
listed as planned and refused with that reason."""

from __future__ import annotations

from parallax.precision.recipe import Backend, Recipe

TE_JAX = Backend("transformer_engine.jax", distributions=(("transformer_engine_jax",),),
                 module="transformer_engine.jax", extra="te", min_version="2.8")

RECIPES = (
    Recipe(framework="jax", name="te-fp8-delayed", format="fp8", backend=TE_JAX, hooks=None, min_cc=(8, 9),
           summary="TransformerEngine JAX DenseGeneral/LayerNormMLP under DelayedScaling(HYBRID)",
           planned="TE's JAX modules in the Flax blocks (not wired yet)"),

)
