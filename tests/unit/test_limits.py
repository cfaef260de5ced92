"""parallax.plan.limits on the CPU: the GEMM ceiling at the step's shapes from check-env's cache,
from a measurement (cuBLASLt faked), or from the datasheet, and the HBM bandwidth (a copy, cached
or measured now with the native copy faked, else the datasheet), each labelled."""

from __future__ import annotations

import pytest

from parallax.plan import limits
from parallax.spec import registry, step_work
from parallax.spec.config import PRESETS

gpu = pytest.importorskip("parallax.native.gpu")

H200 = {"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "uuid": "GPU-profile-test"}
MODEL = PRESETS["llama-100m"]
FP8 = step_work.linear_formats(MODEL, registry.get("torch", "te-fp8-delayed"))


def timed(shape: dict, precision: str, tflops: float) -> dict:
    """A measured row of ``shape`` at ``tflops``."""
    return {**shape, "precision": precision, "median_ms": shape["flops"] / (tflops * 1e9), "error": None}


def cache(rates: dict[str, float], batch_size: int = 32) -> None:
    shapes = gpu.gemm_shapes(MODEL, batch_size, 1024)
    rows = [timed(s, p, rate) for p, rate in rates.items() for s in shapes]
    gpu.save_ceilings(H200["uuid"], {"settings": {"model": "llama-100m", "batch_size": batch_size, "seq_len": 1024},
                                     "model_shapes": rows, "measured_at": "2026-12-04T10:00:00Z"})


def no_measurement(*args, **kwargs):
    raise AssertionError("measured although the cache had the shapes")


def test_the_cpu_has_no_limits():
    assert limits.gemm_limits(None, MODEL, 32, 1024, FP8) == {
        "bf16": limits.Limit(None, "n/a on the CPU"), "fp8": limits.Limit(None, "n/a on the CPU")}
    assert limits.hbm_limit(None) == limits.Limit(None, "n/a on the CPU")


def test_check_envs_cached_ceilings_of_this_shape_come_first(monkeypatch):
    cache({"bf16": 600.0, "fp8": 1100.0})
    monkeypatch.setattr(gpu, "measure_gemm", no_measurement)
    found = limits.gemm_limits(H200, MODEL, 32, 1024, FP8)
    assert found["bf16"].value == pytest.approx(600.0) and found["fp8"].value == pytest.approx(1100.0)
    assert found["fp8"].source == ("measured: cuBLASLt at the step's fp8 GEMM shapes (parallax check-env --measure, "
                                   "2026-12-04T10:00:00Z)")


def test_the_ceiling_is_of_the_formats_own_shapes(monkeypatch):
    # lm_head alone at 400 TFLOP/s, the block GEMMs at 800: the bf16 limit of an fp8 recipe is lm_head's
    shapes = gpu.gemm_shapes(MODEL, 32, 1024)
    rows = [timed(s, "bf16", 400.0 if s["linear"] == "lm_head" else 800.0) for s in shapes]
    gpu.save_ceilings(H200["uuid"], {"settings": {"model": "llama-100m", "batch_size": 32, "seq_len": 1024},
                                     "model_shapes": rows, "measured_at": "then"})
    monkeypatch.setattr(gpu, "measure_gemm", no_measurement)
    assert limits.gemm_limits(H200, MODEL, 32, 1024, {"lm_head": "bf16"})["bf16"].value == pytest.approx(400.0)
    every = step_work.linear_formats(MODEL, registry.get("torch", "bf16"))
    # weighted by time: lm_head's 3 GEMMs carry 1.51 of 18.21 TFLOP, at half the rate
    flops_lm, flops_all = 1_509_949_440_000, 18_208_782_286_848
    expected = flops_all / (flops_lm / 400.0 + (flops_all - flops_lm) / 800.0)
    assert limits.gemm_limits(H200, MODEL, 32, 1024, every)["bf16"].value == pytest.approx(expected)


def test_a_cache_of_another_shape_is_measured_again(monkeypatch):
    cache({"bf16": 600.0, "fp8": 1100.0}, batch_size=16)
    calls = []

    def measure(index, precision, m, n, k, **settings):
        calls.append((precision, m, n, k))
        assert (index, settings) == (0, limits.MEASURE)
        return {"median_ms": 2.0 * m * n * k / 700e9, "error": None}

    monkeypatch.setattr(gpu, "measure_gemm", measure)
    found = limits.gemm_limits(H200, MODEL, 32, 1024, {"lm_head": "bf16"})
    assert found["bf16"] == limits.Limit(pytest.approx(700.0), "measured now: cuBLASLt at the step's bf16 GEMM shapes")
    assert calls == [("bf16", 32768, 10000, 768), ("bf16", 32768, 768, 10000), ("bf16", 768, 10000, 32768)]


def test_without_a_measurement_the_datasheet_peak_is_labelled(monkeypatch):
    monkeypatch.setattr(gpu, "measure_gemm", lambda *a, **k: {"median_ms": None, "error": "cuInit failed (100)"})
    found = limits.gemm_limits(H200, MODEL, 32, 1024, FP8)
    assert (found["bf16"].value, found["fp8"].value) == (989.0, 1979.0)
    assert found["fp8"].source == "datasheet: dense fp8 peak, NVIDIA H200 datasheet (cuBLASLt did not run: cuInit failed (100))"
    unknown = {**H200, "name": "NVIDIA H200 NVL"}
    assert limits.gemm_limits(unknown, MODEL, 32, 1024, {"lm_head": "bf16"})["bf16"] == limits.Limit(
        None, "unknown: cuBLASLt did not run: cuInit failed (100), and no trusted datasheet peak of bf16 for "
              "NVIDIA H200 NVL")
    assert limits.gemm_limits(H200, MODEL, 32, 1024, FP8, measure=False)["bf16"].source == (
        "datasheet: dense bf16 peak, NVIDIA H200 datasheet (no cached measurement of these shapes)")


def copy_of(ms: float, error: str | None = None) -> dict:
    """gpu.measure_copy's result: 2 GiB copied in ``ms`` (median of 10)."""
    rate = None if error else 2 * (2 << 30) / (ms * 1e-3)
    return {"bytes": 2 << 30, "warmup": 3, "iters": 10, "median_ms": None if error else ms, "bytes_per_s": rate,
            "error": error}


def test_hbm_bandwidth_is_a_copy_measured_now_and_cached(monkeypatch):
    calls = []
    monkeypatch.setattr(gpu, "measure_copy", lambda index, *a: calls.append(index) or copy_of(1.0))
    found = limits.hbm_limit(H200)  # 4 GiB moved in 1 ms: 4.295 TB/s
    assert found == limits.Limit(pytest.approx(4.294967296e12), "measured now: a device-to-device copy of 2.0 GiB, "
                                 "bytes read + written over the median of 10 copies")
    assert calls == [0] and gpu.load_cached_bandwidth(H200["uuid"])["copy"]["median_ms"] == 1.0
    monkeypatch.setattr(gpu, "measure_copy", no_measurement)  # the next profile reads the cache
    again = limits.hbm_limit(H200)
    assert again.value == pytest.approx(4.294967296e12) and again.source.startswith("measured: a device-to-device copy")


def test_without_a_copy_the_datasheet_bandwidth_is_labelled(monkeypatch):
    monkeypatch.setattr(gpu, "measure_copy", lambda *a: copy_of(0.0, "cuInit failed: CUDA_ERROR_NO_DEVICE"))
    H200 = {"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "uuid": "GPU-no-copy-test"}
    assert limits.hbm_limit(H200) == limits.Limit(4.8e12, "datasheet: 4.8 TB/s, NVIDIA H200 datasheet (not measured: "
                                                          "the copy did not run: cuInit failed: CUDA_ERROR_NO_DEVICE)")
    assert gpu.load_cached_bandwidth(H200["uuid"]) is None  # a failed copy is not cached
    assert limits.hbm_limit(H200, measure=False).source.endswith("(not measured: no cached copy measurement)")
    assert limits.hbm_limit({"index": 0, "name": "NVIDIA H100 PCIe", "compute_capability": "9.0"}).value is None
    assert limits.bytes_per_second("1792 GB/s") == pytest.approx(1.792e12)
    with pytest.raises(ValueError, match="not a bandwidth"):
        limits.bytes_per_second("fast")


def test_check_env_shows_the_copy_bandwidth_in_one_line():
    from parallax.cli.check_env import hbm_line

    record = {"copy": copy_of(1.0), "datasheet": "4.8 TB/s"}
    assert hbm_line(record) == ("HBM bandwidth (a device-to-device copy of 2.0 GiB, read + written, median of 10): "
                                "4.295 TB/s (datasheet: 4.8 TB/s)")
    failed = {"copy": copy_of(0.0, "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)")}
    assert hbm_line(failed) == "HBM bandwidth: not measured (cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory))"
