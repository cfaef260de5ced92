"""torchao float8 training (what torchtitan uses): the plain model's linears converted with
``convert_to_float8_training``, lm_head excluded, then torch.compile (REFERENCE.md §4).

- ``torchao-fp8-tensorwise``: one scale per tensor (dynamic), E4M3 for activations and weights,
  E5M2 for the output gradient;
- ``torchao-fp8-rowwise``: one scale per row, E4M3 for every operand (torchao 0.18's recipe);
  its rowwise ``_scaled_mm`` needs compute capability 9.0 on a GPU.

Both run on the CPU too (``cpu=True``): torch ≥ 2.13 has a CPU ``_scaled_mm`` for both scalings,
eager and compiled (seen with torch 2.13.0+cpu, torchao 0.18.0): correct fp8 arithmetic for the
tiny preset and tests, no fp8 hardware and no benchmark numbers.
"""

from __future__ import annotations

from parallax.spec.recipe import Backend, Recipe

TORCHAO = Backend("torchao", distributions=(("torchao",),), module="torchao", extra="torchao",
                  min_version="0.12")
HOOKS = "parallax.engines.torch.recipes.torchao_hooks:TorchaoFloat8Hooks"
EXCLUDED = ("lm_head",)

RECIPES = (
    Recipe(framework="torch", name="torchao-fp8-tensorwise", format="fp8", backend=TORCHAO, hooks=HOOKS,
           min_cc=(8, 9), cpu=True,
           summary="torchao float8 tensorwise (dynamic per-tensor scales), torch.compile, lm_head in bf16",
           params={"torchao_recipe": "tensorwise", "excluded": list(EXCLUDED)},
           fsdp="fp8 all-gather of the block linears' weights (torchao enable_fsdp_float8_all_gather)"),
    Recipe(framework="torch", name="torchao-fp8-rowwise", format="fp8", backend=TORCHAO, hooks=HOOKS,
           min_cc=(9, 0), cpu=True,
           summary="torchao float8 rowwise (per-row scales), torch.compile, lm_head in bf16",
           params={"torchao_recipe": "rowwise", "excluded": list(EXCLUDED)},
           fsdp="float32 all-gather, rowwise fp8 cast per GEMM (torchao has no rowwise float8 all-gather)"),
)
