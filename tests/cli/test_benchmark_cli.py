"""``parallax benchmark`` and ``parallax compare`` through the real command line."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.cli import one_error_line
from fixtures.matrix import fake_command

from parallax.run import runner
from parallax.cli import defaults, main
from parallax.spec.config import PRESET_SIZES, PRESETS

TINY = ["--model", "tiny", "--batch-size", "4", "--seq-len", "32", "--steps", "12", "--warmup", "2",
        "--no-compile", "--device", "cpu"]


@pytest.fixture
def fake_trainer(monkeypatch):
    """Cells run the fake trainer instead of ``parallax train``; the plan sets their outcomes."""
    monkeypatch.setattr(runner, "train_command", fake_command)
    monkeypatch.setattr(runner, "collect_environment", lambda: {"python": "3.x", "gpus": []})

    def plan(**modes):
        monkeypatch.setenv("FAKE_TRAIN_PLAN", json.dumps({k.replace("_", "-"): v for k, v in modes.items()}))

    plan()
    return plan


@pytest.mark.parametrize("args, message", [
    (["--frameworks", "torch,mxt"], "unknown framework 'mxt'; choose one of: torch, jax, maxtext"),
    (["--recipes", "te-fp9"], "no framework of torch, jax has a recipe 'te-fp9'"),
    (["--max-loss-gap", "0"], "--max-loss-gap must be positive"),
    (["--precisions", "bf16,int8"], "unknown precision 'int8'; choose one of: bf16, fp8, mxfp8, nvfp4, mxfp4"),
    (["--precisions", ","], "--precisions is empty"),
    (["--seeds", "0,x"], "--seeds must be comma-separated integers, got '0,x'"),
    (["--synthetic", "--hf"], "choose one of --synthetic, --hf and --data PATH"),
    (["--repeats", "0"], "--repeats must be at least 1, got 0"),
    (["--timeout-per-run", "0"], "--timeout-per-run must be positive"),
    (["--steps", "2", "--warmup", "2"], "--steps (2) must be greater than --warmup (2)"),
    (["--cuda-graphs", "yes"], "Invalid value for '--cuda-graphs': 'yes' is not one of 'auto', 'on', 'off'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    argv = ["benchmark", *TINY, "--output-dir", str(tmp_path / "out"), *args]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert line.startswith("parallax: error: ") and message in line
    assert not (tmp_path / "out" / "runs").exists()


def test_benchmark_with_report(tmp_path, capsys, fake_trainer):
    fake_trainer(jax_fp8="skip")
    out = tmp_path / "out"
    assert main(["benchmark", *TINY, "--frameworks", "torch,jax", "--precisions", "bf16,fp8",
                 "--output-dir", str(out), "--report"]) == 0
    captured = capsys.readouterr()
    assert "Benchmark" in captured.out and "torch: te-fp8-delayed over bf16" in captured.out
    assert "skipped jax flax-fp8-delayed seed 0 rep 0" in captured.err
    assert "cells: 3 ok, 1 skipped" in captured.err
    # no terminal: each cell says how far it got, as plain lines (the fake's rate-limited progress
    # file holds its first step only)
    assert "  torch bf16 seed 0 rep 0: compiling" in captured.err.splitlines()
    assert "  torch bf16 seed 0 rep 0: step 1/12  loss 8.9940  81.5 ms" in captured.err.splitlines()
    for name in ("report.md", "report.csv", "report.json", "plots/loss.png", "plots/throughput.png",
                 "plots/memory.png", "index.json", "matrix.json", "environment.json"):
        assert (out / name).exists(), name
    report = (out / "report.md").read_text()
    # no peak for MFU without a GPU: no empty frame, a line saying why
    assert not (out / "plots" / "mfu.png").exists()
    assert "- MFU: not plotted, MFU n/a: no known peak for this device (use --peak-tflops)." in report
    assert "| jax | fp8 flax-fp8-delayed | skipped |" in report and "![Throughput (95% CI)](plots/throughput.png)" in report


@pytest.mark.parametrize("value", ["auto", "on", "off"])
def test_cuda_graphs_is_part_of_the_matrix_and_of_each_cells_config(tmp_path, capsys, fake_trainer, value):
    out = tmp_path / "out"
    assert main(["benchmark", *TINY, "--frameworks", "torch,jax", "--precisions", "bf16,fp8",
                 "--output-dir", str(out), "--cuda-graphs", value]) == 0
    assert json.loads((out / "matrix.json").read_text())["run"]["cuda_graphs"] == value
    cells = {p.name: json.loads((p / "run.json").read_text())["config"]["cuda_graphs"]
             for p in (out / "runs").iterdir()}
    without = "off" if value == "on" else value  # the cells whose recipe has no capture
    assert cells == {"torch-bf16-seed0-rep0": without, "torch-te-fp8-delayed-seed0-rep0": value,
                     "jax-bf16-seed0-rep0": without, "jax-flax-fp8-delayed-seed0-rep0": without}


def test_a_crashed_cell_makes_exit_1_and_the_rest_still_runs(tmp_path, capsys, fake_trainer):
    fake_trainer(torch_bf16="crash")
    out = tmp_path / "out"
    assert main(["benchmark", *TINY, "--precisions", "bf16", "--output-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert "failed torch bf16 seed 0 rep 0" in err and "exit code 1: RuntimeError: boom" in err
    assert json.loads((out / "index.json").read_text())["counts"]["ok"] == 1


def test_rerun_needs_resume_and_resume_runs_nothing_twice(tmp_path, capsys, fake_trainer, monkeypatch):
    out = tmp_path / "out"
    argv = ["benchmark", *TINY, "--precisions", "bf16", "--output-dir", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2
    assert "already holds results of this benchmark; add --resume" in one_error_line(capsys)
    assert main([*argv[:-2], "--output-dir", str(out), "--steps", "10"]) == 2
    assert "different benchmark configuration (differs in: run.steps 12 → 10)" in one_error_line(capsys)
    calls = tmp_path / "calls"
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))
    assert main([*argv, "--resume"]) == 0
    assert "resuming: 2 of 2 cells already have a result" in capsys.readouterr().err
    assert not calls.exists()


def test_compare_writes_report_and_ratios_to_a_baseline(tmp_path, capsys, fake_trainer):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert main(["benchmark", *TINY, "--precisions", "bf16", "--output-dir", str(d)]) == 0
    (a / "runs" / "extra").mkdir()
    (a / "runs" / "extra" / "run.json").write_text("{not json")
    capsys.readouterr()
    report = tmp_path / "cmp" / "report.md"
    assert main(["compare", "--results-dir", str(a), "--baseline", str(b), "--output-report", str(report),
                 "--bootstraps", "200"]) == 2  # the report is written; the corrupt file makes the exit 2
    captured = capsys.readouterr()
    assert "Against the baseline" in captured.out and "1.000× (1.000×–1.000×)" in captured.out  # in the terminal
    err = captured.err.strip().splitlines()
    assert err[0].startswith(f"parallax: warning: {a / 'runs' / 'extra' / 'run.json'}: corrupt or truncated JSON")
    assert err[-1].startswith("parallax: error: 1 corrupt result file(s), named above, were left out of the report")
    text = report.read_text()
    assert "## Against the baseline" in text and "1.000× (1.000×–1.000×)" in text  # same fake numbers
    assert "## Problems" in text
    assert (tmp_path / "cmp" / "plots" / "loss.png").exists() and (tmp_path / "cmp" / "report.csv").exists()


def test_plain_benchmark_on_a_cpu_runs_tiny_at_its_own_sizes(tmp_path, capsys, fake_trainer, monkeypatch):
    """No --model: 'auto' (as in train): tiny at 8 × 128 on the CPU, said in one line."""
    monkeypatch.setattr(defaults, "gpu_found", lambda: False)
    out = tmp_path / "out"
    assert main(["benchmark", "--frameworks", "torch", "--precisions", "bf16", "--steps", "4", "--warmup", "1",
                 "--output-dir", str(out)]) == 0
    err = capsys.readouterr().err
    assert ("parallax: no NVIDIA GPU found; benchmarking the 'tiny' preset on the CPU (batch 8, seq 128) "
            "instead of llama-100m") in err.splitlines()
    run = json.loads((out / "matrix.json").read_text())["run"]
    assert (run["model"], run["batch_size"], run["seq_len"], run["device"]) == ("tiny", 8, 128, "cpu")


def test_benchmark_accepts_model_auto_and_a_preset_alone(tmp_path, capsys, fake_trainer, monkeypatch):
    monkeypatch.setattr(defaults, "gpu_found", lambda: True)
    base = ["benchmark", "--frameworks", "torch", "--precisions", "bf16", "--steps", "4", "--warmup", "1"]
    assert main([*base, "--model", "auto", "--output-dir", str(tmp_path / "gpu")]) == 0
    assert ("parallax: NVIDIA GPU found; benchmarking llama-100m (batch 32, seq 1024); --model tiny for a quick run"
            in capsys.readouterr().err.splitlines())
    run = json.loads((tmp_path / "gpu" / "matrix.json").read_text())["run"]
    assert (run["model"], run["batch_size"], run["seq_len"], run["device"]) == ("llama-100m", 32, 1024, "auto")
    assert main([*base, "--model", "tiny", "--output-dir", str(tmp_path / "tiny")]) == 0
    assert "parallax: NVIDIA GPU found" not in capsys.readouterr().err  # a preset named is no choice to report
    run = json.loads((tmp_path / "tiny" / "matrix.json").read_text())["run"]
    assert (run["model"], run["batch_size"], run["seq_len"]) == ("tiny", 8, 128)


def test_benchmark_refuses_an_unwritable_output_dir_before_any_cell(tmp_path, capsys, fake_trainer, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["benchmark", *TINY, "--precisions", "bf16", "--output-dir", str(blocker / "out")]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"parallax: error: output directory '{blocker / 'out'}' is not writable (")
    assert line.endswith("); pass --output-dir with a writable path")
    assert not calls.exists()


def test_compare_against_a_baseline_of_another_step_count(tmp_path, capsys, fake_trainer):
    """Was a broadcast ValueError: the ratios are shown (in the terminal too), the losses, made at
    different steps of different schedules, are not compared, and the difference is said."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["benchmark", *TINY, "--precisions", "bf16", "--output-dir", str(a)]) == 0
    short = [*TINY]
    short[short.index("--steps") + 1] = "6"
    assert main(["benchmark", *short, "--precisions", "bf16", "--output-dir", str(b)]) == 0
    capsys.readouterr()
    assert main(["compare", "--results-dir", str(a), "--baseline", str(b), "--bootstraps", "200"]) == 0
    captured = capsys.readouterr()
    out = " ".join(captured.out.split())
    assert "Against the baseline" in out and "differs from the baseline: steps 6 → 12" in out
    assert "note: the baseline ran 6 steps, these runs 12: losses are not compared" in out
    rows = [line for line in captured.out.splitlines() if line.startswith("│ torch") or line.startswith("│ jax")]
    assert any("×" in row for row in rows)
    assert captured.err == ""


def test_compare_refuses_an_unwritable_report_before_the_work(tmp_path, capsys, fake_trainer, monkeypatch):
    a = tmp_path / "a"
    assert main(["benchmark", *TINY, "--precisions", "bf16", "--output-dir", str(a)]) == 0
    capsys.readouterr()
    monkeypatch.setattr("parallax.analysis.compare.build_comparison", lambda *a, **k: pytest.fail("the work started"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    report = blocker / "report.md"
    assert main(["compare", "--results-dir", str(a), "--output-report", str(report)]) == 2
    assert one_error_line(capsys) == (f"parallax: error: --output-report '{report}' cannot be written (its folder "
                                      f"'{blocker}' is not writable); pass --output-report with a writable path")
    assert main(["compare", "--results-dir", str(a), "--output-report", str(tmp_path)]) == 2
    assert "is a directory" in one_error_line(capsys)


def test_a_corrupt_cell_is_shown_corrupt_warned_and_exits_2(tmp_path, capsys, fake_trainer):
    out = tmp_path / "out"
    assert main(["benchmark", *TINY, "--precisions", "bf16", "--output-dir", str(out)]) == 0
    corrupt = out / "runs" / "jax-bf16-seed0-rep0" / "run.json"
    corrupt.write_text(corrupt.read_text()[:100])  # truncated
    capsys.readouterr()
    report = tmp_path / "report.md"
    assert main(["compare", "--results-dir", str(out), "--output-report", str(report), "--bootstraps", "200"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    warnings = [line for line in err if line.startswith("parallax: warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(f"parallax: warning: {corrupt}: corrupt or truncated JSON")
    assert err[-1] == ("parallax: error: 1 corrupt result file(s), named above, were left out of the report; "
                       "re-run those cells with 'parallax benchmark --resume' (or delete the files)")
    blocks = captured.out.split("\n" + "jax\n")  # 80 columns: the table is stacked, a block per cell
    assert "runs: corrupt" in " ".join(blocks[1].split("\ntorch")[0].split()) and "pending" not in captured.out
    saved = json.loads(report.with_suffix(".json").read_text())
    assert [(c["framework"], c["status"]) for c in saved["cells"]] == [("torch", "ok"), ("jax", "corrupt")]
    assert saved["corrupt"] == [warnings[0].removeprefix("parallax: warning: ")]
    assert "| jax | bf16 | corrupt |" in report.read_text()


def test_a_garbage_index_json_is_a_warning_not_silence(tmp_path, capsys, fake_trainer):
    out = tmp_path / "out"
    assert main(["benchmark", *TINY, "--precisions", "bf16", "--output-dir", str(out)]) == 0
    (out / "index.json").write_text("\x00 garbage")
    capsys.readouterr()
    assert main(["compare", "--results-dir", str(out), "--bootstraps", "200"]) == 0  # nothing is read from it
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"parallax: warning: {out / 'index.json'}: corrupt or not a Parallax index; ignored (the report "
                   "is built from the run folders, and 'parallax benchmark --resume' rewrites it)"]


def test_compare_of_a_missing_directory(tmp_path, capsys):
    assert main(["compare", "--results-dir", str(tmp_path / "nope")]) == 2
    assert "no such results directory" in one_error_line(capsys)


def _engines_importable() -> bool:
    try:
        importlib.import_module("parallax.cli.train")
        for fw in ("torch", "jax"):
            importlib.import_module(f"parallax.engines.{fw}.engine")
    except Exception:
        return False
    return True


@pytest.mark.skipif(not _engines_importable(), reason="parallax train or an engine cannot be imported")
def test_tiny_matrix_end_to_end_with_real_engines(tmp_path):
    """torch and JAX on the CPU through real `parallax train` processes, then the report. The steps are
    large enough (4 × 128) that drawing a batch stays well under 2% of a step: at 2 × 32 JAX's
    ~0.7 ms a batch made it input-bound (3.7% of a 19 ms step) and kept it out of the speedup."""
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "parallax", "benchmark", "--frameworks", "torch,jax", "--precisions", "bf16",
           "--model", "tiny", "--batch-size", "4", "--seq-len", "128", "--steps", "6", "--warmup", "2",
           "--no-compile", "--device", "cpu", "--output-dir", str(out), "--report", "--timeout-per-run", "300"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    index = json.loads((out / "index.json").read_text())
    assert [c["status"] for c in index["cells"]] == ["ok", "ok"], index
    saved = json.loads((out / "report.json").read_text())
    assert [(c["framework"], c["status"]) for c in saved["cells"]] == [("torch", "ok"), ("jax", "ok")]
    for c in saved["cells"]:
        steps = [json.loads(ln) for ln in (out / "runs" / f"{c['framework']}-bf16-seed0-rep0" / "steps.jsonl")
                 .read_text().splitlines()]
        assert len(steps) == 6 and c["step_ms"]["count"] == 4
        assert c["tokens_per_s"]["value"] > 0 and c["final_loss"]["value"] > 0
    assert saved["config"]["compiled"] == {"torch": False, "jax": True}
    assert [s["label"] for s in saved["speedups"]] == ["bf16: jax over torch"]
    assert (out / "plots" / "loss.png").stat().st_size > 5000
    # bf16 on the CPU reads the same in both engines: 'cpu', never 'emulated' (plan.capability.run_label)
    report = (out / "report.md").read_text()
    assert "| torch | bf16 (cpu) | ok |" in report and "| jax | bf16 (cpu) | ok |" in report
    assert "emulated" not in report


# ----------------------------------------------------------------------------- scripts

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("script", ["run_benchmarks.sh", "setup_remote_gpu.sh"])
def test_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", str(SCRIPTS / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_run_benchmarks_script_runs_resumes_and_reports(tmp_path):
    env = dict(os.environ, PARALLAX=f"{sys.executable} {FIXTURES / 'fake_parallax.py'}", MEASURE="0",
               FRAMEWORKS="torch,jax", PRECISIONS="bf16", REPEATS="2", MODEL="tiny", SEQ_LEN="32",
               EXTRA_ARGS="--no-compile --device cpu", FAKE_TRAIN_PLAN='{"jax-bf16-seed0": "crash"}')
    out = tmp_path / "results"
    cmd = ["bash", str(SCRIPTS / "run_benchmarks.sh"), str(out), "4", "12", "2"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 1, first.stderr[-2000:]  # a crashed cell: recorded, exit 1
    assert f"run_benchmarks: report {out}/report.md (exit 1)" in first.stdout
    assert "capability" in json.loads((out / "check-env.json").read_text())
    index = json.loads((out / "index.json").read_text())
    assert index["counts"]["ok"] == 2 and index["counts"]["failed"] == 2
    assert (out / "report.md").exists() and (out / "plots" / "throughput.png").exists()
    for cell in ("jax-bf16-seed0-rep0", "jax-bf16-seed0-rep1"):
        (out / "runs" / cell / "run.json").unlink()
    again = subprocess.run(cmd, capture_output=True, text=True, env={**env, "FAKE_TRAIN_PLAN": "{}"}, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming it" in again.stderr and "resuming: 2 of 4 cells already have a result" in again.stderr
    assert json.loads((out / "index.json").read_text())["counts"]["ok"] == 4


def test_run_benchmarks_script_stops_on_bad_input(tmp_path):
    env = dict(os.environ, PARALLAX=f"{sys.executable} {FIXTURES / 'fake_parallax.py'}", MEASURE="0",
               PRECISIONS="bf16,fp5")
    proc = subprocess.run(["bash", str(SCRIPTS / "run_benchmarks.sh"), str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "unknown precision 'fp5'" in proc.stderr and "refused to start (exit 2)" in proc.stderr


def test_setup_script_picks_builds_for_the_drivers_cuda(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$1" in --query-gpu*) echo "NVIDIA H200, 9.0, 143771 MiB, 580.65.06";;\n'
                   '*) echo "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 12.8 |";; esac\n')
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake_bin}:{os.environ['PATH']}", DRY_RUN="1", VENV=str(tmp_path / "venv"))
    proc = subprocess.run(["bash", str(SCRIPTS / "setup_remote_gpu.sh")], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"python3 -m venv {tmp_path / 'venv'}"
    pip = f"{tmp_path}/venv/bin/python -m pip install"
    assert f"{pip} torch --index-url https://download.pytorch.org/whl/cu126" in lines
    assert f"{pip} jax[cuda12] flax optax" in lines
    assert lines[-1] == f"{tmp_path}/venv/bin/parallax check-env"
    assert "setup: GPU: NVIDIA H200, 9.0" in proc.stderr and "TransformerEngine is not installed" in proc.stderr
    proc = subprocess.run(["bash", str(SCRIPTS / "setup_remote_gpu.sh")], capture_output=True, text=True,
                          env={**env, "CUDA_MAJOR": "11"})
    assert proc.returncode == 2 and "needs 12 or 13" in proc.stderr
    proc = subprocess.run(["bash", str(SCRIPTS / "setup_remote_gpu.sh")], capture_output=True, text=True,
                          env={**env, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "nvidia-smi not found" in proc.stderr


@pytest.mark.gpu
def test_tiny_matrix_on_the_gpu_records_memory_and_mfu(tmp_path):
    """On the GPU: both frameworks run, each cell's memory is its own process's, MFU is known."""
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "parallax", "benchmark", "--frameworks", "torch,jax", "--precisions", "bf16",
           "--model", "tiny", "--batch-size", "8", "--seq-len", "128", "--steps", "30", "--warmup", "10",
           "--output-dir", str(out), "--report", "--timeout-per-run", "600"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((out / "report.json").read_text())
    for c in saved["cells"]:
        assert c["status"] == "ok"
        assert c["memory"]["peak_reserved_bytes"] and c["memory"]["peak_reserved_bytes"] < 20 * 2**30
        assert c["flops"]["spec"]["mfu_precision_peak"] is not None or c["notes"], c["notes"]
    assert saved["config"]["compiled"] == {"torch": True, "jax": True}


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_every_preset_brings_its_own_batch_and_sequence(model):
    """A preset without sizes made `benchmark --model llama-330m` die with a KeyError on the H200."""
    config, _ = defaults.run_config({"model": model, "steps": 3, "warmup": 1, "synthetic": True})
    assert (config.batch_size, config.seq_len) == (PRESET_SIZES[model].batch_size, PRESET_SIZES[model].seq_len)
    assert config.model == model


def test_convergence_needs_real_tokens_and_evaluation(tmp_path, capsys, prepared):
    argv = ["benchmark", *TINY, "--output-dir", str(tmp_path / "out"), "--convergence"]
    assert main(argv + ["--synthetic"]) == 2
    assert one_error_line(capsys) == ("parallax: error: --convergence needs real tokens with a held-out split: "
                                      "pass --data PATH or --hf")
    assert main(argv + ["--data", str(prepared.directory), "--eval-every", "0"]) == 2
    assert one_error_line(capsys).endswith("--convergence needs evaluation: pass --eval-every N (steps between "
                                           "evaluations)")
    assert not (tmp_path / "out" / "runs").exists()


def test_convergence_is_a_mode_of_the_matrix_with_two_seeds_by_default(tmp_path, capsys, fake_trainer, prepared):
    out = tmp_path / "out"
    assert main(["benchmark", *TINY, "--frameworks", "torch", "--precisions", "bf16,fp8", "--convergence",
                 "--data", str(prepared.directory), "--eval-every", "4", "--output-dir", str(out)]) == 0
    matrix = json.loads((out / "matrix.json").read_text())
    assert (matrix["mode"], matrix["seeds"], matrix["run"]["eval_every"], matrix["run"]["steps"]) == \
        ("convergence", [0, 1], 4, 12)
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "torch-bf16-seed0-rep0", "torch-bf16-seed1-rep0", "torch-te-fp8-delayed-seed0-rep0",
        "torch-te-fp8-delayed-seed1-rep0"]
    assert "Convergence penalty" not in capsys.readouterr().out  # the fake runs evaluate nothing
