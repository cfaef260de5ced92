"""The hooks the JAX engine calls for a recipe, and their default: bf16 compute over float32
parameters with XLA's own dot_general in every linear.

A recipe overrides what it changes: Flax fp8 hands the block linears an fp8 ``dot_general``
class and carries its scales and amax history as extra variables (``flax_fp8_hooks.py``).
Methods that need JAX import it themselves, so importing a recipe module never imports JAX.
"""

from __future__ import annotations

from parallax import hardware
from parallax.precision.recipe import Backend

FLAX = Backend("flax", module="flax", extra="jax")


class JaxHooks:
    compute_dtype = "bfloat16"
    param_dtype = "float32"

    def __init__(self, recipe):
        self.recipe = recipe

    def check(self, device, run=None) -> None:
        """Raise ParallaxError when this recipe cannot run on ``device`` here (at the shapes and
        seed of ``run``, a RunConfig; None where there is no run)."""

    def native(self, platform: str, compute_capability) -> bool:
        """Native where an NVIDIA GPU has tensor cores for the format. XLA:CPU converts the
        operands of a bf16 dot to float32 and rounds the result back (seen in the optimized HLO
        of jax 0.10.2), so a CPU run is emulated: its loss shows the rounding, its speed is not
        the format's arithmetic."""
        return platform == "gpu" and self.recipe.format in hardware.native_precisions(compute_capability)

    def details(self) -> dict:
        return {"param_dtype": self.param_dtype, "compute_dtype": self.compute_dtype,
                "residual_dtype": self.compute_dtype, "norm_statistics": "float32", "rope": "float32",
                "attention_softmax": "float32", "loss": "float32", "optimizer_state": "float32"}

    def xla_flags(self) -> tuple[str, ...]:
        """XLA flags the recipe needs; the engine adds them to XLA_FLAGS before JAX starts."""
        return tuple(self.recipe.params.get("xla_flags", ()))

    def dot_general_cls(self):
        """A Flax dot_general module class for the block linears, or None for XLA's own."""
        return None

    def extra_collections(self) -> tuple[str, ...]:
        """Variable collections besides ``params`` the training state carries; each is
        replaced by its 'gradient' every step (Flax's OVERWRITE_WITH_GRADIENT convention)."""
        return ()
