"""Shared test setup: tests marked ``gpu`` run only where an NVIDIA GPU answers, the package's
TinyStories sample prepared once per session for the data tests, and JAX's compilation cache in
a folder of the test session."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile

import pytest

JAX_CACHE_ENV = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")


def pytest_configure(config):
    """JAX's persistent compilation cache in a new, empty folder for this session, set before
    any test module imports JAX and inherited by the interpreters the tests start: a step that
    several tests or processes compile from the same HLO, flags and devices (the parity CLI and
    the parity tests' tiny float32 step, the engine runs of tiny that differ only in what a test
    reads of them, the two JAX processes of the failing-process test after the rendezvous test's)
    compiles once. XLA builds the same executable either way, so what a test asserts does not
    depend on the order. The first compile of every step in a session is a real one; the cache
    never outlives the session. Scripts that need XLA to compile (an HLO dump) drop the variable
    themselves, as MaxText's profile does (engines/maxtext/profile.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # a pytest-xdist worker (make test-py): the controller's folder, inherited as the
        # interpreters the tests start inherit it, so a step one worker compiled the other finds
        return
    config._parallax_jax_env = {name: os.environ.get(name) for name in JAX_CACHE_ENV}
    config._parallax_jax_cache = tempfile.mkdtemp(prefix="parallax-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = config._parallax_jax_cache
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"


def pytest_unconfigure(config):
    for name, value in getattr(config, "_parallax_jax_env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if getattr(config, "_parallax_jax_cache", None):
        shutil.rmtree(config._parallax_jax_cache, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """Whether the native probe finds an NVIDIA GPU, asked as ``parallax train --model auto``
    and check-env ask it (envinfo.probe_gpus answers 'none' when the probe itself fails)."""
    from parallax.plan import envinfo

    return bool(envinfo.probe_gpus()["devices"])


# The files that take longest (seconds alone on 2 cores, 2026-12-02: 130-180, 75-100, 100, 75-90,
# 30-75, 57-67, 51-55), which make test-py's workers take first: a worker that took one of them
# while the other was finishing the small files would run it alone at the end (~35 s of one idle
# core). Only the order of the files changes; a stale entry costs balance, not a result.
LONGEST_FIRST = ("unit/test_jax_parallel.py", "unit/test_nvfp4_emulated.py", "unit/test_torch_distributed.py",
                 "unit/test_jax_recipes.py", "cli/test_train_cli.py", "cli/test_maxtext_cli.py",
                 "cli/test_benchmark_cli.py")


def longest_files_first(items) -> None:
    """Order the files for pytest-xdist's --dist loadfile --no-loadscope-reorder (make test-py):
    LONGEST_FIRST, then the others by their number of tests as xdist's own reorder would; the
    tests of a file keep their order."""
    def file_of(item) -> str:
        return item.nodeid.split("::")[0]

    tests = {}
    for item in items:
        tests[file_of(item)] = tests.get(file_of(item), 0) + 1
    known = [f"tests/{name}" for name in LONGEST_FIRST]
    rank = {name: (known.index(name) if name in known else len(known), -count)
            for name, count in tests.items()}
    items.sort(key=lambda item: rank[file_of(item)])  # stable: a file's tests keep their order


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        longest_files_first(items)
    if gpu_available():
        return
    # A skipif, put first: pytest reads every skipif before any skip, and the first that holds
    # gives the reason, so a gpu test's own condition (TE's JAX extension, two GPUs) does not
    # hide that this machine has no GPU at all.
    skip = pytest.mark.skipif(True, reason="needs an NVIDIA GPU (none found); run on the device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip, append=False)


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
    """The package's TinyStories sample (train.txt + valid.txt, 500 stories) prepared once: a
    PreparedData. Tests read it; a test that changes files works on a copy."""
    pytest.importorskip("tokenizers")
    from fixtures.samples import TRAIN, VALID
    from parallax.data.prepare import prepare

    result = prepare([str(TRAIN), str(VALID)], tmp_path_factory.mktemp("prepared"))
    assert not result.up_to_date
    # 405 KB of stories yield fewer than 10,000 distinct BPE tokens: the vocabulary is filled
    # with reserved tokens, and that is the one warning.
    [warning] = result.warnings
    reserved = result.data.meta["tokenizer"]["reserved_tokens"]
    assert 0 < reserved < 10_000 and f"filled up to 10,000 with {reserved:,} reserved tokens" in warning
    return result.data


@pytest.fixture(autouse=True)
def fresh_machine():
    """Each test probes the machine anew (``plan.machine`` keeps one probe per process): a test
    that fakes the GPUs (``envinfo.probe_gpus``) is not answered by another test's probe."""
    from parallax.plan import machine

    machine.forget()
    yield
    machine.forget()
