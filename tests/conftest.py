"""Shared test setup: tests marked ``gpu`` run only where an NVIDIA GPU answers."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        from parallax import gpu

        return bool(gpu.probe()["devices"])
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none found); run on the device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
