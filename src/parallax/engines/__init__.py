"""Training engines, one per framework, behind the interface of ``engines/base.py``."""

from __future__ import annotations

import importlib

from parallax.config import FRAMEWORKS
from parallax.engines.base import Engine
from parallax.errors import ParallaxError

_ENGINES = {
    "torch": ("parallax.engines.torch.engine", "TorchEngine"),
    "jax": ("parallax.engines.jax.engine", "JaxEngine"),
}


def get_engine(framework: str) -> Engine:
    """The engine of ``framework``; imported lazily so that torch and JAX stay optional."""
    if framework not in _ENGINES:
        raise ParallaxError(
            f"unknown framework '{framework}'; choose one of: {', '.join(FRAMEWORKS)}"
        )
    module, cls = _ENGINES[framework]
    return getattr(importlib.import_module(module), cls)()
