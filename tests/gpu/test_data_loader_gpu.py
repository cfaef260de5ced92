"""On a GPU: the loader's ring is page-locked (by the driver's account and torch's), copies from
it are asynchronous DMA, and its batches reach torch and JAX devices intact."""

from __future__ import annotations

import numpy as np
import pytest

from parallax import _native
from parallax.data.tokenfile import TokenWriter

pytestmark = pytest.mark.gpu
B, S = 8, 256
SLEEP_CYCLES = 1_000_000_000  # about 0.5 s of GPU clock: the host acts long before it ends


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "train.bin"
    writer = TokenWriter(path, 10_000, 0)
    writer.write(np.random.default_rng(0).integers(0, 10_000, size=200_000, dtype=np.uint16))
    writer.finish()
    return str(path)


def test_ring_slots_are_page_locked_by_the_drivers_account(token_file):
    loader = _native.BatchLoader(token_file, B, S, 3)
    try:
        info = loader.info()
        assert info["pin_status"] == "pinned (cuMemHostRegister)", info
        assert info["pinned_slots"] == info["verified_slots"] == info["slots"] == 4, info
        assert info["pinned_verified"] is True
        batch = loader.next()
        assert loader.page_locked(batch)
        assert loader.page_locked(batch[1:])  # an interior range of the slot
        assert not loader.page_locked(np.array(batch))  # a pageable copy: the check can say no
    finally:
        loader.close()


def test_torch_sees_ring_batches_as_pinned_once_it_has_initialised_cuda(token_file):
    torch = pytest.importorskip("torch")
    # torch's is_pinned() answers False for every pointer until torch has initialised CUDA
    # (at::Context::isPinnedPtr); only then does it ask the driver (cudaPointerGetAttributes).
    torch.cuda.init()
    loader = _native.BatchLoader(token_file, B, S, 3)
    try:
        batch = loader.next()
        assert torch.from_numpy(batch).is_pinned()
        assert not torch.from_numpy(np.array(batch)).is_pinned()
    finally:
        loader.close()


def test_a_non_blocking_copy_reads_the_ring_when_the_stream_reaches_it(token_file):
    """The copy is asynchronous DMA from the slot itself: queued behind a long kernel, it
    returns at once, and what lands on the device is what the slot holds when the stream gets
    there, a write made after .to() returned. (The driver stages a pageable source during the
    call, so the device would get the old values.)"""
    torch = pytest.importorskip("torch")
    loader = _native.BatchLoader(token_file, B, S, 3)
    try:
        batch = loader.next()
        original = batch.copy()
        later = -1 - np.arange(batch.size, dtype=np.int32).reshape(batch.shape)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(SLEEP_CYCLES)
            on_gpu = torch.from_numpy(batch).to("cuda", non_blocking=True)
        assert not stream.query(), "the copy waited for the stream: not asynchronous"
        batch[...] = later
        stream.synchronize()
        np.testing.assert_array_equal(on_gpu.cpu().numpy(), later)
        assert not np.array_equal(original, later)
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
        info = loader.info()
        assert info["pinned_slots"] == info["verified_slots"] == 0
        assert info["pinned_verified"] is False
        assert info["pin_status"] == "pageable (pinning disabled)"
        assert not loader.page_locked(loader.next())
    finally:
        loader.close()
