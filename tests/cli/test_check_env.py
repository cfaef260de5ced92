"""`parallax check-env` through the real CLI: fake probes for exact output, the real probe for this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

import parallax.native
from parallax.plan import envinfo
from parallax.cli import main
from parallax.plan import capability as cap
from parallax.spec import registry

from conftest import gpu_available

CPU_ERROR = "libcuda.so.1: cannot open shared object file: No such file or directory"
CPU_PROBE = envinfo.no_gpu_probe(CPU_ERROR)


def gpu_probe(name="NVIDIA H200", cc="9.0"):
    return {
        "driver": {"available": True, "error": None, "library": "libcuda.so.1", "version": 13000,
                   "version_str": "13.0"},
        "nvml": {"available": True, "error": None, "library": "libnvidia-ml.so.1", "driver_version": "580.95.05"},
        "devices": [{
            "index": 0, "name": name, "uuid": "GPU-0000", "pci_bus_id": "00000000:18:00.0",
            "compute_capability": cc, "cc_major": int(cc.split(".")[0]), "cc_minor": int(cc.split(".")[1]),
            "sm_count": 132, "clock_sm_mhz": 1980, "clock_sm_max_mhz": 1980, "clock_mem_mhz": 3201,
            "clock_mem_max_mhz": 3201, "memory_total_bytes": 150_754_820_096,
            "memory_free_bytes": 150_000_000_000, "power_limit_w": 700.0,
        }],
    }


@pytest.fixture
def fake_probe(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps at the terminal width; keep lines whole

    def use(probe):
        monkeypatch.setattr(envinfo, "probe_gpus", lambda: probe)

    return use


def run(capsys, *args):
    code = main(["check-env", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_text_on_a_cpu_machine(fake_probe, capsys):
    fake_probe(CPU_PROBE)
    code, out, err = run(capsys, "--verbose")
    assert code == 0 and err == ""
    assert f"no NVIDIA GPU found ({CPU_ERROR})" in out
    assert "Precision recipes (no GPU)" in out
    assert "GPUs" not in out
    for name in envinfo.PACKAGES:
        assert name in out
    assert "'slm-parallax[maxtext]'" in out  # brackets survive rich markup


def test_json_on_a_cpu_machine(fake_probe, capsys):
    fake_probe(CPU_PROBE)
    code, out, _ = run(capsys, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["parallax"] == parallax.__version__
    assert report["gpu_found"] is False
    assert report["no_gpu_reason"] == f"no NVIDIA GPU found ({CPU_ERROR})"
    assert report["selected_device"] is None
    assert report["hardware"] == []
    assert report["ceilings"] is None
    assert report["environment"]["cuda_driver"]["error"] == CPU_ERROR
    cells = {(c["framework"], c["recipe"]): c for c in report["capability"]}
    assert len(cells) == len(registry.recipes()) == len(report["recipes"])
    assert all(c["reason"].startswith("no NVIDIA GPU found") for c in cells.values())
    assert cells[("maxtext", "bf16")]["status"] == "unavailable"
    expected = cap.capability(registry.get("jax", "bf16"), CPU_PROBE, report["environment"]["packages"])
    assert cells[("jax", "bf16")] == expected.to_dict()


def test_text_with_an_h200(fake_probe, capsys):
    fake_probe(gpu_probe())
    code, out, _ = run(capsys, "--verbose")
    assert code == 0
    assert "CUDA driver API 13.0 (libcuda.so.1); NVML driver 580.95.05" in out
    row = next(line for line in out.splitlines() if "NVIDIA H200" in line)
    for text in ("h200-sxm", "Hopper", "9.0", "140.4 GiB / 139.7 GiB", "1980 (1980) MHz", "700 W",
                 "989 / 1979 / –", "bf16, fp8"):
        assert text in row, text
    assert "Precision recipes (GPU 0)" in out
    assert "no NVIDIA GPU found" not in out


def run_at_80_columns(monkeypatch, capsys, *args):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(capsys, *args)
    assert code == 0 and err == ""
    return [line.rstrip() for line in out.splitlines()]


def test_default_text_fits_80_columns_on_a_cpu_machine(fake_probe, monkeypatch, capsys):
    fake_probe(CPU_PROBE)
    lines = run_at_80_columns(monkeypatch, capsys)
    assert len(lines) <= 60
    assert max(map(len, lines)) <= 80
    out = "\n".join(lines)
    assert f"no NVIDIA GPU found ({CPU_ERROR})" in out.replace("\n", " ").replace("  ", " ")
    row = next(line for line in lines if line.split()[:3] == ["torch", "fp8", "torchao-fp8-rowwise"])
    assert row.split()[3:] == ["cpu", "1"]
    assert next(line for line in lines if line.split()[:3] == ["jax", "bf16", "te-bf16"]).split()[3:] == [
        "unavailable", "3"]
    assert next(line for line in lines if line.split()[:3] == ["maxtext", "fp8", "fp8_gpu"]).split()[3:] == [
        "*", "unavailable", "5"]
    # each reason once, as a numbered note, without the "no NVIDIA GPU found" said above
    assert "2: transformer_engine_torch not installed; pip install 'slm-parallax[te]'" in lines
    assert out.count("runs on the CPU, correct but slow") == 1
    assert out.count("no NVIDIA GPU found") == 1
    assert "installed: torch " in out and "not installed: " in out
    assert "--verbose" in lines[-1]


def test_default_text_with_eight_h200s_fits_80_columns(fake_probe, monkeypatch, capsys):
    """Eight GPUs and a CPU-only torch: many distinct reasons, still 80 columns."""
    probe = four_gpu_probe()
    probe["devices"] += [{**dev, "index": dev["index"] + 4} for dev in probe["devices"]]
    probe["topology"] = {"available": False, "error": "no topology in this fake", "pairs": []}
    fake_probe(probe)
    lines = run_at_80_columns(monkeypatch, capsys)
    assert max(map(len, lines)) <= 80
    gpus = [line.split() for line in lines if "NVIDIA H200" in line]
    assert [row[0] for row in gpus] == [str(i) for i in range(8)]
    assert gpus[0][3:] == ["h200-sxm", "140.4", "GiB", "989/1979/–"]
    assert "Precision recipes (GPU 0); * = default for --precision" in lines
    note = next(line for line in lines if line.endswith(": te-nvfp4 needs compute capability 10.0+; GPU 0 "
                                                          "(9.0, Hopper) lacks it"))
    row = next(line for line in lines if line.split()[:3] == ["torch", "nvfp4", "te-nvfp4"])
    assert note.split(":")[0] in row.split()[-1].split(",")


def test_verbose_keeps_every_column(fake_probe, capsys):
    fake_probe(CPU_PROBE)
    out = run(capsys, "--verbose")[1]
    for header in ("what runs", "reason", "package", "version"):
        assert f" {header} " in out, header
    row = next(line for line in out.splitlines() if "torchao-fp8-rowwise" in line)
    assert "torchao float8 rowwise (per-row scales), torch.compile, lm_head in bf16, on CPU" in row
    assert "no NVIDIA GPU found; runs on the CPU, correct but slow" in row  # the reason on every row, as before
    assert "│ transformer_engine_jax   │ not installed │" in out


def test_json_keys_are_unchanged(fake_probe, capsys):
    fake_probe(CPU_PROBE)
    report = json.loads(run(capsys, "--json")[1])
    assert list(report) == ["parallax", "gpu_found", "no_gpu_reason", "selected_device", "environment",
                            "hardware", "interconnect", "capability", "recipes", "ceilings"]
    assert list(report["capability"][0]) == ["framework", "recipe", "precision", "status", "reason", "backend",
                                             "default"]


def test_json_resolves_the_rtx_pro_6000_to_12_0(fake_probe, capsys):
    fake_probe(gpu_probe("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0"))
    report = json.loads(run(capsys, "--json")[1])
    hw = report["hardware"][0]
    assert (hw["index"], hw["key"], hw["family"]) == (0, "rtx-pro-6000-blackwell", "Blackwell RTX")
    assert hw["spec"]["dense_peak_tflops"]["bf16"] == 503.8
    assert hw["native_precisions"] == ["bf16", "fp8", "mxfp8", "nvfp4", "mxfp4"]
    assert report["selected_device"] == 0


def test_unknown_gpu_is_flagged_with_the_fix(fake_probe, capsys):
    fake_probe(gpu_probe("NVIDIA Imaginary GPU", "9.0"))
    code, out, _ = run(capsys, "--verbose")
    assert code == 0
    assert "unknown" in next(line for line in out.splitlines() if "Imaginary" in line and "│" in line)
    assert "GPU 0: GPU 'NVIDIA Imaginary GPU' (compute capability 9.0) is not in Parallax's peak table" in out
    assert "--peak-tflops" in out


def test_uncertain_peaks_are_marked(fake_probe, capsys):
    fake_probe(gpu_probe("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0"))
    out = run(capsys, "--verbose")[1]
    assert "438.9 / 878~ / 1756~" in out
    assert "~ uncertain figure: shown, never used for MFU" in out


def four_gpu_probe():
    """Four H200 NVL cards bridged in pairs (0-1, 2-3: 4 NVLinks each), the pairs under one
    PCIe switch each and both switches under one host bridge; GPU 3 has a link down."""
    probe = gpu_probe()
    one = probe["devices"][0]
    probe["devices"] = []
    for i, bus in enumerate(("19", "1A", "3B", "3C")):
        active = 3 if i == 3 else 4
        probe["devices"].append({**one, "index": i, "uuid": f"GPU-000{i}", "pci_bus_id": f"0000:{bus}:00.0",
                                 "nvlink": {"links": 4, "active": active, "to_nvswitch": 0, "peers": [],
                                            "error": None}})

    def pair(a, b, code, nvlinks, path, ancestor):
        return {"a": a, "b": b, "connection": code, "nvlinks": nvlinks, "via_nvswitch": False,
                "p2p_nvlink": nvlinks > 0, "common_ancestor": ancestor, "common_ancestor_name": None,
                "pcie_path": path, "error": None}

    probe["topology"] = {"available": True, "error": None, "pairs": [
        pair(0, 1, "NV4", 4, "PIX", 10), pair(0, 2, "PHB", 0, "PHB", 30), pair(0, 3, "PHB", 0, "PHB", 30),
        pair(1, 2, "PHB", 0, "PHB", 30), pair(1, 3, "PHB", 0, "PHB", 30), pair(2, 3, "NV4", 4, "PIX", 10)]}
    return probe


def test_text_lists_every_gpu_and_the_interconnect_matrix(fake_probe, capsys):
    fake_probe(four_gpu_probe())
    code, out, _ = run(capsys, "--verbose")
    assert code == 0
    rows = [line for line in out.splitlines() if "NVIDIA H200" in line and "│" in line]
    assert len(rows) == 4
    assert "4/4 up" in rows[0] and "3/4 up" in rows[3]
    assert "Interconnect: 2 of 6 GPU pairs are joined by NVLink; the others talk over PCIe" in out
    matrix = [line.split("│")[1:-1] for line in out.splitlines()
              if line.startswith("│ GPU ") and "NVIDIA" not in line]
    assert [[c.strip() for c in row] for row in matrix] == [
        ["GPU 0", "X", "NV4", "PHB", "PHB"],
        ["GPU 1", "NV4", "X", "PHB", "PHB"],
        ["GPU 2", "PHB", "PHB", "X", "NV4"],
        ["GPU 3", "PHB", "PHB", "NV4", "X"],
    ]
    assert "  NV4: NVLink ×4 direct (bridge or board)" in out
    assert "  PHB: PCIe through a CPU's PCIe host bridge" in out


def test_json_has_the_interconnect_record(fake_probe, capsys):
    fake_probe(four_gpu_probe())
    report = json.loads(run(capsys, "--json")[1])
    link = report["interconnect"]
    assert link["available"] is True and link["gpus"] == [0, 1, 2, 3]
    assert link["matrix"][0] == ["X", "NV4", "PHB", "PHB"]
    assert link["pairs"][0] == {"a": 0, "b": 1, "connection": "NV4", "words": "NVLink ×4 direct (bridge or board)",
                                "nvlinks": 4, "via_nvswitch": False, "pcie_path": "PIX", "p2p_nvlink": True}
    assert link["legend"] == {"NV4": "NVLink ×4 direct (bridge or board)",
                              "PHB": "PCIe through a CPU's PCIe host bridge"}
    assert report["environment"]["gpu_topology"]["pairs"][5]["connection"] == "NV4"
    assert [hw["index"] for hw in report["hardware"]] == [0, 1, 2, 3]


def test_an_nvswitch_board_reads_as_one_fabric(fake_probe, capsys):
    probe = four_gpu_probe()
    for dev in probe["devices"]:
        dev["nvlink"] = {"links": 18, "active": 18, "to_nvswitch": 18, "peers": [], "error": None}
    for pair in probe["topology"]["pairs"]:
        pair.update(connection="NV18", nvlinks=18, via_nvswitch=True, p2p_nvlink=True)
    fake_probe(probe)
    out = run(capsys, "--verbose")[1]
    assert "Interconnect: all 4 GPUs are joined by NVLink (at least 18 links per pair, through NVSwitch)" in out
    assert "18/18 up, 18 to NVSwitch" in out
    assert "  NV18: NVLink ×18 through NVSwitch" in out


def test_several_gpus_without_topology_say_why(fake_probe, capsys):
    probe = four_gpu_probe()
    probe["topology"] = {"available": False, "error": "libnvidia-ml.so.1 lacks nvmlDeviceGetTopologyCommonAncestor",
                         "pairs": []}
    for dev in probe["devices"]:
        dev["nvlink"] = {"links": 0, "active": 0, "to_nvswitch": 0, "peers": [],
                         "error": "nvmlDeviceGetNvLinkState failed: Not Supported"}
    fake_probe(probe)
    out = run(capsys, "--verbose")[1]
    assert ("interconnect: 4 GPUs; their interconnect is unknown "
            "(libnvidia-ml.so.1 lacks nvmlDeviceGetTopologyCommonAncestor)") in out
    assert "Interconnect:" not in out
    assert all("none" in line for line in out.splitlines() if "NVIDIA H200" in line and "│" in line)


def test_cpu_json_interconnect_is_empty_with_the_reason(fake_probe, capsys):
    fake_probe(CPU_PROBE)
    link = json.loads(run(capsys, "--json")[1])["interconnect"]
    assert link == {"available": False, "error": CPU_ERROR, "gpus": [], "matrix": [], "pairs": [], "legend": {},
                    "summary": "no GPU"}


def gemm(precision, m, n, k, tflops, median_ms, error=None, **shape):
    return {**shape, "precision": precision, "m": m, "n": n, "k": k, "flops": 2 * m * n * k, "warmup": 10,
            "iters": 50, "median_ms": median_ms, "min_ms": median_ms, "max_ms": median_ms, "tflops": tflops,
            "algo_count": 1, "layout": "TN", "cublaslt_version": 130000, "library": "libcublasLt.so.13",
            "error": error}


def fake_ceilings(calls):
    """gpu.measure_ceilings as its docstring describes it, with fixed numbers."""

    def measure_ceilings(device_index, model, batch_size, seq_len, progress=None, **kw):
        calls.append((device_index, model.name, batch_size, seq_len, type(progress).__name__))
        qkv = dict(name="qkv.forward", linear="qkv", count=model.n_layers)
        qkv["pass"] = "forward"
        return {
            "device": gpu_probe()["devices"][0],
            "square": {
                "bf16": gemm("bf16", 8192, 8192, 8192, 791.2, 1.3897),
                "fp8": gemm("fp8", 8192, 8192, 8192, 1300.0, 0.8458),
                "nvfp4": gemm("nvfp4", 8192, 8192, 8192, None, None, "nvfp4 needs compute capability 10.0+"),
            },
            "model_shapes": [gemm("bf16", 4096, 2304, 768, 600.0, 0.0242, **qkv)],
            "summary": {
                "bf16": {"square_tflops": 791.2, "model_shapes_tflops": 600.0},
                "fp8": {"square_tflops": 1300.0, "model_shapes_tflops": None},
                "nvfp4": {"square_tflops": None, "model_shapes_tflops": None},
            },
            "measured_at": "2026-11-29T16:00:00Z",
        }

    return measure_ceilings


@pytest.fixture
def fake_gpu_module(monkeypatch):
    calls = []
    module = types.ModuleType("parallax.native.gpu")
    module.measure_ceilings = fake_ceilings(calls)
    # a 2 GiB copy in 1.1 ms: 3.904 TB/s read + written
    module.measure_bandwidth = lambda device: calls.append(("copy", device["index"])) or {
        "copy": {"bytes": 2 << 30, "iters": 10, "median_ms": 1.1, "bytes_per_s": 2 * (2 << 30) / 1.1e-3, "error": None}}
    monkeypatch.setitem(sys.modules, "parallax.native.gpu", module)
    monkeypatch.setattr(parallax.native, "gpu", module, raising=False)
    return calls


def test_measure_reports_percent_of_dense_peak(fake_probe, fake_gpu_module, capsys):
    fake_probe(gpu_probe())
    code, out, _ = run(capsys, "--measure", "--json", "--model", "tiny", "--batch-size", "4", "--seq-len", "128")
    assert code == 0
    assert fake_gpu_module == [(0, "tiny", 4, 128, "Progress"), ("copy", 0)]  # a rich progress bar, on stderr
    hbm = json.loads(out)["ceilings"]["hbm"]
    assert hbm["copy"]["bytes_per_s"] == pytest.approx(3.904515723e12) and hbm["datasheet"] == "4.8 TB/s"
    percent = json.loads(out)["ceilings"]["percent_of_dense_peak"]
    assert percent["bf16"]["square"] == pytest.approx(100 * 791.2 / 989)
    assert percent["bf16"]["model_shapes"] == pytest.approx(100 * 600 / 989)
    assert percent["fp8"] == {"square": pytest.approx(100 * 1300 / 1979), "model_shapes": None}
    assert percent["nvfp4"] == {"square": None, "model_shapes": None}
    assert json.loads(out)["ceilings"]["model_shapes"][0]["percent_of_dense_peak"] == pytest.approx(100 * 600 / 989)


def test_measure_text_table(fake_probe, fake_gpu_module, capsys):
    fake_probe(gpu_probe())
    code, out, _ = run(capsys, "--measure", "--verbose")
    assert code == 0
    assert fake_gpu_module == [(0, "llama-100m", 32, 1024, "Progress"), ("copy", 0)]  # config.RunConfig's defaults
    assert ("HBM bandwidth (a device-to-device copy of 2.0 GiB, read + written, median of 10): 3.905 TB/s "
            "(datasheet: 4.8 TB/s)") in out
    bf16 = next(line for line in out.splitlines() if "8192×8192×8192" in line and "bf16" in line)
    assert "1.390" in bf16 and "791.2" in bf16 and "80.0 %" in bf16
    qkv = next(line for line in out.splitlines() if "qkv.forward 4096×2304×768" in line)
    assert "0.024" in qkv and "600.0" in qkv and "60.7 %" in qkv
    summary = next(line for line in out.splitlines() if "all model GEMMs" in line and "bf16" in line)
    assert "600.0" in summary and "60.7 %" in summary
    assert "nvfp4 needs compute capability 10.0+" in out


def one_line_error(code, out, err, *needles):
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("parallax: error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)


def test_measure_without_a_gpu_fails_first(fake_probe, capsys):
    fake_probe(CPU_PROBE)
    one_line_error(*run(capsys, "--measure"), "--measure needs an NVIDIA GPU", CPU_ERROR,
                   "run check-env without --measure")


def test_a_device_that_does_not_exist(fake_probe, capsys):
    fake_probe(gpu_probe())
    one_line_error(*run(capsys, "--device", "3"), "--device 3 does not exist", "GPU index 0")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--bogus"], "--bogus"),
        (["--model", "gpt-5"], "unknown model preset 'gpt-5'"),
        (["--seq-len", "0"], "--seq-len must be positive"),
        (["--batch-size", "x"], "'x' is not a valid integer"),
    ],
)
def test_bad_options_are_one_line(fake_probe, capsys, args, needle):
    fake_probe(CPU_PROBE)
    one_line_error(*run(capsys, *args), needle)


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "parallax", "check-env", *args], capture_output=True, text=True,
                          env=env)


def test_subprocess_json_on_this_machine():
    proc = cli("--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["gpu_found"] == bool(report["environment"]["gpus"])
    if not report["gpu_found"]:
        assert report["no_gpu_reason"].startswith("no NVIDIA GPU found (")
    assert len(report["capability"]) == len(registry.recipes())


def test_check_env_imports_neither_torch_nor_jax():
    code = (
        "import sys; from parallax.cli import main; main(['check-env', '--json']); "
        "print(sorted(m for m in ('torch', 'jax', 'flax') if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "[]"


@pytest.mark.skipif(gpu_available(), reason="checks the CPU-only path")
def test_subprocess_at_80_columns_on_this_cpu():
    proc = cli(env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 60 and max(map(len, lines)) <= 80
    assert any(line.split()[:4] == ["torch", "bf16", "bf16", "*"] for line in lines)


@pytest.mark.skipif(gpu_available(), reason="checks the CPU-only path")
def test_subprocess_measure_without_a_gpu():
    proc = cli("--measure")
    one_line_error(proc.returncode, proc.stdout, proc.stderr, "--measure needs an NVIDIA GPU: no NVIDIA GPU found (")


@pytest.mark.gpu
def test_real_gpu_resolves_in_the_table():
    report = json.loads(cli("--json").stdout)
    assert report["gpu_found"]
    dev, hw = report["environment"]["gpus"][0], report["hardware"][0]
    assert hw["compute_capability"] == dev["compute_capability"]
    if dev["name"] == "NVIDIA H200":
        assert hw["key"] == "h200-sxm"
    assert hw["key"] is not None, hw["warnings"]


@pytest.mark.gpu
def test_real_gpu_measure(tmp_path):
    env = dict(os.environ, PARALLAX_CACHE_DIR=str(tmp_path))  # leave the user's ceilings cache alone
    proc = cli("--json", "--measure", "--model", "tiny", "--batch-size", "8", "--seq-len", "128", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    bf16 = report["ceilings"]["square"]["bf16"]
    assert bf16["error"] is None and bf16["tflops"] > 0
    percent = report["ceilings"]["percent_of_dense_peak"]["bf16"]["square"]
    if report["hardware"][0]["key"] is not None:
        assert 0 < percent < 100  # achieved below the dense datasheet peak


@pytest.mark.gpu
def test_real_gpus_all_listed_with_every_pair():
    report = json.loads(cli("--json").stdout)
    link, gpus = report["interconnect"], report["environment"]["gpus"]
    assert link["gpus"] == [d["index"] for d in gpus]
    if len(gpus) > 1 and link["available"]:
        assert len(link["pairs"]) == len(gpus) * (len(gpus) - 1) // 2
        assert all(p["connection"] != "?" for p in link["pairs"]), link["pairs"]
