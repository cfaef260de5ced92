"""Cross-framework parity on the CPU in float32 (tiny): the project's acceptance thresholds."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from parallax.analysis import parity  # noqa: E402
from parallax.spec.config import OptimConfig  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines import get_engine  # noqa: E402
from parallax.engines.weights import init_weights  # noqa: E402


@pytest.fixture(scope="module")
def report():
    return parity.run_parity(model="tiny", batch_size=2, seq_len=32, steps=3, seed=0,
                             dtype="float32", device="cpu")


def rows(report) -> dict:
    return {row.quantity: row for row in report.rows}


def test_float32_cpu_parity_meets_the_acceptance_thresholds(report):
    r = rows(report)
    assert r["loss"].max_rel <= 1e-5
    assert r["gradients"].max_rel <= 1e-4
    assert r["logits"].max_rel <= 1e-5
    assert r["losses, 3 steps"].max_rel <= 1e-5
    assert r["params, 3 steps"].max_rel <= 1e-4
    assert r["updates, 3 steps (L2)"].max_rel <= 1e-3
    assert report.gate and report.passed


def test_the_comparison_is_not_vacuous(report):
    r = rows(report)
    # both models really ran and really moved: the losses are near ln(V) and the updates are real
    assert r["gradients"].worst in init_weights(parity.parity_run("tiny", 2, 32, 3, 0, "cpu").model_config, 0)
    assert 0 < r["logits"].max_abs < 1e-5
    assert r["params, 3 steps"].max_abs > 0


def test_an_optimizer_difference_fails_the_gate():
    """The JAX side with a warmup one step shorter (lr 5% higher at each step) must fail."""
    run = parity.parity_run("tiny", 2, 32, 3, 0, "cpu")
    weights = init_weights(run.model_config, 0)
    batches = [synthetic_batch(0, k, 2, 32, run.model_config.vocab_size) for k in range(3)]
    shifted = run.replace(optim=OptimConfig(lr_warmup_steps=run.optim.lr_warmup_steps - 1))
    jax_ref = get_engine("jax").reference_trainer(shifted, weights, "float32", "cpu")
    torch_ref = get_engine("torch").reference_trainer(run, weights, "float32", "cpu")
    result = {row.quantity: row for row in parity.compare(jax_ref, torch_ref, weights, batches,
                                                           parity.TOLERANCES["float32"])}
    assert result["loss"].within and result["gradients"].within  # same weights: forward agrees
    updates = result["updates, 3 steps (L2)"]
    assert not updates.within and updates.max_rel > 1e-2


def test_weights_cross_both_layouts_bit_exactly():
    """canonical -> torch state dict -> canonical -> Flax tree -> canonical gives the same bits."""
    from parallax.spec.config import get_preset
    from parallax.engines.jax.convert import from_flax, to_flax
    from parallax.engines.torch.convert import from_torch_state, to_torch_state

    config = get_preset("tiny")
    weights = init_weights(config, 7)
    through_torch = from_torch_state(config, to_torch_state(config, weights))
    back = from_flax(to_flax(through_torch, config))
    assert set(back) == set(weights)
    for name in weights:
        np.testing.assert_array_equal(back[name], weights[name])


def test_error_measures():
    assert parity.errors(np.array([1.0, 2.0]), np.array([1.0, 4.0])) == (2.0, 0.5)
    assert parity.errors(3.0, 3.0) == (0.0, 0.0)
    assert parity.errors(np.zeros(2), np.zeros(2)) == (0.0, 0.0)
    assert parity.errors(np.ones(2), np.zeros(2)) == (1.0, float("inf"))
    max_abs, l2 = parity.l2_errors(np.array([3.0, 0.0]), np.array([0.0, 4.0]))
    assert (max_abs, l2) == (4.0, 1.25)
    row = parity.tensor_row("t", {"a": np.ones(2), "b": np.ones(2)}, {"a": np.ones(2), "b": 2 * np.ones(2)}, 0.1)
    assert (row.worst, row.max_rel, row.within) == ("b", 0.5, False)


def test_bfloat16_rows_are_report_only():
    assert parity.TOLERANCES["bfloat16"].gate is False and parity.TOLERANCES["float32"].gate is True
    failing = parity.ParityReport({}, [parity.Row("loss", 1.0, 1.0, 1e-3)], gate=False)
    assert failing.passed and not failing.rows[0].within
    assert not parity.ParityReport({}, failing.rows, gate=True).passed


@pytest.mark.gpu
def test_float32_gpu_parity_meets_the_cpu_thresholds():
    report = parity.run_parity(model="tiny", batch_size=2, seq_len=32, steps=3, seed=0, dtype="float32",
                               device="gpu")
    failing = [(row.quantity, row.max_rel, row.tolerance) for row in report.rows if not row.within]
    assert report.passed, failing
