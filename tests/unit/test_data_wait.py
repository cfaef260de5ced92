"""Each step's data wait (``StepRecord.data_wait_ms``, docs/timing.md): recorded by the torch and
JAX engines on tiny CPU runs, summarised in run.json as steps.jsonl holds it, and a planted slow
source makes a real run input-bound (``analysis.comparability.input_bound``)."""

from __future__ import annotations

import statistics
import time

import pytest

from parallax.analysis import comparability
from parallax.data.source import make_batch_source
from parallax.run import train
from parallax.spec.config import RunConfig
from parallax.store import results

SLOW_S = 0.2  # the planted source's sleep before each batch


class SlowSource:
    """The run's own batch source, sleeping ``SLOW_S`` before each training batch."""

    def __init__(self, inner):
        self.inner, self.description = inner, inner.description

    def __iter__(self):
        for batch in self.inner:
            time.sleep(SLOW_S)
            yield batch

    def eval_batches(self):
        return self.inner.eval_batches()

    def close(self) -> None:
        self.inner.close()


def tiny_run(tmp_path, framework: str) -> RunConfig:
    return RunConfig(model="tiny", framework=framework, batch_size=2, seq_len=16, steps=5, warmup=1,
                     compile=framework == "jax", device="cpu", output_dir=str(tmp_path / framework))


def summary_matches_steps(run: RunConfig) -> dict:
    """run.json's timing.data_wait, checked against steps.jsonl's per-step waits."""
    loaded, rows = results.load_run(run.output_dir), results.load_steps(run.output_dir)
    assert loaded["status"] == "ok"
    assert len(rows) == run.steps and all(r["data_wait_ms"] >= 0.0 for r in rows)
    timed = [r for r in rows if r["measured"]]
    wait = loaded["timing"]["data_wait"]
    assert wait["median_ms"] == statistics.median(r["data_wait_ms"] for r in timed)
    assert wait["total_ms"] == pytest.approx(sum(r["data_wait_ms"] for r in timed), rel=1e-12)
    assert wait["mean_ms"] == pytest.approx(wait["total_ms"] / len(timed), rel=1e-12)
    assert wait["fraction"] == pytest.approx(wait["total_ms"] / sum(r["step_ms"] for r in timed), rel=1e-12)
    return loaded


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_tiny_run_records_each_step_s_data_wait_and_its_summary(tmp_path, framework):
    pytest.importorskip(framework)
    run = tiny_run(tmp_path, framework)
    train.run_training(run)
    summary_matches_steps(run)


def test_a_planted_slow_source_makes_a_real_tiny_run_input_bound(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(train, "make_batch_source", lambda run, rank=0, world=1:
                        SlowSource(make_batch_source(run, rank, world)))
    run = tiny_run(tmp_path, "torch")
    train.run_training(run)
    loaded = summary_matches_steps(run)
    assert all(r["data_wait_ms"] >= SLOW_S * 1e3 for r in results.load_steps(run.output_dir))
    reason = comparability.input_bound(loaded)
    assert reason.startswith("input-bound: waited ") and "a step for its batch" in reason
    assert comparability.kept_out(loaded) == reason


def test_a_run_json_without_a_data_wait_is_not_input_bound(tmp_path):
    """Runs written before the data wait was recorded, or whose engine did not see it."""
    record = {"framework": {"name": "torch"}, "timing": {"step_ms": {"mean": 50.0}}}
    assert comparability.input_bound(record) is None
    assert train.data_wait_record([]) is None
