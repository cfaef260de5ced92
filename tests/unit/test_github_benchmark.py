"""``parallax compare --format github-benchmark``: github-action-benchmark's custom JSON, fed two
benchmarks of different commits (the second's torch fp8 cell slower), validated field by field."""

from __future__ import annotations

import json

import pytest

from fixtures.fake_runs import steps_from, tiny_config, write_ok_run

from parallax.analysis.compare import build_comparison
from parallax.analysis.report import github_benchmark
from parallax.cli import main
from parallax.spec import registry

WARMUP = [500.0, 300.0]


def benchmark(root, fp8_ms: float):
    """torch bf16 at 100 ms a step, torch fp8 at ``fp8_ms`` (seed 0 1% faster, seed 1 1% slower),
    two seeds each; the bf16 cell has a peak, so it has an MFU."""
    for precision, ms, peaks in (("bf16", 100.0, (0.1, 0.1, None)), ("fp8", fp8_ms, (None, None, None))):
        recipe = registry.default("torch", precision).name
        for seed in (0, 1):
            run = tiny_config(framework="torch", precision=precision, recipe=recipe, seed=seed)
            times = [ms * (0.99 if seed == 0 else 1.01)] * 10  # pooled median: ms
            steps = steps_from(WARMUP + times, [9.0, 8.0] + [3.0] * 10, run.warmup)
            write_ok_run(root / "runs" / f"torch-{recipe}-seed{seed}-rep0", run, steps, peaks=peaks)
    return root


def check_fields(entries: list[dict]) -> None:
    """Each entry has exactly the format's fields, of the format's types."""
    for e in entries:
        assert set(e) == set(github_benchmark.FIELDS)
        assert isinstance(e["name"], str) and isinstance(e["unit"], str) and isinstance(e["extra"], str)
        assert isinstance(e["value"], float) and isinstance(e["range"], str)


def exported(capsys, results, out) -> dict[str, list[dict]]:
    code = main(["compare", "--results-dir", str(results), "--bootstraps", "200",
                 "--format", "github-benchmark", "--export-dir", str(out)])
    assert code == 0, capsys.readouterr().err
    return {tool: json.loads((out / name).read_text()) for tool, name in github_benchmark.FILES.items()}


def test_two_commits_chart_as_one_line_per_cell_and_show_the_regression(tmp_path, capsys):
    before = exported(capsys, benchmark(tmp_path / "a", 80.0), tmp_path / "out-a")
    after = exported(capsys, benchmark(tmp_path / "b", 90.0), tmp_path / "out-b")
    for found in (before, after):
        check_fields(found[github_benchmark.BIGGER])
        check_fields(found[github_benchmark.SMALLER])
    names = {tool: [e["name"] for e in found] for tool, found in before.items()}
    assert names == {tool: [e["name"] for e in found] for tool, found in after.items()}  # the same series
    fp8 = registry.default("torch", "fp8").name
    bigger = {e["name"]: e for e in after[github_benchmark.BIGGER]}
    b16, where = bf16_recipe(), machine(after)
    assert set(bigger) == {f"torch {b16} · tiny · {where}: tokens/s", f"torch {fp8} · tiny · {where}: tokens/s",
                           f"torch {b16} · tiny · {where}: MFU"}
    smaller_before = {e["name"]: e for e in before[github_benchmark.SMALLER]}
    smaller_after = {e["name"]: e for e in after[github_benchmark.SMALLER]}
    step = f"torch {fp8} · tiny · {machine(after)}: step time"
    assert smaller_before[step]["value"] == pytest.approx(80.0) and smaller_after[step]["value"] == pytest.approx(90.0)
    assert smaller_after[step]["unit"] == "ms"
    tps = bigger[f"torch {fp8} · tiny · {machine(after)}: tokens/s"]
    assert tps["unit"] == "tokens/s" and tps["value"] == pytest.approx(4 * 32 * 1000 / 90.0)
    assert tps["extra"] == "2 of 2 runs ok; 20 measured steps"


def test_the_range_is_the_records_interval(tmp_path):
    record = build_comparison(benchmark(tmp_path, 80.0), n_boot=200)
    found = github_benchmark.entries(record)
    cell = next(c for c in record["cells"] if c["precision"] == "fp8")
    low, high = cell["tokens_per_s"]["ci"]
    assert low < high
    name = github_benchmark.cell_name(cell, "tiny")
    tps = next(e for e in found[github_benchmark.BIGGER] if e["name"] == f"{name}: tokens/s")
    assert tps["range"] == f"95% CI {low:.6g} to {high:.6g}"
    step = next(e for e in found[github_benchmark.SMALLER] if e["name"] == f"{name}: step time")
    tokens = cell["tokens_per_step"]
    assert step["range"] == f"95% CI {tokens * 1e3 / high:.6g} to {tokens * 1e3 / low:.6g}"
    mfu = next(e for e in found[github_benchmark.BIGGER] if e["name"].endswith(": MFU"))
    bf16 = next(c for c in record["cells"] if c["precision"] == "bf16")
    assert mfu["value"] == pytest.approx(100 * bf16["flops"]["spec"]["mfu_precision_peak"])


def test_export_dir_without_the_format_is_refused(tmp_path, capsys):
    from fixtures.cli import one_error_line

    code = main(["compare", "--results-dir", str(benchmark(tmp_path, 80.0)), "--export-dir", str(tmp_path / "x")])
    assert code == 2
    assert "--export-dir goes with --format github-benchmark" in one_error_line(capsys)


def bf16_recipe() -> str:
    return registry.default("torch", "bf16").name


def machine(found: dict) -> str:
    """The machine part of the names (the fake runs' label)."""
    return found[github_benchmark.SMALLER][0]["name"].split(" · ")[2].split(":")[0]


def test_format_json_prints_the_record_alone(tmp_path, capsys):
    results = benchmark(tmp_path, 80.0)
    assert main(["compare", "--results-dir", str(results), "--bootstraps", "200", "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(build_comparison(results, n_boot=200)))
