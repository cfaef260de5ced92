"""torchao float8 training (what torchtitan uses): the plain model's linears converted with
``convert_to_float8_training``, lm_head excluded, then torch.compile (REFERENCE.md §4).

- ``torchao-fp8-tensorwise``: one scale per tensor (dynamic), E4M3 for activations and weights,
  E5M2 for the output gradient;
- ``torchao-fp8-rowwise``: one scale per row, E4M3 for every operand (torchao 0.18's recipe);
  its rowwise ``_scaled_mm`` needs compute capability 9.0 on a GPU.

Both run on the CPU too (``cpu=True``): torch ≥ 2.13 has a CPU ``_scaled_mm`` for both scalings,
eager and compiled (seen with torch 2.13.0+cpu, torchao 0.18.0): correct fp8 arithmetic for the
tiny preset and tests, no fp8 hardware and no benchmark numbers.

The hooks (``TorchaoFloat8Hooks``): the plain model with its block linears swapped for torchao
``Float8Linear``.

Each converted linear runs its three GEMMs (forward y = x·Wᵀ, input gradient dx = dy·W,
weight gradient dW = dyᵀ·x) through ``torch._scaled_mm`` on fp8 operands with dynamic scales
computed from each tensor's current amax: ``tensorwise`` one scale per tensor, E4M3 (precision)
for x and W and E5M2 (range) for the gradient dy; ``rowwise`` one scale per row, E4M3 for all
of them (torchao's rowwise recipe), its scaled GEMM needs compute capability 9.0 on a GPU.
The casts and amax reductions are ordinary torch ops, so torch.compile of the whole model
fuses them into the neighbouring kernels: that is where the speed comes from.

Not converted: ``lm_head`` (the recipe's ``excluded``: the last layer stays bf16, as torchtitan
does) and any linear whose dimensions are not multiples of 16 (``_scaled_mm`` requires it).
torch 2.13's ``_scaled_mm`` also runs on the CPU (correct arithmetic, no fp8 hardware), so these
recipes run the tiny preset there.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata

from parallax.spec.recipe import Backend, Recipe
from parallax.errors import ParallaxError
from parallax.engines.torch.recipes.base import TorchHooks


TORCHAO = Backend("torchao", distributions=(("torchao",),), module="torchao", extra="torchao",
                  min_version="0.12")
HOOKS = "parallax.engines.torch.recipes.torchao:TorchaoFloat8Hooks"
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


DIM_MULTIPLE = 16  # _scaled_mm: both dims of every fp8 operand, the token count included


class TorchaoFloat8Hooks(TorchHooks):
    # Under FSDP2 (--sharding fsdp, several GPUs) the tensorwise recipe all-gathers the converted
    # weights in fp8 (torchao's enable_fsdp_float8_all_gather); rowwise has no such path and
    # gathers float32. ``check`` decides it from the run.
    fsdp_float8_all_gather = False

    def float8_config(self):
        from torchao.float8 import Float8LinearConfig

        config = Float8LinearConfig.from_recipe_name(self.recipe.params["torchao_recipe"])
        if self.fsdp_float8_all_gather:
            config = dataclasses.replace(config, enable_fsdp_float8_all_gather=True)
        return config

    def convertible(self, linear, fqn: str) -> bool:
        """torchao's module filter (asked for every nn.Linear): whether it becomes a Float8Linear."""
        if fqn in self.recipe.params["excluded"]:
            return False
        return linear.in_features % DIM_MULTIPLE == 0 and linear.out_features % DIM_MULTIPLE == 0

    # ---- before any GPU work
    def check(self, torch, device, run=None) -> None:
        self.fsdp_float8_all_gather = bool(run is not None and run.gpus > 1 and run.sharding == "fsdp"
                                           and self.recipe.params["torchao_recipe"] == "tensorwise")
        if run is not None and (run.batch_size * run.seq_len) % DIM_MULTIPLE:
            raise ParallaxError(
                f"recipe '{self.recipe.name}': torchao float8 needs batch·seq divisible by {DIM_MULTIPLE} "
                f"(the weight-gradient GEMM's inner dimension); {run.batch_size}·{run.seq_len} is not")

    def details(self, torch) -> dict:
        config = self.float8_config()
        casts = {f.name.removeprefix("cast_config_"): getattr(config, f.name)
                 for f in dataclasses.fields(config) if f.name.startswith("cast_config_")}
        return {**super().details(torch), "torchao_version": importlib.metadata.version("torchao"),
                "float8_recipe": self.recipe.params["torchao_recipe"],
                "float8_casts": {role: f"{c.scaling_type.value} {c.scaling_granularity.value} "
                                       f"{str(c.target_dtype).removeprefix('torch.')}" for role, c in casts.items()},
                "excluded": list(self.recipe.params["excluded"]),
                "fsdp_float8_all_gather": config.enable_fsdp_float8_all_gather}

    # ---- the model
    def build(self, torch, config, weights, device):
        from torchao.float8 import convert_to_float8_training

        module = super().build(torch, config, weights, device)
        return convert_to_float8_training(module, config=self.float8_config(), module_filter_fn=self.convertible)

    def quantized(self, module) -> list[str]:
        from torchao.float8.float8_linear import Float8Linear

        return [f"{name}.weight" for name, layer in module.named_modules() if isinstance(layer, Float8Linear)]
