"""``parallax crossover`` with nothing to line up is one line and exit 2, not an empty table and
an empty plot; the output folder it made is not left behind."""

from __future__ import annotations

from fixtures.cli import one_error_line
from fixtures.fake_runs import steps_from, tiny_config, write_ok_run

from parallax.cli import main


def write(root, recipe, fmt, ms):
    run = tiny_config(model="tiny", framework="torch", precision=fmt, recipe=recipe, seq_len=32)
    steps = steps_from([500.0, 300.0] + [ms] * 10, [9.0, 8.0] + [3.0] * 10, run.warmup)
    return write_ok_run(root / "runs" / f"torch-{recipe}-seed0-rep0", run, steps)


def test_a_benchmark_of_bf16_only_has_nothing_to_line_up(tmp_path, capsys):
    write(tmp_path / "a", "bf16", "bf16", 100.0)
    assert main(["crossover", str(tmp_path / "a"), "--output-dir", str(tmp_path / "o"), "--bootstraps", "200"]) == 2
    assert one_error_line(capsys) == (
        f"parallax: error: no speedup over bf16 to line up in {tmp_path}/a; each holds no low-precision recipe "
        "beside its framework's bf16; benchmark both, e.g. parallax benchmark --precisions bf16,fp8")
    assert not (tmp_path / "o").exists()


def test_a_truncated_run_that_leaves_nothing_is_named(tmp_path, capsys):
    write(tmp_path / "b", "bf16", "bf16", 100.0)
    write(tmp_path / "b", "torchao-fp8-tensorwise", "fp8", 125.0)
    cell = tmp_path / "b" / "runs" / "torch-torchao-fp8-tensorwise-seed0-rep0" / "run.json"
    cell.write_text(cell.read_text()[:50])
    (tmp_path / "o").mkdir()  # a folder that was there stays
    assert main(["crossover", str(tmp_path / "b"), "--output-dir", str(tmp_path / "o"), "--bootstraps", "200"]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"parallax: error: no speedup over bf16 to line up in {tmp_path}/b; first problem: "
                           f"{cell}: corrupt or truncated JSON")
    assert list((tmp_path / "o").iterdir()) == []
