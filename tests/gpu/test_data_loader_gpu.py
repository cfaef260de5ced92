"""On a GPU: the loader's ring is page-locked, and its batches reach torch and JAX devices intact."""

from __future__ import annotations

import numpy as np
import pytest

from parallax import _native
from parallax.data.tokenfile import TokenWriter

pytestmark = pytest.mark.gpu
B, S = 8, 256


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "train.bin"
    writer = TokenWriter(path, 10_000, 0)
    writer.write(np.random.default_rng(0).integers(0, 10_000, size=200_000, dtype=np.uint16))
    writer.finish()
    return str(path)


def test_ring_slots_are_pinned_where_the_driver_is_present(token_file):
    loader = _native.BatchLoader(token_file, B, S, 3)
    try:
        info = loader.info()
        assert info["pin_status"] == "pinned (cuMemHostRegister)", info
        assert info["pinned_slots"] == info["slots"] == 4
        torch = pytest.importorskip("torch")
        batch = loader.next()
        tensor = torch.from_numpy(batch)
        assert tensor.is_pinned()
        on_gpu = tensor.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        assert torch.equal(on_gpu.cpu(), tensor)
    finally:
        loader.close()


def test_jax_device_put_of_a_batch_is_exact(token_file):
    jax = pytest.importorskip("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")
    loader = _native.BatchLoader(token_file, B, S, 3)
    try:
        batch = loader.next()
        on_gpu = jax.device_put(batch, gpus[0])
        np.testing.assert_array_equal(np.asarray(on_gpu), batch)
    finally:
        loader.close()


def test_pinning_can_be_turned_off(token_file):
    loader = _native.BatchLoader(token_file, B, S, 3, pin=False)
    try:
        assert loader.info()["pinned_slots"] == 0
        assert loader.info()["pin_status"] == "pageable (pinning disabled)"
    finally:
        loader.close()
