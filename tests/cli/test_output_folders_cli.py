"""Every command that takes an output folder makes it when it writes there, not when it checks
it: a refusal leaves the file system as it was (``parallax train``'s own cases are in
test_train_keeps_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.cli import one_error_line
from fixtures.fake_runs import steps_from, tiny_config, write_ok_run
from fixtures.matrix import fake_command

from parallax.cli import main
from parallax.run import runner
from parallax.store import results

BENCH = ["benchmark", "--frameworks", "torch", "--precisions", "bf16", "--model", "tiny", "--steps", "12",
         "--warmup", "2", "--device", "cpu", "--no-compile"]


def tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.fixture
def fake_cells(monkeypatch):
    monkeypatch.setattr(runner, "train_command", fake_command)
    monkeypatch.setattr(runner, "collect_environment", lambda: {"python": "3.x", "gpus": []})
    monkeypatch.setenv("FAKE_TRAIN_PLAN", "{}")


def test_checking_a_folder_makes_nothing(tmp_path):
    assert results.writable_output_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--repeats", "0"], ["--timeout-per-run", "0"]])
def test_a_refused_benchmark_leaves_no_folder(tmp_path, capsys, fake_cells, args):
    assert main([*BENCH, "--output-dir", str(tmp_path / "new" / "bench"), *args]) == 2
    one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_benchmark_refused_beside_its_results_changes_nothing(tmp_path, capsys, fake_cells):
    out = tmp_path / "bench"
    assert main([*BENCH, "--output-dir", str(out)]) == 0
    capsys.readouterr()
    before = tree(tmp_path)
    assert main([*BENCH, "--output-dir", str(out)]) == 2
    assert "already holds results of this benchmark; add --resume" in one_error_line(capsys)
    assert tree(tmp_path) == before


def test_a_refused_comparison_makes_no_report_folder(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    assert main(["compare", "--results-dir", str(tmp_path / "results"),
                 "--output-report", str(tmp_path / "new" / "report.md"), "--plots-dir", str(tmp_path / "plots")]) == 2
    assert "holds no readable run.json" in one_error_line(capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["results"]


def test_a_refused_crossover_makes_no_folder(tmp_path, capsys):
    run = tiny_config(framework="torch", precision="bf16", recipe="bf16")
    write_ok_run(tmp_path / "a" / "runs" / "torch-bf16-seed0-rep0", run, steps_from([1.0] * 12, [1.0] * 12, 2))
    before = tree(tmp_path)
    assert main(["crossover", str(tmp_path / "a"), "--output-dir", str(tmp_path / "new" / "o")]) == 2
    assert "no speedup over bf16 to line up" in one_error_line(capsys)
    assert tree(tmp_path) == before


def test_export_configs_makes_its_folder_only_to_write(tmp_path, capsys):
    out = tmp_path / "new" / "configs"
    assert main(["export-configs", "--output-dir", str(out), "--base-yml", str(tmp_path / "none.yml")]) == 2
    assert "no such file" in one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []
    assert main(["export-configs", "--output-dir", str(out), "--recipes", "bf16", "--model", "tiny"]) == 0
    assert [p.name for p in out.iterdir()] == ["maxtext-tiny-bf16.yml"]


@pytest.mark.parametrize("extra, message", [
    ([], "too few to hold out"),  # refused before anything is tokenized
    (["--valid-fraction", "0.5", "--tokenizer", "{tmp}/tok.json"], "not a Hugging Face tokenizer.json"),  # while building
])
def test_a_refused_preparation_leaves_no_folder(tmp_path, capsys, extra, message):
    pytest.importorskip("tokenizers")
    (tmp_path / "corpus.txt").write_text("Once upon a time there was a cat.\n<|endoftext|>\nThe end.\n")
    (tmp_path / "tok.json").write_text("{}")
    before = tree(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    assert main(["data", "prepare", str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "new" / "o"), *args]) == 2
    assert message in one_error_line(capsys)
    assert tree(tmp_path) == before
