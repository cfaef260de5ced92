"""The framework × precision matrix from fake probes and fake package sets."""

from __future__ import annotations

import pytest

from parallax.errors import ParallaxError
from parallax.spec.precision import PRECISIONS
from parallax.spec import registry
from parallax.plan import capability as cap

REAL_ENGINE_PRESENT = cap.engine_present


def probe_of(name, cc):
    ok = {"available": True, "error": None}
    return {"driver": ok, "nvml": ok, "devices": [{"index": 0, "name": name, "compute_capability": cc}]}


H200 = probe_of("NVIDIA H200", "9.0")
B200 = probe_of("NVIDIA B200", "10.0")
RTX_PRO = probe_of("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0")
A100 = probe_of("NVIDIA A100-SXM4-80GB", "8.0")
T4 = probe_of("Tesla T4", "7.5")
CPU_ERROR = "libcuda.so.1: cannot open shared object file: No such file or directory"
CPU = {
    "driver": {"available": False, "error": CPU_ERROR},
    "nvml": {"available": False, "error": "libnvidia-ml.so.1: not found"},
    "devices": [],
}

GPU_PACKAGES = {
    "torch": "2.11.0+cu130", "jax": "0.11.2", "jaxlib": "0.11.2", "jax_cuda13_plugin": "0.11.2",
    "flax": "0.12.10", "optax": "0.2.8",
}
CPU_PACKAGES = {"torch": "2.13.0+cpu", "jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8", "optax": "0.2.8"}


@pytest.fixture(autouse=True)
def engines_shipped(monkeypatch):
    """The matrix should not depend on which engines this checkout has finished."""
    monkeypatch.setattr(cap, "engine_present", lambda framework: framework in ("torch", "jax", "maxtext"))


def cell(framework, name, probe, packages=GPU_PACKAGES, device_index=0):
    """The capability of a recipe, by name or by format (the framework's default recipe)."""
    devices = probe.get("devices") or [{}]
    cc = devices[0].get("compute_capability")  # --precision's default recipe depends on the GPU (nvfp4)
    recipe = registry.resolve(framework, name, None, cc) if name in PRECISIONS else registry.get(framework, name)
    return cap.capability(recipe, probe, packages, device_index)


L40S = probe_of("NVIDIA L40S", "8.9")
WITH_LIBS = dict(GPU_PACKAGES, transformer_engine_torch="2.20.2", torchao="0.18.0")


def test_h200_bf16_native_in_both_engines():
    torch = cell("torch", "bf16", H200)
    assert (torch.status, torch.recipe, torch.backend) == ("native", "bf16", registry.get("torch", "bf16").summary)
    assert torch.reason == "GPU 0 (9.0, Hopper) supports bf16 natively"
    jax = cell("jax", "bf16", H200)
    assert jax.status == "native" and jax.runnable and jax.default


def test_h200_fp8_recipes_are_native_once_their_libraries_are_installed():
    for name in ("te-fp8-delayed", "te-fp8-current", "torchao-fp8-tensorwise", "torchao-fp8-rowwise"):
        c = cell("torch", name, H200, WITH_LIBS)
        assert (c.status, c.precision) == ("native", "fp8"), c
        assert c.reason == "GPU 0 (9.0, Hopper) supports fp8 natively"
    for name in ("flax-fp8-delayed", "flax-fp8-direct"):
        assert cell("jax", name, H200).status == "native"
    assert cell("torch", "fp8", H200, WITH_LIBS).recipe == "te-fp8-delayed"  # the spec's default
    assert cell("jax", "fp8", H200).recipe == "flax-fp8-delayed"


def test_a_missing_library_names_its_extra():
    te = cell("torch", "te-fp8-delayed", H200)
    assert te.status == "unavailable"
    assert te.reason.startswith("transformer_engine_torch not installed; pip install 'slm-parallax[te]'")
    ao = cell("torch", "torchao-fp8-tensorwise", H200)
    assert ao.reason.startswith("torchao not installed; pip install 'slm-parallax[torchao]'")


@pytest.mark.parametrize("probe, expected", [
    (A100, {"bf16": "native", "te-bf16": "native", "te-fp8-delayed": "unavailable",
            "torchao-fp8-tensorwise": "unavailable", "torchao-fp8-rowwise": "unavailable"}),
    (L40S, {"bf16": "native", "te-fp8-delayed": "native", "torchao-fp8-tensorwise": "native",
            "torchao-fp8-rowwise": "unavailable"}),
    (H200, {"te-fp8-delayed": "native", "te-fp8-current": "native", "torchao-fp8-rowwise": "native"}),
    (B200, {"te-fp8-delayed": "native", "torchao-fp8-rowwise": "native"}),
    (RTX_PRO, {"te-fp8-current": "native", "torchao-fp8-tensorwise": "native"}),
])
def test_recipe_selection_per_gpu_capability(probe, expected):
    for name, status in expected.items():
        assert cell("torch", name, probe, WITH_LIBS).status == status, name


def test_a100_fp8_says_which_capability_the_recipe_needs():
    c = cell("torch", "te-fp8-delayed", A100, WITH_LIBS)
    assert c.reason == "te-fp8-delayed needs compute capability 8.9+; GPU 0 (8.0, Ampere) lacks it"
    rowwise = cell("torch", "torchao-fp8-rowwise", L40S, WITH_LIBS)
    assert rowwise.reason == "torchao-fp8-rowwise needs compute capability 9.0+; GPU 0 (8.9, Ada) lacks it"
    assert "flax-fp8-delayed needs compute capability 8.9+" in cell("jax", "fp8", A100).reason


def test_h200_nvfp4_is_emulated_and_te_nvfp4_needs_blackwell():
    c = cell("torch", "te-nvfp4", H200, WITH_LIBS)
    assert c.status == "unavailable" and not c.default
    assert c.reason == "te-nvfp4 needs compute capability 10.0+; GPU 0 (9.0, Hopper) lacks it"
    for framework in ("torch", "jax"):
        emulated = cell(framework, "emulated-nvfp4", H200)
        assert emulated.status == "emulated" and emulated.default
        assert "nvfp4 emulated on GPU 0 (9.0, Hopper)" in emulated.reason


def test_b200_nvfp4_default_is_te_native_and_rtx_pro_carries_its_caveat():
    b200 = cell("torch", "te-nvfp4", B200, WITH_LIBS)
    assert b200.status == "native" and b200.default
    assert not cell("torch", "emulated-nvfp4", B200).default
    rtx = cell("torch", "te-nvfp4", RTX_PRO, WITH_LIBS)
    assert rtx.status == "native" and rtx.default
    assert "full NVFP4 training recipe is 10.x-only (12.x: forward or no-RHT/SR only" in rtx.reason
    assert cell("jax", "emulated-nvfp4", B200).default  # TE-JAX NVFP4 is not wired


def test_b200_nvfp4_hardware_allows_it_without_caveat():
    c = cell("torch", "nvfp4", B200)
    assert c.recipe == "te-nvfp4" and c.status == "unavailable"  # TE is not installed in GPU_PACKAGES
    assert c.reason.endswith("GPU 0 (10.0, Blackwell datacenter) supports nvfp4 natively")


def test_rtx_pro_6000_nvfp4_carries_the_te_caveat():
    c = cell("torch", "nvfp4", RTX_PRO)
    assert "GPU 0 (12.0, Blackwell RTX) supports nvfp4 natively" in c.reason
    assert "10.x-only" in c.reason and "PR #3195" in c.reason
    assert cell("torch", "bf16", RTX_PRO).status == "native"


def test_pre_ampere_gpu_has_no_bf16_path():
    c = cell("torch", "bf16", T4)
    assert c.status == "unavailable"
    assert c.reason == "bf16 needs compute capability 8.0+; GPU 0 (7.5, Turing) lacks it"


def test_cpu_machine_every_gpu_cell_says_no_gpu():
    matrix = cap.capability_matrix(CPU, CPU_PACKAGES)
    assert [(c.framework, c.recipe) for c in matrix] == [(r.framework, r.name) for r in registry.recipes()]
    for c in matrix:
        assert c.reason.startswith("no NVIDIA GPU found"), c
    runnable = {(c.framework, c.recipe): c.status for c in matrix if c.runnable}
    assert runnable == {("torch", "bf16"): "cpu", ("jax", "bf16"): "cpu",
                        ("jax", "flax-fp8-delayed"): "cpu", ("jax", "flax-fp8-direct"): "cpu",
                        ("torch", "emulated-nvfp4"): "cpu", ("torch", "emulated-nvfp4-all"): "cpu",
                        ("jax", "emulated-nvfp4"): "cpu", ("jax", "emulated-nvfp4-all"): "cpu",
                        **{(fw, f"emulated-{r}"): "cpu" for fw in ("torch", "jax")
                           for r in ("mxfp8", "mxfp8-floor", "mxfp4")}}


def test_cpu_cell_explains_the_label():
    c = cell("jax", "bf16", CPU, CPU_PACKAGES)
    assert c.status == cap.CPU
    assert c.backend == registry.get("jax", "bf16").summary + ", on CPU"
    assert "tiny preset" in c.reason and "not for benchmark numbers" in c.reason


def test_no_gpu_reason_quotes_the_driver():
    assert cap.no_gpu_reason(CPU) == f"no NVIDIA GPU found ({CPU_ERROR})"
    assert cap.no_gpu_reason({"driver": {"error": None}, "nvml": {"error": "nvml said no"}, "devices": []}) == (
        "no NVIDIA GPU found (nvml said no)"
    )
    assert cap.no_gpu_reason(None) == "no NVIDIA GPU found"


def test_cpu_build_of_torch_on_a_gpu_machine():
    c = cell("torch", "bf16", H200, CPU_PACKAGES)
    assert c.status == "unavailable"
    assert "torch 2.13.0+cpu is not a CUDA build" in c.reason


def test_jax_without_a_cuda_plugin_on_a_gpu_machine():
    c = cell("jax", "bf16", H200, CPU_PACKAGES)
    assert c.status == "unavailable"
    assert "jax has no CUDA plugin installed" in c.reason
    with_plugin = dict(CPU_PACKAGES, jax_cuda12_plugin="0.10.2")
    assert cell("jax", "bf16", H200, with_plugin).status == "native"


def test_missing_packages_name_the_extra():
    no_torch = dict(GPU_PACKAGES, torch=None)
    c = cell("torch", "bf16", H200, no_torch)
    assert c.status == "unavailable"
    assert c.reason.startswith("torch not installed; pip install 'slm-parallax[torch]'")
    no_flax = dict(GPU_PACKAGES, flax=None, optax=None)
    assert cell("jax", "bf16", H200, no_flax).reason.startswith(
        "flax, optax not installed; pip install 'slm-parallax[jax]'"
    )
    # On a CPU machine a missing package blocks the cpu path too.
    assert cell("torch", "bf16", CPU, {}).status == "unavailable"


def test_maxtext_modes_on_an_h200_with_maxtext_and_qwix():
    with_mt = dict(GPU_PACKAGES, maxtext="0.2.5", qwix="0.1.8")
    statuses = {c.recipe: c.status for c in cap.capability_matrix(H200, with_mt, frameworks=("maxtext",))}
    assert statuses == {"bf16": "native", "bf16-defaults": "native", "fp8": "native", "fp8_gpu": "native",
                        "te_fp8_delayedscaling": "unavailable", "te_fp8_currentscaling": "unavailable",
                        "te_nvfp4": "unavailable", "te_nvfp4_no_rht": "unavailable", "te_mxfp8": "unavailable"}
    te = cell("maxtext", "te_fp8_delayedscaling", H200, with_mt)
    assert te.reason.startswith("transformer_engine_jax not installed; pip install 'slm-parallax[maxtext]'")
    nvfp4 = cell("maxtext", "te_nvfp4", H200, dict(with_mt, transformer_engine_jax="2.20.2"))
    assert "te_nvfp4 needs compute capability 10.0+; GPU 0 (9.0, Hopper) lacks it" in nvfp4.reason
    assert cell("maxtext", "te_fp8_currentscaling", H200,
                dict(with_mt, transformer_engine_jax="2.20.2")).status == "native"


def test_maxtext_missing_names_its_extra_and_cpu_machines_have_no_maxtext_cell():
    bf16 = cell("maxtext", "bf16", H200)
    assert bf16.status == "unavailable"
    assert bf16.reason.startswith("maxtext not installed; pip install 'slm-parallax[maxtext]'")
    for c in cap.capability_matrix(CPU, {}, frameworks=("maxtext",)):
        assert c.status == "unavailable" and c.reason.startswith("no NVIDIA GPU found")


def test_an_engine_missing_from_the_installation(monkeypatch):
    monkeypatch.setattr(cap, "engine_present", lambda framework: False)
    c = cell("torch", "bf16", H200)
    assert c.status == "unavailable"
    assert c.reason.startswith("the torch engine is missing from this installation")


def test_device_index_selects_the_gpu():
    two = {"driver": H200["driver"], "nvml": H200["nvml"], "devices": [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"},
        {"index": 1, "name": "NVIDIA H200", "compute_capability": "9.0"},
    ]}
    assert "GPU 1 (9.0, Hopper) supports fp8" in cell("torch", "fp8", two, WITH_LIBS, 1).reason
    assert "GPU 0 (8.0, Ampere) lacks it" in cell("torch", "fp8", two, WITH_LIBS, 0).reason


def test_unknown_framework_or_precision():
    with pytest.raises(ParallaxError, match="unknown framework 'mxnet'"):
        cell("mxnet", "bf16", H200)
    with pytest.raises(ParallaxError, match="unknown recipe 'fp16' for torch"):
        cell("torch", "fp16", H200)
    with pytest.raises(ParallaxError, match="unknown precision 'fp16'"):
        registry.resolve("torch", "fp16", None)


def test_engine_present_reads_the_installed_files():
    import pathlib

    import parallax.engines

    root = pathlib.Path(parallax.engines.__file__).parent
    for framework in ("torch", "jax", "maxtext"):
        assert REAL_ENGINE_PRESENT(framework) == (root / framework / "engine.py").is_file()
    assert REAL_ENGINE_PRESENT("no_such_engine") is False


def test_no_format_runs_natively_on_the_cpu_in_any_engine():
    for fmt in ("bf16", "fp8", "nvfp4"):
        assert cap.runs_natively(fmt, "cpu") is False
    assert cap.runs_natively("bf16", "gpu", "9.0") and cap.runs_natively("fp8", "cuda", "9.0")
    assert not cap.runs_natively("nvfp4", "gpu", "9.0")


@pytest.mark.parametrize("precision, label", [
    ({"native": True, "details": {"device_type": "cuda", "emulated": False}}, "native"),
    ({"native": False, "details": {"device_type": "cpu", "emulated": False}}, "cpu"),  # torch on the CPU
    ({"native": False, "details": {"device_platform": "cpu", "emulated": False}}, "cpu"),  # JAX on the CPU
    ({"native": False, "details": {"device_type": "cpu", "emulated": "NVFP4 quantize-dequantize"}}, "emulated"),
    ({"native": False, "details": {"device_platform": "gpu", "emulated": True}}, "emulated"),
    ({"native": False, "details": {"device_type": "cuda"}}, "emulated"),  # a GPU that converts bf16
    ({"native": True}, "native"),  # a record from before details were kept
])
def test_one_label_for_every_summary_and_report(precision, label):
    assert cap.run_label(precision) == label


def test_te_mxfp8_runs_on_10x_only_refused_on_hopper_and_12x_in_one_line():
    b200 = cell("torch", "te-mxfp8", B200, WITH_LIBS)
    assert b200.status == "native" and not b200.default  # --precision mxfp8 stays emulated-mxfp8
    hopper = cell("torch", "te-mxfp8", H200, WITH_LIBS)
    assert hopper.status == "unavailable"
    assert hopper.reason == "te-mxfp8 needs compute capability 10.0+; GPU 0 (9.0, Hopper) lacks it"
    rtx = cell("torch", "te-mxfp8", RTX_PRO, WITH_LIBS)
    assert rtx.status == "unavailable"
    assert rtx.reason == "te-mxfp8 does not run on compute capability 12.0+; GPU 0 (12.0, Blackwell RTX) is one"
    for framework in ("torch", "jax"):
        for fmt in ("mxfp8", "mxfp4"):
            emulated = cell(framework, fmt, H200)
            assert emulated.recipe == f"emulated-{fmt}" and emulated.status == "emulated" and emulated.default
            assert f"{fmt} emulated on GPU 0 (9.0, Hopper)" in emulated.reason
