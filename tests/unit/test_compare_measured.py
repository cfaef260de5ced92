"""Which steps of a run the comparison times: rows flagged ``measured``, and for steps.jsonl rows
without that key (files written before it existed) every step at index >= the run's warmup."""

from __future__ import annotations

from pathlib import Path

from fixtures.fake_runs import ok_run, steps_from, tiny_config

from parallax.analysis import compare
from parallax.store.results import write_run

WARMUP = 3
WARMUP_MS = [900.0, 800.0, 700.0]
MEASURED_MS = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]  # steps 3..9: median 40, mean 40
TOKENS = 4 * 32  # tiny_config: batch 4 x seq 32


def write_unflagged_run(run_dir: Path) -> Path:
    """An ok torch bf16 run of 10 steps, warmup 3, whose steps.jsonl rows lack ``measured``."""
    run = tiny_config(framework="torch", precision="bf16", recipe="bf16", steps=10, warmup=WARMUP,
                      output_dir=str(run_dir))
    steps = steps_from(WARMUP_MS + MEASURED_MS, [9.0 - 0.1 * i for i in range(10)], WARMUP)
    record = ok_run(run, steps)  # its summary over steps 3..9, as train writes it
    unflagged = [{k: v for k, v in s.items() if k != "measured"} for s in steps]
    write_run(run_dir, record, unflagged)
    return run_dir


def test_rows_without_a_measured_flag_count_from_the_warmup_index_on(tmp_path):
    run_dir = write_unflagged_run(tmp_path / "runs" / "torch-bf16-seed0-rep0")
    (loaded,), corrupt = compare.load_results(tmp_path)
    assert corrupt == []
    assert all("measured" not in s for s in loaded.steps) and len(loaded.steps) == 10
    assert loaded.run_dir == run_dir
    # index 3 (10 ms) is the first measured step; 0..2 are the warmup
    assert compare._measured(loaded) == MEASURED_MS
    direct = compare.LoadedRun(run_dir, loaded.run, loaded.steps)
    assert compare._measured(direct) == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]


def test_the_comparison_times_the_seven_steps_after_the_warmup(tmp_path):
    write_unflagged_run(tmp_path / "runs" / "torch-bf16-seed0-rep0")
    record = compare.build_comparison(tmp_path, n_boot=50)
    (cell,) = record["cells"]
    assert (cell["framework"], cell["recipe"], cell["status"]) == ("torch", "bf16", "ok")
    # numpy's linear percentiles of 10..70 in steps of 10: p10 at rank 0.6, p90 at rank 5.4
    assert cell["step_ms"] == {"median": 40.0, "p10": 16.0, "p90": 64.0, "mean": 40.0, "count": 7}
    assert cell["tokens_per_s"]["value"] == TOKENS * 1000.0 / 40.0 == 3200.0
    assert cell["tokens_per_s_runs"] == [3200.0]
