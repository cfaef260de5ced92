"""The native copy bandwidth on a real GPU (run on the device; skipped elsewhere): a 1 GiB
device-to-device copy timed between CUDA events, its rate within reach of the datasheet
(between 30% and 100% of it: a copy moves no more than HBM can), cached under the GPU's UUID and
read back by ``plan.limits.hbm_limit``, as ``parallax profile`` uses it."""

from __future__ import annotations

import pytest

from parallax.plan import hardware, limits

pytestmark = pytest.mark.gpu


def test_copy_bandwidth_is_measured_cached_and_becomes_the_hbm_limit():
    gpu = pytest.importorskip("parallax.native.gpu")
    devices = gpu.probe()["devices"]
    if not devices:
        pytest.skip("no GPU")
    device = devices[0]
    found = gpu.measure_bandwidth(device, nbytes=1 << 30, warmup=2, iters=8)
    copy = found["copy"]
    assert copy["error"] is None and copy["iters"] == 8 and copy["bytes"] == 1 << 30
    assert copy["bytes_per_s"] == pytest.approx(2 * (1 << 30) / (copy["median_ms"] * 1e-3))
    assert copy["min_ms"] <= copy["median_ms"] <= copy["max_ms"]
    spec = hardware.resolve_device(device).spec
    if spec is not None and spec.bandwidth:
        sheet = limits.bytes_per_second(spec.bandwidth)
        assert 0.3 * sheet < copy["bytes_per_s"] <= sheet, (copy["bytes_per_s"], spec.bandwidth)
    assert gpu.load_cached_bandwidth(device["uuid"])["copy"]["median_ms"] == copy["median_ms"]
    held = limits.hbm_limit(device, measure=False)
    assert held.value == pytest.approx(copy["bytes_per_s"]) and held.source.startswith("measured: a device-to-device")
