"""Knob sets on a GPU (run on the device; skipped elsewhere): torch's reduce-overhead (the compiled
step as CUDA graphs) and coordinate-descent and JAX's XLA flags train the tiny preset, record what
ran, and stay within bf16's run-to-run band (analysis/tuning.py LOSS_BAND) of the default run of the
same seed and batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from parallax.analysis.tuning import LOSS_BAND

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def gpu():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")


def train(tmp_path, framework: str, knob_set: str) -> dict:
    folder = tmp_path / f"{framework}-{knob_set}"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-m", "parallax", "train", "--framework", framework, "--model", "tiny",
                           "--steps", "30", "--warmup", "5", "--device", "cuda", "--tuning", knob_set,
                           "--output-dir", str(folder)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((folder / "run.json").read_text())


@pytest.mark.parametrize("framework, knob_set", [("torch", "reduce-overhead"), ("torch", "coordinate-descent"),
                                                 ("jax", "lhs-no-triton-gemm-cb")])
def test_a_knob_set_trains_within_the_band_of_its_default(tmp_path, framework, knob_set):
    if framework == "jax":
        pytest.importorskip("jax")
    default, tuned = train(tmp_path, framework, "default"), train(tmp_path, framework, knob_set)
    assert tuned["status"] == "ok" and tuned["tuning"]["knob_set"] == knob_set
    if knob_set == "reduce-overhead":
        assert tuned["framework"]["compile_mode"] == "reduce-overhead"
    if framework == "jax":
        assert "--xla_gpu_enable_command_buffer=FUSION" in tuned["framework"]["xla_flags"]
    gap = np.max(np.abs(np.array(tuned["per_step"]["loss"]) - np.array(default["per_step"]["loss"])))
    print(f"{framework} {knob_set}: max |loss - default| {gap:.4f}, "
          f"{tuned['throughput']['tokens_per_s']:,.0f} vs {default['throughput']['tokens_per_s']:,.0f} tokens/s")
    assert gap <= LOSS_BAND
