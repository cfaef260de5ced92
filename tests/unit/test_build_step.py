"""``Engine.build_step(plan)``: the step that profilers and HLO dumps use is the step ``train``
runs. Built for tiny on the CPU, it gives the losses of a real run of the same plan, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parallax.engines import get_engine
from parallax.errors import ParallaxError
from parallax.plan.resolve import resolve
from parallax.run.train import run_training
from parallax.spec.config import RunConfig
from parallax.store.results import load_steps


def tiny(framework: str, tmp_path, **changes) -> RunConfig:
    base = dict(framework=framework, batch_size=2, seq_len=16, steps=3, warmup=1, seed=3, device="cpu",
                compile=framework != "torch", output_dir=str(tmp_path / framework))
    return RunConfig.for_preset("tiny", **{**base, **changes})


def trained_losses(run: RunConfig) -> list[float]:
    assert run_training(run)["status"] == "ok"
    return [row["loss"] for row in load_steps(Path(run.output_dir))]


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_the_built_step_trains_as_the_engine_does(framework, tmp_path):
    pytest.importorskip(framework)
    run = tiny(framework, tmp_path)
    step = get_engine(framework).build_step(resolve(run))
    assert step.batch.shape == (2, 17)
    losses = [float(step.run(1)[0]) for _ in range(run.steps)]
    assert losses == trained_losses(run)
    assert step.plan.recipe.name == "bf16" and step.details["attention"] in ("xla", "flash", "math", "efficient")


def test_the_jax_step_shows_its_hlo_before_and_after_xla(tmp_path):
    pytest.importorskip("jax")
    step = get_engine("jax").build_step(resolve(tiny("jax", tmp_path, recipe="flax-fp8-delayed", precision=None)))
    before, after = step.lowered.as_text(), step.fn.as_text()
    assert "f8E4M3FN" in before and "f8e4m3fn" in after  # the recipe's fp8 operands, as jax_fp8_hlo.py counts
    assert len(step.state) == 3 and np.isfinite(float(step.run(1)[0]))


def test_a_step_of_several_devices_or_of_maxtext_is_refused(tmp_path):
    with pytest.raises(ParallaxError, match="build_step builds the step of one device; the plan has --gpus 2"):
        get_engine("torch").build_step(resolve(tiny("torch", tmp_path, gpus=2)))
    with pytest.raises(ParallaxError, match="the maxtext engine builds no step of its own here"):
        get_engine("maxtext").build_step(None)
