"""Shared test setup: tests marked ``gpu`` run only where an NVIDIA GPU answers, and the
TinyStories samples prepared once per session for the data tests."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """Whether the native probe finds an NVIDIA GPU, asked as ``parallax train --model auto``
    and check-env ask it (envinfo.probe_gpus answers 'none' when the probe itself fails)."""
    from parallax import envinfo

    return bool(envinfo.probe_gpus()["devices"])


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none found); run on the device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory):
    """Parallax's cache (MaxText parameter counts) in a folder of the test session, not the
    home directory: a count kept by one test must not answer another's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PARALLAX_CACHE_DIR", str(tmp_path_factory.mktemp("parallax-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def prepared(tmp_path_factory):
    """The TinyStories samples (V2 head + 3000-story subset) prepared once: a PreparedData.
    Tests read it; a test that changes files works on a copy."""
    pytest.importorskip("tokenizers")
    from fixtures.samples import SUBSET, V2, needs_samples
    from parallax.data.prepare import prepare

    needs_samples()
    result = prepare([str(V2), str(SUBSET)], tmp_path_factory.mktemp("prepared"))
    assert not result.up_to_date and result.warnings == []
    return result.data
