"""The JAX/Flax engine: the shared LLaMA in Flax, Optax AdamW, one jitted step with donation.

Importing this module does not import JAX; ``check`` raises a ParallaxError naming the
``jax`` extra when it is missing.
"""

from __future__ import annotations

import numpy as np

from parallax.config import RunConfig
from parallax.engines.base import Engine, EngineOutput, Plan, Progress
from parallax.errors import ParallaxError


class JaxEngine(Engine):
    name = "jax"

    def check(self, run: RunConfig) -> Plan:
        """Device, recipe (library, capability, the recipe's own checks) and the label the run
        records, decided once, before any training. The attention backend is chosen when the
        model is built (it needs a compiled probe on the device)."""
        from parallax.engines.jax.runtime import import_jax, resolve_device
        from parallax.precision import capability
        from parallax.precision.jax.select import for_recipe, on_device

        recipe = run.recipe_spec
        capability.require_implemented(recipe)
        if not run.compile:
            raise ParallaxError(
                "the JAX engine always compiles with XLA; drop --no-compile (it applies to torch only)"
            )
        import_jax()
        device = resolve_device(run.device)
        cc = getattr(device, "compute_capability", None)
        capability.require(recipe, device.platform, cc, getattr(device, "device_kind", ""))
        precision = for_recipe(recipe)
        precision.hooks.check(device)
        precision = on_device(precision, device.platform, cc)
        return Plan(recipe=recipe, precision=precision.info, device=f"{device.platform}:{device.id}",
                    handles={"device": device, "precision": precision})

    def train(self, run: RunConfig, plan: Plan, batches, progress: Progress) -> EngineOutput:
        from parallax.engines.jax.training import train

        return train(run, plan, batches, progress)

    def reference_trainer(self, run: RunConfig, weights: dict[str, np.ndarray], compute_dtype: str,
                          device: str):
        from parallax.engines.jax.reference import JaxReferenceTrainer

        return JaxReferenceTrainer(run, weights, compute_dtype, device)
