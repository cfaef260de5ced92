"""scripts/regrade_guards.py: a run failed by the quantized-gradient guard, judged again."""

import importlib.util
from pathlib import Path

from parallax.store import results

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "regrade_guards.py"


def load_script():
    spec = importlib.util.spec_from_file_location("regrade_guards", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(run_dir, error, bad_steps):
    steps = [{"step": k, "loss": 5.0, "step_ms": 50.0, "lr": 1e-4, "measured": k >= 1,
              **({"bad_layers": ["layers.0.wq (zero)"]} if k in bad_steps else {})} for k in range(4)]
    measured = {key: {} for key in results.REQUIRED_OK_KEYS}  # a guard failure keeps every measurement
    results.write_run(run_dir, {"status": "failed", "error": error, "config": {"framework": "jax"}, **measured}, steps)


def test_a_run_failed_within_the_grace_steps_is_ok_now_and_says_what_it_was(tmp_path):
    error = "numerics guard: quantized layer gradient all zero or not finite at step 1: layers.0.wq (zero) (1 of 4 steps)"
    write(tmp_path / "a", error, {0, 1})
    assert "ok now (tolerated zero gradients at steps [0, 1])" in load_script().regrade(tmp_path / "a")
    run = results.load_run(tmp_path / "a")
    assert run["status"] == "ok" and run["error"] is None
    assert run["guards"]["regraded"]["was_error"] == error
    assert run["guards"]["tolerated_zero_gradients"] == [{"step": 0, "layers": 1}, {"step": 1, "layers": 1}]
    assert len(results.load_steps(tmp_path / "a")) == 4


def test_later_zero_gradients_and_other_failures_are_left_failed(tmp_path):
    write(tmp_path / "b", "numerics guard: quantized layer gradient all zero ... at step 2", {2, 3})
    assert load_script().regrade(tmp_path / "b").endswith("still fails the guard")
    write(tmp_path / "c", "the loss is not finite from step 2 on", set())
    assert load_script().regrade(tmp_path / "c").endswith("failed, left alone")
    assert results.load_run(tmp_path / "b")["status"] == results.load_run(tmp_path / "c")["status"] == "failed"
