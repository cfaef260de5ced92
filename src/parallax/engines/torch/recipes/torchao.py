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
# torchao 0.18's MXFP8 training (torchao.prototype.moe_training.MXFP8TrainingOpConfig): its weight
# wrapper sends F.linear to an MXFP8 autograd function (dense linears as well as grouped GEMMs);
# the EMULATED kernel preference quantize-dequantizes with torch ops (MXTensor.to_mx) and runs the
# GEMMs in high precision, on any device.
TORCHAO_MX = Backend("torchao", distributions=(("torchao",),), module="torchao.prototype.moe_training",
                     extra="torchao", min_version="0.18")
MX_HOOKS = "parallax.engines.torch.recipes.torchao:TorchaoMxfp8Hooks"
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
    Recipe(framework="torch", name="torchao-mxfp8-emulated", format="mxfp8", backend=TORCHAO_MX,
           hooks=MX_HOOKS, cpu=True, emulated=True,
           summary="torchao MXFP8 training (MXFP8TrainingOpConfig, emulated, rceil scales) on the block linears: "
                   "the same format as emulated-mxfp8 by another implementation",
           params={"torchao_recipe": "mxfp8_emulated_rceil", "excluded": list(EXCLUDED), "elem": "e4m3",
                   "scale_rule": "rceil", "block": 32, "bf16_last_fraction": 0.0}),
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


class TorchaoMxfp8Hooks(TorchHooks):
    """torchao's emulated MXFP8 training recipe on the block linears (lm_head excluded, as the
    float8 recipes): every GEMM operand of a converted linear cast to MXFP8 (E4M3, an E8M0 scale
    per 32 along the reduction dimension, rceil scales), the GEMMs emulated by torchao."""

    def training_config(self):
        from torchao.prototype.moe_training.config import MXFP8TrainingOpConfig, MXFP8TrainingRecipe

        return MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe(self.recipe.params["torchao_recipe"]))

    def convertible(self, module, fqn: str) -> bool:
        """Block linears whose dimensions the 32-blocks tile; never lm_head."""
        import torch

        if not isinstance(module, torch.nn.Linear) or fqn in self.recipe.params["excluded"]:
            return False
        return module.in_features % 32 == 0 and module.out_features % 32 == 0

    def check(self, torch, device, run=None) -> None:
        if run is not None:
            from parallax.spec.mx_scheme import check_shapes

            check_shapes(self.recipe.name, run)

    def details(self, torch) -> dict:
        config = self.training_config()
        return {**super().details(torch), "torchao_version": importlib.metadata.version("torchao"),
                "mxfp8_recipe": self.recipe.params["torchao_recipe"],
                "kernel_preference": str(config.kernel_preference.value),
                "scale_calculation_mode": str(config.scale_calculation_mode.value),
                "wgrad_with_hp": config.wgrad_with_hp, "excluded": list(self.recipe.params["excluded"])}

    def build(self, torch, config, weights, device):
        module = super().build(torch, config, weights, device)
        self.convert(module)
        return module

    def convert(self, module) -> list[str]:
        """torchao's conversion of the convertible linears, in place; their names. torchao's emulated
        GEMMs need the input in the weight's dtype (they ignore autocast: a bf16 input and a float32
        master weight fail in its mm), so each converted linear casts its input to the weight's
        dtype first (bf16 activations widen exactly; the weight is quantized from its float32 value)."""
        from torchao.quantization import quantize_

        names = [fqn for fqn, m in module.named_modules() if self.convertible(m, fqn)]
        quantize_(module, self.training_config(), filter_fn=self.convertible)
        for fqn in names:
            module.get_submodule(fqn).register_forward_pre_hook(_input_as_weight)
        return names

    def quantized(self, module) -> list[str]:
        from torchao.prototype.moe_training.tensor import MXFP8TrainingWeightWrapperTensor

        return [name for name, p in module.named_parameters() if isinstance(p.data, MXFP8TrainingWeightWrapperTensor)
                or isinstance(p, MXFP8TrainingWeightWrapperTensor)]


def _input_as_weight(linear, args):
    return (args[0].to(linear.weight.dtype),) + tuple(args[1:])
