"""Training engines, one per framework, behind the interface of ``engines/base.py``."""

from __future__ import annotations

import importlib

from parallax.engines.base import Engine
from parallax.errors import ParallaxError
from parallax.spec import registry

_ENGINES = {
    "torch": ("parallax.engines.torch.engine", "TorchEngine"),
    "jax": ("parallax.engines.jax.engine", "JaxEngine"),
    "maxtext": ("parallax.engines.maxtext.engine", "MaxTextEngine"),
}
# The frameworks that have an engine in this release.
ENGINE_FRAMEWORKS = tuple(_ENGINES)
# What `benchmark` runs without --frameworks: MaxText needs its own installation (Python >= 3.12,
# the maxtext extra), so it is a cell only when asked for.
DEFAULT_FRAMEWORKS = ("torch", "jax")


def check_engine(framework: str) -> str:
    """``framework`` if this release has its engine; else a one-line ParallaxError."""
    registry.check_framework(framework)
    if framework not in _ENGINES:
        raise ParallaxError(
            f"the {framework} engine is not implemented yet; choose one of: {', '.join(ENGINE_FRAMEWORKS)}"
        )
    return framework


def get_engine(framework: str) -> Engine:
    """The engine of ``framework``; imported lazily so that torch and JAX stay optional."""
    check_engine(framework)
    module, cls = _ENGINES[framework]
    return getattr(importlib.import_module(module), cls)()
