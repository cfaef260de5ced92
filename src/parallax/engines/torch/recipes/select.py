"""A torch recipe turned into what a run uses: its hooks, the compute dtype and the label
recorded in the result."""

from __future__ import annotations

from dataclasses import dataclass

from parallax.errors import ParallaxError
from parallax.spec.precision import PrecisionInfo
from parallax.spec.recipe import Recipe


@dataclass(frozen=True)
class TorchPrecision:
    info: PrecisionInfo
    compute_dtype: object  # torch.dtype
    hooks: object  # precision.torch.base.TorchHooks

    def autocast(self, torch, device_type: str):
        return self.hooks.context(torch, device_type)


def for_recipe(torch, recipe: Recipe, device, run=None) -> TorchPrecision:
    """The recipe's hooks, checked against ``device`` (and ``run``'s shapes); ParallaxError
    when it cannot run."""
    hooks = recipe.load_hooks()
    hooks.check(torch, device, run)
    details = {**hooks.details(torch), "device_type": device.type}
    info = PrecisionInfo.of(recipe, native=hooks.native(torch, device), details=details)
    return TorchPrecision(info, hooks.compute_dtype(torch), hooks)


def for_compute_dtype(torch, compute_dtype: str, device) -> TorchPrecision:
    """The recipe of a reference (parity) run: "float32" (no autocast) or "bfloat16"."""
    from parallax.spec import registry
    from parallax.engines.torch.recipes.autocast import Float32Hooks

    if compute_dtype == "bfloat16":
        return for_recipe(torch, registry.get("torch", "bf16"), device)
    if compute_dtype != "float32":
        raise ParallaxError(f"unknown compute dtype '{compute_dtype}'; choose float32 or bfloat16")
    hooks = Float32Hooks(registry.get("torch", "bf16"))
    info = PrecisionInfo(precision="fp32", backend="torch", recipe="float32", native=True,
                         details={"summary": "float32 throughout (reference)", "device_type": device.type})
    return TorchPrecision(info, torch.float32, hooks)
