"""``parallax benchmark --plan`` and ``--list-plans`` through the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.cli import one_error_line
from fixtures.matrix import fake_command

from parallax.run import runner
from parallax.cli import main

TINY_PLAN = """# a tiny plan for the CPU
description = "tiny torch bf16 and fp8"
protocol = "throughput"
frameworks = ["torch"]
precisions = ["bf16", "fp8"]
{model}
batch_size = 2
seq_len = 32
steps = {steps}
warmup = 2
seeds = [0]
data = "synthetic"
compile = false
timeout_per_run = 300
report = true
"""


@pytest.fixture
def fake_trainer(monkeypatch):
    """Cells run the fake trainer instead of ``parallax train`` (as in test_benchmark_cli.py)."""
    monkeypatch.setattr(runner, "train_command", fake_command)
    monkeypatch.setattr(runner, "collect_environment", lambda: {"python": "3.x", "gpus": []})
    monkeypatch.setenv("FAKE_TRAIN_PLAN", "{}")


def tiny_plan(tmp_path: Path, model: str = 'model = "tiny"', steps: int = 6) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PLAN.format(model=model, steps=steps))
    return path


def test_list_plans_prints_each_plan_wrapped_to_the_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["benchmark", "--list-plans"]) == 0
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert [line.split()[0] for line in lines] == ["blackwell-formats", "convergence", "crossover", "curves",
                                                     "fp8-attention", "fp8-attn-long", "fp8-matrix", "nvfp4-emulation",
                                                     "nvfp4-long", "three-frameworks", "tuning"]
    assert lines[2] == ("crossover          torch TE bf16 vs TE fp8 at llama-100m, -330m and -860m: where fp8 "
                        "starts to pay")
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["benchmark", "--list-plans"]) == 0
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    assert lines[5:7] == ["crossover          torch TE bf16 vs TE fp8 at llama-100m, -330m and -860m:",
                          "                   where fp8 starts to pay"]


@pytest.mark.parametrize("args, message", [
    (["--plan", "fp9"], "parallax: error: unknown plan 'fp9'; choose one of: blackwell-formats, convergence, "
                        "crossover, curves, "
                        "fp8-attention, fp8-attn-long, fp8-matrix, nvfp4-emulation, nvfp4-long, three-frameworks, "
                        "tuning (or give a .toml file)"),
    (["--plan", "fp8-matrix"], "parallax: error: plan 'fp8-matrix' trains on a prepared token folder; give --data DIR "
                               "(see 'parallax data prepare')"),
])
def test_a_bad_plan_name_or_missing_data_is_one_line_and_exit_2(tmp_path, capsys, fake_trainer, args, message):
    assert main(["benchmark", *args, "--output-dir", str(tmp_path / "out")]) == 2
    assert one_error_line(capsys) == message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change, message", [
    (("steps = 6", "steps = \"6\""), "tiny.toml: 'steps' must be an integer, got '6'"),
    (("warmup = 2", "warmup = 2\nwarmups = 3"), "tiny.toml: unknown key 'warmups'; remove it"),
    (("seq_len = 32", "seq_len = "), "tiny.toml:8: not valid TOML"),
    (("warmup = 2", "warmup = 6"), "--steps (6) must be greater than --warmup (6)"),  # the benchmark's own check
])
def test_a_bad_plan_file_is_one_line_before_any_cell(tmp_path, capsys, fake_trainer, change, message):
    path = tiny_plan(tmp_path)
    path.write_text(path.read_text().replace(*change))
    assert main(["benchmark", "--plan", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys)
    assert line.startswith("parallax: error: ") and message in line
    assert not (tmp_path / "out" / "runs").exists()


def test_a_plan_runs_its_matrix_and_an_option_given_wins(tmp_path, capsys, fake_trainer):
    out = tmp_path / "out"
    assert main(["benchmark", "--plan", str(tiny_plan(tmp_path)), "--steps", "8", "--device", "cpu",
                 "--output-dir", str(out)]) == 0
    matrix = json.loads((out / "matrix.json").read_text())
    assert (matrix["frameworks"], matrix["seeds"], matrix["mode"], matrix["run"]["model"]) == (
        ["torch"], [0], "throughput", "tiny")
    assert (matrix["run"]["steps"], matrix["run"]["warmup"], matrix["run"]["batch_size"],
            matrix["run"]["compile"], matrix["run"]["synthetic"]) == (8, 2, 2, False, True)
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["torch-bf16-seed0-rep0",
                                                               "torch-te-fp8-delayed-seed0-rep0"]
    assert (out / "report.md").is_file()  # report = true


def test_a_plan_of_presets_runs_one_benchmark_per_preset_in_its_folder(tmp_path, capsys, fake_trainer):
    plan = tiny_plan(tmp_path, model='presets = ["tiny"]')
    out = tmp_path / "xo"
    assert main(["benchmark", "--plan", str(plan), "--device", "cpu", "--output-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["tiny"]
    assert json.loads((out / "tiny" / "matrix.json").read_text())["run"]["model"] == "tiny"


def test_a_tiny_plan_runs_end_to_end_on_the_cpu(tmp_path):
    """A plan file through real `parallax train` processes (torch on the CPU, fp8 skipped there)."""
    pytest.importorskip("torch")
    out = tmp_path / "bench"
    plan = tiny_plan(tmp_path)
    plan.write_text(plan.read_text().replace('precisions = ["bf16", "fp8"]', 'precisions = ["bf16"]'))
    proc = subprocess.run([sys.executable, "-m", "parallax", "benchmark", "--plan", str(plan), "--device", "cpu",
                           "--output-dir", str(out)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((out / "report.json").read_text())
    assert [(c["framework"], c["recipe"], c["status"]) for c in saved["cells"]] == [("torch", "bf16", "ok")]
    steps = (out / "runs" / "torch-bf16-seed0-rep0" / "steps.jsonl").read_text().splitlines()
    assert len(steps) == 6 and saved["cells"][0]["step_ms"]["count"] == 4
    assert saved["config"]["compiled"] == {"torch": False}
