"""One seeded initialisation for every engine (LLaMA-style), in the canonical layout.

Canonical layout: the names and shapes of ``ModelConfig.param_shapes()``; linear weights
are [in, out] (y = x @ W), float32. Each engine converts this dict to its own layout
(``engines/torch/convert.py``, ``engines/jax/convert.py``), so every framework starts
from bit-identical weights.

Scheme: embeddings and linear weights ~ N(0, 0.02²); the two projections that write into
the residual stream (``wo``, ``w_down``) use 0.02/√(2L) (GPT-2/LLaMA practice); RMSNorm
gains are 1. Drawn from NumPy's Philox generator, one stream per parameter name, so adding
a parameter never changes the others.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from parallax.spec.config import ModelConfig

INIT_STD = 0.02
RESIDUAL_PROJECTIONS = ("wo", "w_down")


def _stream(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.sha256(name.encode()).digest()
    key = int.from_bytes(digest[:8], "little")
    return np.random.Generator(np.random.Philox(key=[seed, key]))


def init_std(model: ModelConfig, name: str) -> float:
    if name.rsplit(".", 1)[-1] in RESIDUAL_PROJECTIONS:
        return INIT_STD / math.sqrt(2 * model.n_layers)
    return INIT_STD


def check_canonical(model: ModelConfig, weights: dict[str, np.ndarray]) -> None:
    """ValueError unless ``weights`` has exactly the names and shapes of ``model.param_shapes()``
    (what every engine's converter expects)."""
    expected = model.param_shapes()
    if set(weights) != set(expected):
        missing, extra = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
        raise ValueError(f"weights do not match '{model.name}': missing {missing[:3]}, unexpected {extra[:3]}")
    for name, value in weights.items():
        if tuple(value.shape) != tuple(expected[name]):
            raise ValueError(f"{name}: shape {tuple(value.shape)}, expected {expected[name]}")


def init_weights(model: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    """The canonical float32 weights of ``model`` for ``seed``."""
    weights = {}
    for name, shape in model.param_shapes().items():
        if len(shape) == 1:
            weights[name] = np.ones(shape, dtype=np.float32)
        else:
            rng = _stream(seed, name)
            weights[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(
                init_std(model, name)
            )
    return weights
