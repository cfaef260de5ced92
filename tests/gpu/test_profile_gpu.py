"""``parallax profile`` on a real GPU (run on the device; skipped elsewhere): torch bf16 and JAX bf16
at llama-100m with a small batch, each in its own process as a user runs it. The table has every
class, GPU kernels (not CPU operators) were read, the GEMMs are held to a cuBLASLt ceiling measured
at the step's shapes and reach a fraction of it in (0, 1], attention is held to a backend measured
at the run's shape (or the step's own kernels, where faster), no class exceeds its limit, the
memory-bound classes are held to a copy's measured bandwidth, the run records its GPU's UUID in
NVML's form, and the shares with the host gaps add up to the step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SHAPE = ["--model", "llama-100m", "--batch-size", "8", "--seq-len", "512", "--warmup", "5", "--steps", "3"]
CLASSES = ["gemm-bf16", "gemm-fp8", "gemm-fp4", "attention-fwd", "attention-bwd", "quantize", "elementwise",
           "optimizer", "communication", "memcpy", "other", "host gaps"]


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_profile_bf16_on_the_gpu(tmp_path, framework):
    pytest.importorskip(framework)
    out = tmp_path / framework
    proc = subprocess.run([sys.executable, "-m", "parallax", "profile", "--framework", framework, "--precision", "bf16",
                           *SHAPE, "--output-dir", str(out)], capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "profile.json").read_text())
    rows = {r["class"]: r for r in record["classes"]}
    assert [c for c in CLASSES if c in rows] == CLASSES and record["on_gpu"] is True
    assert record["busy"]["method"] == "union of the kernel intervals" and record["framework"]["device_name"] != "cpu"
    assert sum(r["share"] for r in record["classes"]) == pytest.approx(1.0)
    gemm = rows["gemm-bf16"]
    assert gemm["ms_per_step"] > 0 and gemm["limit_source"].startswith("measured"), gemm["limit_source"]
    assert 0 < gemm["fraction"] <= 1, gemm
    for name in ("attention-fwd", "attention-bwd"):
        assert rows[name]["ms_per_step"] > 0 and rows[name]["limit"] is not None, rows[name]["limit_source"]
        assert rows[name]["limit_source"].startswith((f"measured now: {framework} ", "the step's own: ")), \
            rows[name]["limit_source"]
    assert all(r["fraction"] <= 1 + 1e-9 for r in rows.values() if r["fraction"] is not None), rows
    assert rows["elementwise"]["limit_source"].startswith("measured"), rows["elementwise"]["limit_source"]
    assert record["limits"]["hbm"]["source"].startswith("measured"), record["limits"]["hbm"]
    assert str(record["framework"]["device_uuid"]).startswith("GPU-"), record["framework"]
    assert rows["gemm-fp8"]["ms_per_step"] == 0  # a bf16 recipe runs no fp8 GEMM
    md = (out / "profile.md").read_text()
    assert "- GEMM limits: bf16: " in md and "| gemm-bf16 |" in md and (out / "profile.png").stat().st_size > 0
