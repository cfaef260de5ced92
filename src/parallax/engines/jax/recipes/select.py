"""A JAX recipe turned into what a run uses: dtype names (strings, so this module never
imports JAX), the hooks, and the recorded label."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from parallax.errors import ParallaxError
from parallax.spec.precision import COMPUTE_DTYPES, PrecisionInfo
from parallax.spec.recipe import Recipe


@dataclass(frozen=True)
class JaxPrecision:
    param_dtype: str
    compute_dtype: str
    info: PrecisionInfo
    hooks: object  # precision.jax.base.JaxHooks


def for_recipe(recipe: Recipe, hooks=None) -> JaxPrecision:
    """The recipe's precision, with its hooks (loaded here unless given)."""
    hooks = hooks or recipe.load_hooks()
    info = PrecisionInfo.of(recipe, native=False, details=hooks.details())
    return JaxPrecision(hooks.param_dtype, hooks.compute_dtype, info, hooks)


def on_device(precision: JaxPrecision, platform: str, compute_capability=None) -> JaxPrecision:
    """``precision`` with ``native`` decided for the device that runs it."""
    native = precision.hooks.native(platform, compute_capability)
    details = {**precision.info.details, "device_platform": platform}
    info = dataclasses.replace(precision.info, native=native, details=details)
    return dataclasses.replace(precision, info=info)


def reference(compute_dtype: str) -> JaxPrecision:
    """The precision of a parity reference run: "float32" or "bfloat16" compute, XLA dots."""
    from parallax.spec import registry
    from parallax.engines.jax.recipes.base import JaxHooks

    check_compute_dtype(compute_dtype)
    recipe = registry.get("jax", "bf16")
    hooks = JaxHooks(recipe)
    hooks.compute_dtype = compute_dtype
    info = PrecisionInfo.of(recipe, native=False, details=hooks.details())
    return JaxPrecision(hooks.param_dtype, compute_dtype, info, hooks)


def check_compute_dtype(compute_dtype: str) -> str:
    if compute_dtype not in COMPUTE_DTYPES:
        raise ParallaxError(
            f"unknown compute dtype '{compute_dtype}'; choose one of: {', '.join(COMPUTE_DTYPES)}"
        )
    return compute_dtype
