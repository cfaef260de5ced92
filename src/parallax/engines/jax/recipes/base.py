"""The hooks the JAX engine calls for a recipe, and their default: bf16 compute over float32
parameters with XLA's own dot_general in every linear.

A recipe overrides what it changes: Flax fp8 hands the block linears an fp8 ``dot_general``
class and carries its scales and amax history as extra variables (``flax_fp8.py``);
TransformerEngine builds its own model, with its own parameter tree, and traces it inside
TE's autocast (``te.py``). Methods that need JAX import it themselves, so importing a
recipe module never imports JAX.
"""

from __future__ import annotations

import contextlib

from parallax.plan import capability as cap
from parallax.spec.recipe import Backend

FLAX = Backend("flax", module="flax", extra="jax")


class JaxHooks:
    compute_dtype = "bfloat16"
    param_dtype = "float32"

    def __init__(self, recipe):
        self.recipe = recipe

    def prepare(self) -> None:
        """Called once before JAX (and the recipe's library) is imported: process settings the
        library reads when it loads."""

    def check(self, device, run=None) -> None:
        """Raise ParallaxError when this recipe cannot run on ``device`` here (at the shapes and
        seed of ``run``, a RunConfig; None where there is no run)."""

    def check_parallel(self, run) -> None:
        """Raise ParallaxError when this recipe cannot run data-parallel over ``run.gpus``
        devices (``engines/jax/parallel.py``); the Flax recipes can: their step is one program
        that XLA partitions."""

    def native(self, platform: str, compute_capability) -> bool:
        """Native where an NVIDIA GPU has tensor cores for the format (``plan.capability``
        decides it for every engine). XLA:CPU converts the operands of a bf16 dot to float32 and
        rounds the result back (seen in the optimized HLO of jax 0.10.2): a CPU run's loss shows
        the rounding, its speed is not the format's arithmetic."""
        return cap.runs_natively(self.recipe.format, platform, compute_capability)

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

    # ---- the model: the plain Llama by default; a recipe may build its own
    def model(self, config, dtype, attention: str):
        """The Flax module a run trains (``runtime.build_model`` calls this)."""
        from parallax.engines.jax.model import Llama

        return Llama(config, dtype=dtype, attention=attention, dot_general_cls=self.dot_general_cls())

    def to_params(self, weights, config):
        """The model's ``params`` tree (NumPy float32 leaves) from canonical weights."""
        from parallax.engines.jax.convert import to_flax

        return to_flax(weights, config)

    def from_params(self, params, config) -> dict:
        """Canonical float32 weights from the model's ``params`` tree (or its gradients)."""
        from parallax.engines.jax.convert import from_flax

        return from_flax(params)

    def quantized_kernels(self, config) -> list[tuple[tuple[str, ...], str]]:
        """(param tree path, name recorded by the numerics guard) of every quantized kernel."""
        from parallax.engines.jax.convert import canonical_name
        from parallax.engines.jax.runtime import quantized_kernels

        return [(path, canonical_name(path)) for path in quantized_kernels(config, self.dot_general_cls())]

    def context(self):
        """Entered around building, initialising and tracing the model (a library that reads
        its recipe from a global at trace time, as TE's autocast does, needs it there)."""
        return contextlib.nullcontext()
