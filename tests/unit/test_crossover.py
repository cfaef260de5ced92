"""The crossover record and report: speedups over bf16 lined up by model size."""

from __future__ import annotations

import json

import pytest

from fixtures.cli import one_error_line
from fixtures.fake_runs import steps_from, tiny_config, write_ok_run

from parallax.cli import main
from parallax.config import get_preset

WARMUP_MS = [500.0, 300.0]


def write(root, model, framework, recipe, fmt, ms):
    run = tiny_config(model=model, framework=framework, precision=fmt, recipe=recipe, seq_len=32)
    steps = steps_from(WARMUP_MS + [ms] * 10, [9.0, 8.0] + [3.0] * 10, run.warmup)
    return write_ok_run(root / "runs" / f"{framework}-{recipe}-seed0-rep0", run, steps)


@pytest.fixture
def two_sizes(tmp_path):
    """tiny: fp8 slower than bf16 (0.8x); llama-330m: fp8 faster (1.25x) — the crossover."""
    small, large = tmp_path / "small", tmp_path / "large"
    write(small, "tiny", "torch", "bf16", "bf16", 100.0)
    write(small, "tiny", "torch", "torchao-fp8-tensorwise", "fp8", 125.0)
    write(large, "llama-330m", "torch", "bf16", "bf16", 100.0)
    write(large, "llama-330m", "torch", "torchao-fp8-tensorwise", "fp8", 80.0)
    return small, large


def test_crossover_lines_up_each_recipe_by_model_size(two_sizes, tmp_path, capsys):
    small, large = two_sizes
    out = tmp_path / "out"
    assert main(["crossover", str(large), str(small), "--output-dir", str(out), "--bootstraps", "200"]) == 0
    record = json.loads((out / "crossover.json").read_text())
    assert [m["model"] for m in record["models"]] == ["tiny", "llama-330m"]  # by size
    assert record["models"][1]["parameters"] == get_preset("llama-330m").param_count() == 328_811_520
    rows = [(r["model"], r["recipe"], r["baseline"], round(r["ratio"], 3)) for r in record["rows"]]
    assert rows == [("tiny", "torchao-fp8-tensorwise", "bf16", 0.8), ("llama-330m", "torchao-fp8-tensorwise", "bf16", 1.25)]
    text = (out / "crossover.md").read_text()
    assert "| torch | torchao-fp8-tensorwise | bf16 | llama-330m | 328,811,520 | 1.250× (1.250×–1.250×) | faster |" in text
    assert "| torch | torchao-fp8-tensorwise | bf16 | tiny | 1,362,240 | 0.800× (0.800×–0.800×) | slower |" in text
    assert (out / "crossover.png").stat().st_size > 5000
    assert "Where low precision starts to pay" in capsys.readouterr().out


def test_two_folders_of_one_model_are_refused(two_sizes, tmp_path, capsys):
    small, _ = two_sizes
    assert main(["crossover", str(small), str(small), "--output-dir", str(tmp_path / "o")]) == 2
    assert "two results folders hold the model 'tiny'; give one folder per model preset" in one_error_line(capsys)
