"""Which peak a run's MFU divides by: the dense peak of the format its GEMMs run in.

``train.flops_record`` (what run.json's ``flops`` holds) asks ``train.mfu_denominators``, which
takes the recipe's ``mfu_format`` (its format; bf16 for an emulated recipe, whose GEMMs run in
bf16) and looks up that format's peak in ``hardware`` and its cached GEMM ceiling in ``gpu``.
The GPUs here have distinct peaks per format (H200: bf16 989, fp8 1979; B200: bf16 2250, fp8
4500, fp4 9000 dense TFLOP/s) and the ceilings distinct values, so a run that divides by
another format's peak gets another number.
"""

from __future__ import annotations

import pytest

from parallax.spec import flops
from parallax.native import gpu
from parallax.plan.resolve import RunPlan
from parallax.run import train
from parallax.spec.config import RunConfig
from parallax.engines.base import EngineOutput
from parallax.spec.precision import PrecisionInfo
from parallax.spec import registry

SEQ = 16
FLOPS_PER_TOKEN = flops.flops_per_token_spec(RunConfig(model="tiny").model_config, SEQ)
H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "uuid": "GPU-h200"}
B200 = {"name": "NVIDIA B200", "compute_capability": "10.0", "uuid": "GPU-b200"}
# `parallax check-env --measure`'s cached square-GEMM medians, one per format
CEILINGS = {"GPU-h200": {"bf16": 700.0, "fp8": 1300.0},
            "GPU-b200": {"bf16": 1800.0, "fp8": 3500.0, "nvfp4": 6000.0}}


@pytest.fixture(autouse=True)
def cached_ceilings(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    for uuid, by_format in CEILINGS.items():
        gpu.save_ceilings(uuid, {"summary": {f: {"square_tflops": v} for f, v in by_format.items()}})


def record(framework: str, recipe: str, device: dict, mfu: float) -> dict:
    """run.json's ``flops`` for a run of ``recipe`` on ``device`` whose tokens/s give an MFU of
    exactly ``mfu`` against a peak of 1000 TFLOP/s."""
    spec = registry.get(framework, recipe)
    run = RunConfig(model="tiny", framework=framework, precision=spec.format, recipe=recipe, batch_size=2,
                    seq_len=SEQ, device="cuda:0")
    fmt = spec.format
    out = EngineOutput(steps=[], precision=PrecisionInfo(fmt, "fake", recipe, True),
                       framework={"name": framework, "device": "cuda:0", "device_uuid": device["uuid"]},
                       timing_method="fake", compile_s=None)
    tokens_per_s = mfu * 1000e12 / FLOPS_PER_TOKEN  # 1000 TFLOP/s achieved at mfu == 1
    return train.flops_record(RunPlan(run=run, recipe=spec), out, {"gpus": [device]}, tokens_per_s)


# (framework, recipe, GPU, its precision peak, bf16 peak, measured ceiling)
CASES = [
    ("torch", "te-fp8-delayed", H200, 1979.0, 989.0, 1300.0),
    ("jax", "flax-fp8-delayed", H200, 1979.0, 989.0, 1300.0),
    ("torch", "bf16", H200, 989.0, 989.0, 700.0),
    # emulated NVFP4 quantize-dequantizes, then multiplies in bf16: the bf16 peak and ceiling,
    # also on a GPU with fp4 tensor cores (B200), never the fp4 peak it does not use
    ("torch", "emulated-nvfp4", H200, 989.0, 989.0, 700.0),
    ("jax", "emulated-nvfp4", H200, 989.0, 989.0, 700.0),
    ("torch", "emulated-nvfp4", B200, 2250.0, 2250.0, 1800.0),
    ("torch", "te-nvfp4", B200, 9000.0, 2250.0, 6000.0),
]


@pytest.mark.parametrize("framework, recipe, device, peak, bf16_peak, ceiling", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]['name'].split()[-1]}" for c in CASES])
def test_mfu_divides_by_the_peak_of_the_format_the_gemms_run_in(framework, recipe, device, peak, bf16_peak,
                                                                 ceiling):
    result = record(framework, recipe, device, mfu=0.5)
    assert result["denominators_tflops"] == {"precision_peak": peak, "bf16_peak": bf16_peak,
                                             "measured_ceiling": ceiling}
    assert result["warnings"] == []
    spec = result["accountings"]["spec"]
    assert spec["flops_per_token"] == FLOPS_PER_TOKEN
    assert spec["tflops"] == pytest.approx(500.0, rel=1e-12)
    assert spec["mfu_precision_peak"] == pytest.approx(500.0 / peak, rel=1e-12)
    assert spec["mfu_bf16_peak"] == pytest.approx(500.0 / bf16_peak, rel=1e-12)
    assert spec["mfu_measured_ceiling"] == pytest.approx(500.0 / ceiling, rel=1e-12)


def test_an_fp8_run_on_the_h200_is_half_as_utilised_as_a_bf16_run_at_the_same_tflops():
    fp8 = record("torch", "te-fp8-delayed", H200, mfu=0.5)["accountings"]["spec"]
    bf16 = record("torch", "bf16", H200, mfu=0.5)["accountings"]["spec"]
    assert fp8["tflops"] == bf16["tflops"]
    assert fp8["mfu_precision_peak"] == pytest.approx(500.0 / 1979.0, rel=1e-12)  # 25.3 %
    assert bf16["mfu_precision_peak"] == pytest.approx(500.0 / 989.0, rel=1e-12)  # 50.6 %
    # against the bf16 peak both are the same fraction: that column is the like-for-like one
    assert fp8["mfu_bf16_peak"] == bf16["mfu_bf16_peak"]


@pytest.mark.parametrize("framework, recipe, column", [
    ("torch", "bf16", "bf16"), ("torch", "te-fp8-delayed", "fp8"), ("jax", "flax-fp8-delayed", "fp8"),
    ("torch", "te-nvfp4", "fp4"), ("torch", "emulated-nvfp4", "bf16"), ("jax", "emulated-nvfp4", "bf16"),
])
def test_the_recorded_peak_column_names_the_denominator_used(framework, recipe, column):
    spec = registry.get(framework, recipe)
    assert spec.peak_column == column and spec.to_dict()["peak_column"] == column
