"""The software and driver environment of a run, recorded in every run.json and shown by check-env.

Versions come from installed package metadata (``importlib.metadata``), never from importing
torch or JAX: this runs at the start of every ``parallax train`` and in ``check-env``, and must
take milliseconds.
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
import socket
import sys

from parallax import __version__
from parallax.errors import ParallaxError
from parallax.store.timestamps import utc_now  # noqa: F401 (envinfo.utc_now, as before)

# Distribution names (importlib.metadata normalises '-' and '_').
PACKAGES = (
    "torch",
    "jax",
    "jaxlib",
    "jax_cuda12_plugin",
    "jax_cuda13_plugin",
    "flax",
    "optax",
    "transformer_engine",
    "transformer_engine_torch",
    "transformer_engine_jax",
    "transformer_engine_cu12",
    "transformer_engine_cu13",
    "torchao",
    "maxtext",
    "qwix",
    "grain",
    "triton",
    "numpy",
)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def module_version(module, distributions: tuple[str, ...]) -> str | None:
    """A module's own ``__version__``, else the version of the first of ``distributions`` that is
    installed (an extension built from its sdist often comes without the meta-package)."""
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    return next((v for v in map(package_version, distributions) if v), None)


def release(version: str) -> tuple[int, ...]:
    """The first three parts of a version, each its leading digits: "2.20.2+cu13" -> (2, 20, 2)."""
    return tuple(int(m.group()) if (m := re.match(r"\d+", part)) else 0 for part in version.split(".")[:3])


def older(version: str, minimum: str) -> bool:
    """Whether release ``version`` comes before ``minimum``."""
    return release(version) < release(minimum)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution, None when absent."""
    return {name: package_version(name) for name in names}


def no_gpu_probe(error: str) -> dict:
    """A probe result saying that nothing could be asked of the driver, and why."""
    return {
        "driver": {"available": False, "error": error, "library": None, "version": None, "version_str": None},
        "nvml": {"available": False, "error": error, "library": None, "driver_version": None},
        "devices": [],
        "topology": {"available": False, "error": error, "pairs": []},
    }


def probe_gpus() -> dict:
    """``gpu.probe()``; a probe-shaped answer with the reason when the probe itself cannot run."""
    try:
        from parallax.native import gpu

        return gpu.probe()
    except ParallaxError:  # a bad setting of the user's (PARALLAX_CUDA_LIB_DIRS): say so, not "no GPU"
        raise
    except Exception as exc:  # a broken native module must not stop check-env from reporting it
        return no_gpu_probe(f"GPU probe failed: {type(exc).__name__}: {exc}")


def environment(probe: dict | None = None) -> dict:
    """Python, platform, package versions and the CUDA driver/NVML state, captured now."""
    probe = probe_gpus() if probe is None else probe
    return {
        "captured_at": utc_now(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": socket.gethostname(),
        "parallax": __version__,
        "packages": package_versions(),
        "cuda_driver": probe.get("driver"),
        "nvml": probe.get("nvml"),
        "gpus": probe.get("devices", []),
        "gpu_topology": probe.get("topology"),  # every GPU pair's link (parallax.native.topology reads it)
    }
