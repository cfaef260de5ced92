"""The native probe and cuBLASLt GEMMs on a real GPU (run on the device; skipped elsewhere)."""

from __future__ import annotations

import re

import pytest

from parallax.native import gpu
from parallax.spec.config import get_preset

pytestmark = pytest.mark.gpu

HOPPER_NAMES = ("H100", "H200", "GH200", "H800", "H20")


@pytest.fixture(scope="module")
def probed():
    return gpu.probe()


@pytest.fixture(scope="module")
def device0(probed):
    return probed["devices"][0]


def test_probe_reads_the_driver_and_nvml(probed):
    driver, nvml = probed["driver"], probed["nvml"]
    assert driver["available"] and driver["error"] is None
    assert driver["version"] >= 12000
    assert driver["version_str"] == f"{driver['version'] // 1000}.{driver['version'] % 1000 // 10}"
    assert nvml["available"] and nvml["error"] is None
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", nvml["driver_version"])


def test_probe_fills_every_device_field(device0):
    assert re.fullmatch(r"\d+\.\d+", device0["compute_capability"])
    assert device0["compute_capability"] == f"{device0['cc_major']}.{device0['cc_minor']}"
    assert device0["sm_count"] > 0
    assert device0["uuid"].startswith("GPU-")
    assert re.fullmatch(r"[0-9A-F]{4,8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]", device0["pci_bus_id"])
    assert 0 < device0["memory_free_bytes"] <= device0["memory_total_bytes"]
    assert 0 < device0["clock_sm_mhz"] <= device0["clock_sm_max_mhz"]
    assert device0["clock_mem_max_mhz"] > 0
    assert device0["power_limit_w"] > 0
    if any(name in device0["name"] for name in HOPPER_NAMES):
        assert device0["compute_capability"] == "9.0"
        assert device0["sm_count"] in (78, 114, 132)


def test_probe_agrees_with_torch(device0):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    props = torch.cuda.get_device_properties(0)
    assert (props.major, props.minor) == (device0["cc_major"], device0["cc_minor"])
    assert props.multi_processor_count == device0["sm_count"]
    assert props.name == device0["name"]
    assert str(props.uuid).lower().removeprefix("gpu-") == device0["uuid"].lower().removeprefix("gpu-")


def test_bf16_gemm_4096_cubed_runs(device0):
    r = gpu.measure_gemm(0, "bf16", 4096, 4096, 4096, warmup=5, iters=20)
    assert r["error"] is None, r["error"]
    assert r["tflops"] > 0
    assert r["min_ms"] <= r["median_ms"] <= r["max_ms"]
    assert r["tflops"] == pytest.approx(2 * 4096**3 / (r["median_ms"] * 1e-3) / 1e12)
    assert r["tflops_best"] == pytest.approx(2 * 4096**3 / (r["min_ms"] * 1e-3) / 1e12)
    assert r["tflops_best"] >= r["tflops"]
    assert r["library"] and "cublasLt" in r["library"]


def test_bf16_gemm_measures_the_fastest_algorithm_the_heuristic_offered(device0):
    r = gpu.measure_gemm(0, "bf16", 4096, 4096, 4096, warmup=5, iters=20, tune_warmup=2, tune_iters=4)
    assert r["error"] is None, r["error"]
    assert 1 <= r["algo_count"] <= 8
    assert r["algos_tried"] == r["algo_count"] == len(r["algo_trials"])
    assert [t["index"] for t in r["algo_trials"]] == list(range(r["algo_count"]))
    timed = {t["index"]: t["median_ms"] for t in r["algo_trials"] if t["median_ms"] is not None}
    assert all(t["error"] is None for t in r["algo_trials"] if t["index"] in timed)
    assert timed and r["algo_index"] in timed
    assert timed[r["algo_index"]] == min(timed.values())


def test_bf16_gemm_without_tuning_takes_the_heuristics_first(device0):
    r = gpu.measure_gemm(0, "bf16", 2048, 2048, 2048, warmup=2, iters=5, tune_iters=0)
    assert r["error"] is None, r["error"]
    assert (r["algo_index"], r["algos_tried"], r["algo_trials"]) == (0, 0, [])


def test_fp8_gemm_runs_where_the_gpu_has_fp8(device0):
    r = gpu.measure_gemm(0, "fp8", 4096, 4096, 4096, warmup=5, iters=20)
    if (device0["cc_major"], device0["cc_minor"]) < (8, 9):
        assert r["error"].startswith("fp8 GEMMs need compute capability 8.9+")
        return
    assert r["error"] is None, r["error"]
    assert r["tflops"] > 0


def test_nvfp4_gemm_is_refused_before_blackwell_and_runs_on_it(device0):
    r = gpu.measure_gemm(0, "nvfp4", 4096, 4096, 4096, warmup=5, iters=20)
    if device0["cc_major"] < 10:
        assert r["error"] == (
            "nvfp4 GEMMs need compute capability 10.0+ (Blackwell); "
            f"this GPU is {device0['compute_capability']}"
        )
        assert r["tflops"] is None
    else:
        assert r["error"] is None, r["error"]
        assert r["tflops"] > 0


def test_measure_ceilings_end_to_end(monkeypatch, tmp_path, device0):
    monkeypatch.setenv(gpu.CACHE_DIR_ENV, str(tmp_path))
    result = gpu.measure_ceilings(0, get_preset("tiny"), 8, 128, square=2048, warmup=2, iters=5)
    bf16 = result["summary"]["bf16"]
    assert bf16["square_tflops"] > 0 and bf16["model_shapes_tflops"] > 0
    assert bf16["square_tflops_best"] >= bf16["square_tflops"]
    assert result["square"]["bf16"]["algo_index"] is not None
    assert all(r["error"] is None for r in result["model_shapes"] if r["precision"] == "bf16")
    assert gpu.measured_ceiling_tflops(device0["uuid"], "bf16") == bf16["square_tflops"]
    if device0["cc_major"] < 10:
        assert result["summary"]["nvfp4"] == {"square_tflops": None, "square_tflops_best": None,
                                              "model_shapes_tflops": None}
