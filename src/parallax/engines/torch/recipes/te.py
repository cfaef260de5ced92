"""TransformerEngine for PyTorch: the blocks built from TE modules, bf16 or fp8 under TE's autocast.

Recipes (``transformer_engine.common.recipe``, REFERENCE.md §3):
- ``te-bf16``: the TE modules in bf16, no fp8: separates "what fp8 buys inside TE" from
  "TE vs plain PyTorch";
- ``te-fp8-delayed``: ``DelayedScaling(fp8_format=Format.HYBRID)`` — E4M3 forward, E5M2
  backward, scales from an amax history (the spec's fp8 recipe, so the torch default);
- ``te-fp8-current``: ``Float8CurrentScaling(fp8_format=Format.HYBRID)`` — scales from the
  tensor's own amax, each GEMM;
- ``te-nvfp4``: ``NVFP4BlockScaling()`` — TE's full NVFP4 training recipe (2D 16×16 weight
  scaling, RHT on the wgrad inputs, stochastic rounding of gradients) on compute capability
  10.x; on 12.x (RTX PRO 6000, RTX 50xx) the variant TE supports there, RHT and SR off, with a
  warning (``te_hooks.nvfp4_variant``; REFERENCE.md §1). The default of ``--precision nvfp4``
  on 10.0+ (``default_min_cc``); elsewhere that is ``emulated-nvfp4``. Not yet run on hardware.
The model is ``engines/torch/te_model.py``; embedding and lm_head stay bf16 (plain torch).
``cuda_graphs=True``: the engine can replay the blocks as CUDA graphs (``te.make_graphed_callables``,
``te_hooks.py``), on by default on a GPU (``--cuda-graphs``).
"""

from __future__ import annotations

from parallax.spec.recipe import Backend, Recipe

TE = Backend("transformer_engine", distributions=(("transformer_engine_torch",),),
             module="transformer_engine.pytorch", extra="te", min_version="2.8")
HOOKS = "parallax.engines.torch.recipes.te_hooks:TransformerEngineHooks"
FP8_MIN_CC = (8, 9)  # TE's is_fp8_available(): Ada, Hopper, Blackwell
NVFP4_MIN_CC = (10, 0)  # TE's is_nvfp4_available(): Blackwell
AMAX_HISTORY_LEN = 1024
AMAX_COMPUTE_ALGO = "max"

RECIPES = (
    Recipe(framework="torch", name="te-bf16", format="bf16", backend=TE, hooks=HOOKS, min_cc=(8, 0),
           cuda_graphs=True,
           summary="TransformerEngine modules in bf16 (no fp8 autocast)",
           params={"te_recipe": None}),
    Recipe(framework="torch", name="te-fp8-delayed", format="fp8", default=True, backend=TE, hooks=HOOKS,
           min_cc=FP8_MIN_CC, cuda_graphs=True,
           summary="TransformerEngine DelayedScaling(HYBRID): E4M3 forward, E5M2 backward, amax history",
           params={"te_recipe": "DelayedScaling", "fp8_format": "HYBRID",
                   "amax_history_len": AMAX_HISTORY_LEN, "amax_compute_algo": AMAX_COMPUTE_ALGO}),
    Recipe(framework="torch", name="te-fp8-current", format="fp8", backend=TE, hooks=HOOKS,
           min_cc=FP8_MIN_CC, cuda_graphs=True,
           summary="TransformerEngine Float8CurrentScaling(HYBRID): per-tensor scales from the current amax",
           params={"te_recipe": "Float8CurrentScaling", "fp8_format": "HYBRID"}),
    Recipe(framework="torch", name="te-nvfp4", format="nvfp4", default_min_cc=NVFP4_MIN_CC, backend=TE,
           hooks=HOOKS, min_cc=NVFP4_MIN_CC,
           summary="TransformerEngine NVFP4BlockScaling (RHT, stochastic rounding, 2D weights); not yet run on hardware",
           params={"te_recipe": "NVFP4BlockScaling", "disable_rht": False, "disable_stochastic_rounding": False,
                   "disable_2d_quantization": False},
           notes=("12.x: RHT and stochastic rounding off (TE PR #3195), TransformerEngine >= 2.19 (PR #3281)",)),
)
