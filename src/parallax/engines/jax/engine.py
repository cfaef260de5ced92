"""The JAX/Flax engine: the shared LLaMA in Flax, Optax AdamW, one jitted step with donation.

Importing this module does not import JAX; ``check`` raises a ParallaxError naming the
``jax`` extra when it is missing.
"""

from __future__ import annotations

import numpy as np

from parallax.config import RunConfig
from parallax.engines.base import Engine, EngineOutput, Progress
from parallax.errors import ParallaxError
from parallax.precision import PrecisionInfo
from parallax.precision.jax import jax_precision, on_device


class JaxEngine(Engine):
    name = "jax"

    def check(self, run: RunConfig) -> PrecisionInfo:
        from parallax.engines.jax.runtime import import_jax, resolve_device

        precision = jax_precision(run.precision)
        if not run.compile:
            raise ParallaxError(
                "the JAX engine always compiles with XLA; drop --no-compile (it applies to torch only)"
            )
        import_jax()
        device = resolve_device(run.device)
        # The label the run will record: native only where the device has bf16 matrix units.
        return on_device(precision, device.platform, getattr(device, "compute_capability", None)).info

    def train(self, run: RunConfig, batches, progress: Progress) -> EngineOutput:
        from parallax.engines.jax.training import train

        return train(run, batches, progress)

    def reference_trainer(self, run: RunConfig, weights: dict[str, np.ndarray], compute_dtype: str,
                          device: str):
        from parallax.engines.jax.reference import JaxReferenceTrainer

        return JaxReferenceTrainer(run, weights, compute_dtype, device)

