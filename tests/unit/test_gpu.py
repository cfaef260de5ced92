"""parallax.native.gpu on a CPU machine: probe shape, GEMM shapes, library search path, ceilings loop and cache."""

from __future__ import annotations

import json
import sys
import types

import pytest

from parallax import _native
from parallax.native import gpu
from parallax.spec.config import get_preset
from parallax.errors import ParallaxError

DRIVER_KEYS = {"available", "error", "library", "version", "version_str"}
NVML_KEYS = {"available", "error", "library", "driver_version"}
DEVICE_KEYS = {
    "index", "name", "uuid", "pci_bus_id", "compute_capability", "cc_major", "cc_minor", "sm_count",
    "clock_sm_mhz", "clock_sm_max_mhz", "clock_mem_mhz", "clock_mem_max_mhz", "memory_total_bytes",
    "memory_free_bytes", "power_limit_w", "nvlink",
}
NVLINK_KEYS = {"links", "active", "to_nvswitch", "peers", "error"}
TOPOLOGY_KEYS = {"available", "error", "pairs"}
PAIR_KEYS = {"a", "b", "connection", "nvlinks", "via_nvswitch", "p2p_nvlink", "common_ancestor",
             "common_ancestor_name", "pcie_path", "error"}


def test_probe_has_exactly_the_documented_keys():
    result = gpu.probe()
    assert set(result) == {"driver", "nvml", "devices", "topology"}
    assert set(result["driver"]) == DRIVER_KEYS
    assert set(result["nvml"]) == NVML_KEYS
    for device in result["devices"]:
        assert set(device) == DEVICE_KEYS
        assert device["nvlink"] is None or set(device["nvlink"]) == NVLINK_KEYS
    assert set(result["topology"]) == TOPOLOGY_KEYS
    for pair in result["topology"]["pairs"]:
        assert set(pair) == PAIR_KEYS


def test_topology_without_nvml_is_empty_with_the_reason():
    result = gpu.probe()
    if result["nvml"]["library"] is not None:
        pytest.skip("NVML is installed here; the topology paths are covered by the C++ tests (fake NVML)")
    assert result["topology"] == {"available": False, "error": result["nvml"]["error"], "pairs": []}
    assert result["topology"]["error"].startswith("could not load libnvidia-ml.so.1")


def test_probe_without_a_driver_reports_why_and_no_devices():
    result = gpu.probe()
    if result["driver"]["library"] is not None:
        pytest.skip("a CUDA driver is installed here; the no-driver path is covered by the C++ tests")
    assert result["driver"] == {
        "available": False,
        "error": result["driver"]["error"],
        "library": None,
        "version": None,
        "version_str": None,
    }
    assert result["driver"]["error"].startswith("could not load libcuda.so.1")
    assert result["devices"] == []
    if result["nvml"]["library"] is None:
        assert result["nvml"]["available"] is False
        assert result["nvml"]["error"].startswith("could not load libnvidia-ml.so.1")
        assert result["nvml"]["driver_version"] is None


GEMM_KEYS = {
    "precision", "m", "n", "k", "flops", "warmup", "iters", "tune_warmup", "tune_iters", "rest_ms", "median_ms", "min_ms",
    "max_ms", "tflops", "tflops_best", "algo_count", "algo_index", "algos_tried", "algo_trials", "layout",
    "cublaslt_version", "library", "error",
}


def test_measure_gemm_without_a_driver_returns_the_error_not_a_number():
    if gpu.probe()["driver"]["library"] is not None:
        pytest.skip("a CUDA driver is installed here")
    result = gpu.measure_gemm(0, "bf16", 64, 64, 64, warmup=1, iters=1)
    assert set(result) == GEMM_KEYS
    assert result["error"].startswith("could not load libcuda.so.1")
    assert result["tflops"] is None and result["median_ms"] is None and result["tflops_best"] is None
    algo = (result["algo_count"], result["algo_index"], result["algos_tried"], result["algo_trials"])
    assert algo == (0, None, 0, [])
    assert result["flops"] == 2 * 64**3


def test_measure_gemm_refuses_an_unknown_precision_before_anything_else():
    result = gpu.measure_gemm(0, "fp16", 64, 64, 64)
    assert set(result) == GEMM_KEYS
    assert result["error"] == "unknown precision 'fp16'; choose one of: bf16, fp8, nvfp4"
    assert (result["warmup"], result["iters"], result["tune_warmup"], result["tune_iters"]) == (10, 50, 3, 5)


def test_measure_gemm_passes_the_tuning_settings_to_the_native_code():
    result = gpu.measure_gemm(0, "fp16", 64, 64, 64, warmup=2, iters=7, tune_warmup=1, tune_iters=0)
    assert (result["warmup"], result["iters"], result["tune_warmup"], result["tune_iters"]) == (2, 7, 1, 0)
    assert gpu.measure_gemm(0, "bf16", 64, 64, 64, tune_iters=-1)["error"] == "tune_iters must not be negative, got -1"
    assert gpu.measure_gemm(0, "bf16", 64, 64, 64, rest_ms=-1)["error"] == "rest_ms must not be negative, got -1"
    assert gpu.measure_gemm(0, "bf16", 64, 64, 64, tune_warmup=-1)["error"] == (
        "tune_warmup must not be negative, got -1"
    )


def test_gemm_shapes_of_llama_100m_at_32k_tokens():
    shapes = gpu.gemm_shapes(get_preset("llama-100m"), batch_size=32, seq_len=1024)
    assert [s["name"] for s in shapes] == [
        f"{linear}.{p}"
        for linear in ("qkv", "attn_out", "gate_up", "down", "lm_head")
        for p in ("forward", "dgrad", "wgrad")
    ]
    by_name = {s["name"]: s for s in shapes}
    assert by_name["qkv.forward"] == {
        "name": "qkv.forward", "linear": "qkv", "pass": "forward",
        "m": 32768, "n": 2304, "k": 768, "count": 12, "flops": 2.0 * 32768 * 2304 * 768,
    }
    assert (by_name["qkv.dgrad"]["m"], by_name["qkv.dgrad"]["n"], by_name["qkv.dgrad"]["k"]) == (32768, 768, 2304)
    assert (by_name["qkv.wgrad"]["m"], by_name["qkv.wgrad"]["n"], by_name["qkv.wgrad"]["k"]) == (768, 2304, 32768)
    assert (by_name["gate_up.forward"]["n"], by_name["down.forward"]["k"]) == (4096, 2048)
    assert by_name["lm_head.forward"]["n"] == 10000 and by_name["lm_head.forward"]["count"] == 1
    assert by_name["lm_head.wgrad"] == {
        "name": "lm_head.wgrad", "linear": "lm_head", "pass": "wgrad",
        "m": 768, "n": 10000, "k": 32768, "count": 1, "flops": 2.0 * 768 * 10000 * 32768,
    }
    # 6 FLOPs per token per weight outside the embedding and the norms.
    linear_weights = get_preset("llama-100m").param_count() - 10000 * 768 - 25 * 768
    assert sum(s["flops"] * s["count"] for s in shapes) == 6 * linear_weights * 32768


def test_gemm_shapes_of_tiny():
    shapes = gpu.gemm_shapes(get_preset("tiny"), batch_size=2, seq_len=8)
    by_name = {s["name"]: s for s in shapes}
    assert (by_name["qkv.forward"]["m"], by_name["qkv.forward"]["n"], by_name["qkv.forward"]["k"]) == (16, 192, 64)
    assert by_name["down.wgrad"]["count"] == 2


def test_gemm_shapes_refuses_nonpositive_tokens():
    with pytest.raises(ParallaxError, match="must be positive"):
        gpu.gemm_shapes(get_preset("tiny"), batch_size=0, seq_len=8)


def test_model_shape_ceiling_weighs_by_count():
    assert _native.model_shape_ceiling([(1e12, 2, 1.0), (3e12, 1, 4.0)]) == pytest.approx(5e12 / 6e-3 / 1e12)
    with pytest.raises(ValueError):
        _native.model_shape_ceiling([(1e12, 1, 0.0)])


def test_library_search_dirs_puts_the_environment_first(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    monkeypatch.setenv(gpu.LIB_DIRS_ENV, f"{second}:{first}:{second}")
    dirs = gpu.library_search_dirs()
    assert dirs[:2] == [str(second), str(first)]
    assert len(dirs) == len(set(dirs))
    missing = tmp_path / "missing"  # a typo is named, not skipped unseen
    monkeypatch.setenv(gpu.LIB_DIRS_ENV, f"{second}:{missing}")
    with pytest.raises(ParallaxError, match=f"PARALLAX_CUDA_LIB_DIRS: '{missing}' is not a folder"):
        gpu.library_search_dirs()


def test_library_search_dirs_finds_pip_nvidia_packages(tmp_path, monkeypatch):
    site = tmp_path / "site"
    for folder in ("cublas", "cu12", "cu13", "cuda_runtime"):
        (site / "nvidia" / folder / "lib").mkdir(parents=True)
    (site / "nvidia" / "cudnn").mkdir()  # no lib folder: not listed
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv(gpu.LIB_DIRS_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    ours = [d for d in gpu.library_search_dirs() if d.startswith(str(site))]
    assert ours == [str(site / "nvidia" / name / "lib") for name in ("cu13", "cu12", "cublas", "cuda_runtime")]


def test_library_search_dirs_reach_the_native_loader(monkeypatch, tmp_path):
    monkeypatch.setenv(gpu.LIB_DIRS_ENV, str(tmp_path))
    gpu.probe()
    assert _native.library_dirs()[0] == str(tmp_path)


# ---- measure_ceilings with a scripted native module -------------------------------------------


class FakeNative(types.SimpleNamespace):
    """The native module with a scripted GPU: 100 TFLOP/s bf16 (125 at its best call), fp8 twice
    that, no nvfp4."""

    def __init__(self):
        super().__init__(calls=[])

    def set_library_dirs(self, dirs):
        pass

    def probe(self):
        return {"driver": {}, "nvml": {}, "devices": [{"index": 0, "uuid": "GPU-0000-test", "name": "Fake"}]}

    def measure_gemm(self, device, precision, m, n, k, warmup, iters, tune_warmup, tune_iters, rest_ms):
        self.calls.append((precision, m, n, k))
        self.settings = (warmup, iters, tune_warmup, tune_iters, rest_ms)
        flops = 2.0 * m * n * k
        result = {"precision": precision, "m": m, "n": n, "k": k, "flops": flops, "error": None}
        if precision == "nvfp4":
            result.update(median_ms=None, min_ms=None, tflops=None, tflops_best=None,
                          error="nvfp4 GEMMs need compute capability 10.0+ (Blackwell); this GPU is 9.0")
        else:
            ms = flops / (1e11 if precision == "bf16" else 2e11)
            result.update(median_ms=ms, min_ms=0.8 * ms, tflops=flops / (ms * 1e-3) / 1e12,
                          tflops_best=flops / (0.8 * ms * 1e-3) / 1e12)
        return result

    model_gemm_shapes = staticmethod(_native.model_gemm_shapes)
    model_shape_ceiling = staticmethod(_native.model_shape_ceiling)


class RecordingProgress:
    def __init__(self):
        self.started = self.stopped = False
        self.total = None
        self.advanced = 0

    def __enter__(self):
        self.started = True
        return self

    def __exit__(self, *exc):
        self.stopped = True

    def add_task(self, description, total):
        self.total = total
        return 7

    def update(self, task, description):
        assert task == 7

    def advance(self, task):
        self.advanced += 1


def test_measure_ceilings_loops_over_precisions_and_shapes_and_caches(monkeypatch, tmp_path):
    fake = FakeNative()
    monkeypatch.setattr(gpu, "_native", lambda: fake)
    monkeypatch.setenv(gpu.CACHE_DIR_ENV, str(tmp_path))
    progress = RecordingProgress()
    result = gpu.measure_ceilings(0, get_preset("tiny"), 2, 8, square=256, warmup=1, iters=2, tune_warmup=4,
                                  tune_iters=6, progress=progress)

    assert set(result) == {"schema", "device", "settings", "square", "model_shapes", "summary", "measured_at"}
    assert result["device"]["uuid"] == "GPU-0000-test"
    assert len(fake.calls) == 3 * 16 and fake.calls[0] == ("bf16", 256, 256, 256)
    assert progress.started and progress.stopped and progress.total == 48 and progress.advanced == 48
    assert fake.settings == (1, 2, 4, 6, 500)
    assert (result["settings"]["tune_warmup"], result["settings"]["tune_iters"]) == (4, 6)
    assert result["summary"]["bf16"]["square_tflops"] == pytest.approx(100.0)
    assert result["summary"]["bf16"]["square_tflops_best"] == pytest.approx(125.0)
    assert result["summary"]["bf16"]["model_shapes_tflops"] == pytest.approx(100.0)
    assert result["summary"]["fp8"]["square_tflops_best"] == pytest.approx(250.0)
    assert result["summary"]["fp8"]["model_shapes_tflops"] == pytest.approx(200.0)
    assert result["summary"]["nvfp4"] == {"square_tflops": None, "square_tflops_best": None,
                                          "model_shapes_tflops": None}
    assert result["square"]["nvfp4"]["error"].startswith("nvfp4 GEMMs need compute capability 10.0+")
    row = result["model_shapes"][0]
    assert (row["precision"], row["name"], row["count"], row["m"]) == ("bf16", "qkv.forward", 2, 16)
    assert result["settings"]["tokens"] == 16

    cached = json.loads((tmp_path / "ceilings" / "GPU-0000-test.json").read_text())
    assert cached == result
    assert gpu.load_cached_ceilings("GPU-0000-test") == result
    # MFU's measured ceiling is the median rate, not the best call.
    assert gpu.measured_ceiling_tflops("GPU-0000-test", "fp8") == pytest.approx(200.0)
    assert gpu.measured_ceiling_tflops("GPU-0000-test", "nvfp4") is None


def test_measure_ceilings_without_a_gpu_names_the_reason():
    if gpu.probe()["devices"]:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ParallaxError, match=r"no NVIDIA GPU found \(driver: could not load libcuda.so.1"):
        gpu.measure_ceilings(0, get_preset("tiny"), 1, 8)


def test_measure_ceilings_with_a_wrong_index_lists_the_real_ones(monkeypatch):
    monkeypatch.setattr(gpu, "_native", FakeNative)
    with pytest.raises(ParallaxError, match="no GPU with index 3; this machine has index 0"):
        gpu.measure_ceilings(3, get_preset("tiny"), 1, 8)


# ---- cache ----------------------------------------------------------------------------------


def test_cache_round_trip_and_misses(monkeypatch, tmp_path):
    monkeypatch.setenv(gpu.CACHE_DIR_ENV, str(tmp_path))
    record = {"summary": {"bf16": {"square_tflops": 791.5, "model_shapes_tflops": 640.0}}}
    path = gpu.save_ceilings("GPU-abc", record)
    assert path == tmp_path / "ceilings" / "GPU-abc.json"
    assert gpu.load_cached_ceilings("GPU-abc") == record
    assert gpu.measured_ceiling_tflops("GPU-abc", "bf16") == 791.5
    assert gpu.measured_ceiling_tflops("GPU-abc", "fp8") is None
    assert gpu.measured_ceiling_tflops("GPU-other", "bf16") is None
    assert gpu.measured_ceiling_tflops(None, "bf16") is None


def test_cache_dir_defaults_to_home(monkeypatch, tmp_path):
    monkeypatch.delenv(gpu.CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert gpu.ceilings_path("GPU-1") == tmp_path / ".cache" / "parallax" / "ceilings" / "GPU-1.json"


def test_unreadable_cache_and_unsafe_uuid_are_errors(monkeypatch, tmp_path):
    monkeypatch.setenv(gpu.CACHE_DIR_ENV, str(tmp_path))
    (tmp_path / "ceilings").mkdir()
    (tmp_path / "ceilings" / "GPU-bad.json").write_text("{not json")
    with pytest.raises(ParallaxError, match="delete the file and run 'parallax check-env --measure'"):
        gpu.load_cached_ceilings("GPU-bad")
    with pytest.raises(ParallaxError, match="is not a GPU UUID"):
        gpu.ceilings_path("../etc/passwd")
