"""Precision recipes: what a run asked for and what actually ran.

``recipe.py`` says what a recipe is, ``registry.py`` holds them all (defined one file per
backend in ``torch/``, ``jax/`` and ``maxtext.py``), ``capability.py`` decides whether a recipe
is native, emulated or unavailable on this machine and why. Where fp8 for JAX is decided:
``jax/flax_fp8.py``; for torch: ``torch/te.py`` and ``torch/torchao.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from parallax.spec.recipe import FORMATS

PRECISIONS = FORMATS  # the formats a run's --precision names

NATIVE = "native"
EMULATED = "emulated"
UNAVAILABLE = "unavailable"

# Compute dtypes of a ReferenceTrainer (engines/base.py), as ``parallax parity --dtype`` names them.
COMPUTE_DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class PrecisionInfo:
    """Recorded in every result: the honest label of the arithmetic that ran."""

    precision: str  # the format: bf16 | fp8 | nvfp4 (fp32 for parity references)
    backend: str  # the library: "torch.autocast", "transformer_engine", "torchao", "flax", ...
    recipe: str  # the recipe's name in the registry, e.g. "te-fp8-delayed"
    native: bool  # False when the format is emulated or the device lacks its tensor cores
    details: dict = field(default_factory=dict)  # summary, parameters, library versions

    @classmethod
    def of(cls, recipe, native: bool, details: dict | None = None) -> "PrecisionInfo":
        """The label of a registry recipe; ``native`` as decided for the device."""
        return cls(precision=recipe.format, backend=recipe.backend.name, recipe=recipe.name,
                   native=native and not recipe.emulated,
                   details={"summary": recipe.summary, "framework": recipe.framework,
                            "emulated": recipe.emulated, "params": dict(recipe.params), **(details or {})})

    def to_dict(self) -> dict:
        return asdict(self)


__all__ = ["PRECISIONS", "COMPUTE_DTYPES", "PrecisionInfo", "NATIVE", "EMULATED", "UNAVAILABLE"]
