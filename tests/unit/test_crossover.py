"""The crossover record and report: speedups over bf16 lined up by model size."""

from __future__ import annotations

import json

import pytest

from fixtures.cli import one_error_line
from fixtures.fake_runs import steps_from, tiny_config, write_ok_run

from parallax.cli import main
from parallax.spec.config import get_preset

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
    assert "| torch | torchao-fp8-tensorwise | bf16 | llama-330m | 328,811,520 | 1.250× (1.250×–1.250×) | faster | synthetic | cpu ? | 1 |" in text
    assert "| torch | torchao-fp8-tensorwise | bf16 | tiny | 1,362,240 | 0.800× (0.800×–0.800×) | slower | synthetic | cpu ? | 2 |" in text
    assert f"1. `{large}`" in text and f"2. `{small}`" in text
    assert (out / "crossover.png").stat().st_size > 5000
    printed = capsys.readouterr().out  # a table for the terminal; the Markdown is in crossover.md
    assert "Speedup over bf16 against model size" in printed and "Where low precision" not in printed
    assert "Speedup (CI): 1.250× (1.250×–1.250×)" in " ".join(printed.split())


def test_a_preset_may_combine_benchmarks_each_speedup_from_its_own(two_sizes, tmp_path):
    """A later benchmark measures what the first lacked beside fresh bf16 twins (another machine,
    here 5% slower in both cells): each speedup stays within its own benchmark."""
    small, large = two_sizes
    later = tmp_path / "later"
    write(later, "llama-330m", "torch", "bf16", "bf16", 105.0)
    write(later, "llama-330m", "torch", "torchao-fp8-rowwise", "fp8", 84.0)
    write(later, "llama-330m", "jax", "bf16", "bf16", 100.0)
    write(later, "llama-330m", "jax", "flax-fp8-direct", "fp8", 90.0)
    out = tmp_path / "out"
    assert main(["crossover", str(small), str(large), str(later), "--output-dir", str(out), "--bootstraps", "200"]) == 0
    record = json.loads((out / "crossover.json").read_text())
    assert [m["model"] for m in record["models"]] == ["tiny", "llama-330m"]
    rows = [(r["model"], r["framework"], r["recipe"], round(r["ratio"], 3), r["results_dir"]) for r in record["rows"]]
    assert rows == [("llama-330m", "jax", "flax-fp8-direct", round(100 / 90, 3), str(later)),
                    ("llama-330m", "torch", "torchao-fp8-rowwise", 1.25, str(later)),
                    ("tiny", "torch", "torchao-fp8-tensorwise", 0.8, str(small)),
                    ("llama-330m", "torch", "torchao-fp8-tensorwise", 1.25, str(large))]
    text = (out / "crossover.md").read_text()
    assert "| torch | torchao-fp8-rowwise | bf16 | llama-330m | 328,811,520 | 1.250× (1.250×–1.250×) | faster | synthetic | cpu ? | 3 |" in text


def test_one_folder_named_twice_is_refused(two_sizes, tmp_path, capsys, monkeypatch):
    small, _ = two_sizes
    monkeypatch.chdir(tmp_path)
    assert main(["crossover", str(small), "./small", "--output-dir", str(tmp_path / "o")]) == 2
    assert one_error_line(capsys) == f"parallax: error: the results folder {small} is named twice; name each folder once"
    assert not (tmp_path / "o" / "crossover.json").exists()


def test_a_speedup_measured_in_two_folders_is_refused(two_sizes, tmp_path, capsys):
    small, _ = two_sizes
    again = tmp_path / "again"
    write(again, "tiny", "torch", "bf16", "bf16", 100.0)
    write(again, "tiny", "torch", "torchao-fp8-tensorwise", "fp8", 120.0)
    assert main(["crossover", str(small), str(again), "--output-dir", str(tmp_path / "o")]) == 2
    assert one_error_line(capsys) == (
        f"parallax: error: tiny: torch torchao-fp8-tensorwise over bf16 is in both {small} and {again}; "
        "give each speedup's cells in one folder")
    assert not (tmp_path / "o" / "crossover.json").exists()


def test_the_plot_draws_one_line_per_recipe_and_baseline():
    """te-fp8-delayed over bf16 and over te-bf16 are two curves: one line through both zigzags."""
    from parallax.analysis.report.crossover import _line_key, _line_label

    rows = [{"framework": "jax", "recipe": "te-fp8-delayed", "baseline": b, "gpus": 1} for b in ("bf16", "te-bf16")]
    assert len({_line_key(r) for r in rows}) == 2
    assert [_line_label(*_line_key(r)) for r in rows] == ["jax te-fp8-delayed", "jax te-fp8-delayed / te-bf16"]
    assert _line_label("torch", "te-fp8-delayed", "te-bf16", 2) == "torch te-fp8-delayed / te-bf16 ×2 GPUs"
