"""Precision recipes: what a run asked for and what actually ran.

A recipe is chosen per framework in ``precision/torch.py`` and ``precision/jax.py`` (the only
places precision is applied to a model); ``precision/capability.py`` decides whether a
framework × precision pair is native, emulated or unavailable on this machine, and why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from parallax.config import PRECISIONS

NATIVE = "native"
EMULATED = "emulated"
UNAVAILABLE = "unavailable"

# Compute dtypes of a ReferenceTrainer (engines/base.py), as ``parallax parity --dtype`` names them.
COMPUTE_DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class PrecisionInfo:
    """Recorded in every result: the honest label of the arithmetic that ran."""

    precision: str  # bf16 | fp8 | nvfp4
    backend: str  # e.g. "torch.autocast", "transformer_engine", "jax.dtype"
    recipe: str  # e.g. "bf16 autocast over fp32 master weights"
    native: bool  # False when the format is emulated (e.g. quantize-dequantize in bf16)
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


__all__ = ["PRECISIONS", "COMPUTE_DTYPES", "PrecisionInfo", "NATIVE", "EMULATED", "UNAVAILABLE"]
