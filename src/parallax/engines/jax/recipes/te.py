"""TransformerEngine for JAX: the Flax blocks built from ``transformer_engine.jax.flax`` modules
(``engines/jax/te_model.py``), in bf16 or under TE's autocast (``te_hooks.py``).

- ``te-bf16``: the TE modules with fp8 off: separates "what fp8 buys inside TE" from "TE vs
  our Flax model";
- ``te-fp8-delayed``: ``DelayedScaling(fp8_format=Format.HYBRID)`` with the torch TE recipe's
  amax history (1024, "max"), so the two frameworks' TE cells run the same recipe.
Embedding and lm_head stay bf16 (our Flax code). TE's JAX extension is built from source on the
GPU machine (``../shared/tools/gpu-carry``); measured on the H200: docs/results/2026-12-02-h200-b/.

The library is the JAX extension (``transformer_engine_jax``), which the ``te`` extra (TE for
PyTorch) does not install: the ``te-jax`` extra does.
"""

from __future__ import annotations

from parallax.spec.recipe import Backend, Recipe
from parallax.engines.torch.recipes.te import AMAX_COMPUTE_ALGO, AMAX_HISTORY_LEN, FP8_MIN_CC

TE_JAX = Backend("transformer_engine.jax", distributions=(("transformer_engine_jax",),),
                 module="transformer_engine.jax", extra="te-jax", min_version="2.9")  # autocast(recipe=...): 2.9+
HOOKS = "parallax.engines.jax.recipes.te_hooks:TeJaxHooks"

RECIPES = (
    Recipe(framework="jax", name="te-bf16", format="bf16", backend=TE_JAX, hooks=HOOKS, min_cc=(8, 0),
           summary="TransformerEngine JAX modules in bf16 (no fp8 autocast)",
           params={"te_recipe": None}),
    Recipe(framework="jax", name="te-fp8-delayed", format="fp8", backend=TE_JAX, hooks=HOOKS, min_cc=FP8_MIN_CC,
           summary="TransformerEngine JAX LayerNormDenseGeneral/DenseGeneral/LayerNormMLP under "
                   "DelayedScaling(HYBRID)",
           params={"te_recipe": "DelayedScaling", "fp8_format": "HYBRID",
                   "amax_history_len": AMAX_HISTORY_LEN, "amax_compute_algo": AMAX_COMPUTE_ALGO,
                   "collection": "fp8_metas"}),
)
