"""Every command's output fits an 80-column terminal (``COLUMNS=80``, as a pipe takes it): tables
wrap or stack their columns instead of cutting numbers, summaries wrap, and no Markdown goes to
the terminal. In-process; the work of the slow commands is stubbed or made tiny."""

from __future__ import annotations

import json
import os

import pytest

from fixtures.fake_runs import generated_steps, steps_from, tiny_config, write_ok_run
from fixtures.matrix import fake_command

from parallax.cli import COMMANDS, main
from parallax.run import runner

WIDTH = 80


@pytest.fixture(autouse=True)
def narrow(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.chdir(tmp_path)


def fits(capsys) -> str:
    """stdout, after asserting that each of its lines and stderr's (but the one error line) fits."""
    captured = capsys.readouterr()
    rows = captured.out.splitlines() + [r for r in captured.err.splitlines() if not r.startswith("parallax: error:")]
    wide = [r for r in rows if len(r.rstrip()) > WIDTH]
    assert wide == [], "\n".join(wide)
    return captured.out


def results(root, frameworks=("torch", "jax"), precisions=("bf16", "fp8")):
    for framework in frameworks:
        for precision in precisions:
            run = tiny_config(framework=framework, precision=precision)
            write_ok_run(root / "runs" / f"{framework}-{precision}", run, generated_steps(run))
    return root


def test_compare_stacks_its_wide_table_and_cuts_no_number(tmp_path, capsys):
    assert main(["compare", "--results-dir", str(results(tmp_path / "r")), "--bootstraps", "100"]) == 0
    out = fits(capsys)
    assert "…" not in out
    flat = " ".join(out.split())
    assert "tokens/s (95% CI): 1," in flat and "Δloss vs bf16 (95% CI), early: +0.0" in flat  # stacked, whole


def test_benchmark_table_fits(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "train_command", fake_command)
    monkeypatch.setattr(runner, "collect_environment", lambda: {"python": "3.x", "gpus": []})
    monkeypatch.setenv("FAKE_TRAIN_PLAN", "{}")
    assert main(["benchmark", "--frameworks", "torch,jax", "--precisions", "bf16,fp8", "--model", "tiny",
                 "--batch-size", "4", "--seq-len", "32", "--steps", "12", "--warmup", "2", "--device", "cpu",
                 "--no-compile", "--output-dir", "b"]) == 0
    assert "…" not in fits(capsys)


def test_crossover_prints_a_table_not_markdown(tmp_path, capsys):
    for folder, model, ms in (("small", "tiny", 125.0), ("large", "llama-330m", 80.0)):
        for recipe, fmt, t in (("bf16", "bf16", 100.0), ("torchao-fp8-tensorwise", "fp8", ms)):
            run = tiny_config(model=model, framework="torch", precision=fmt, recipe=recipe, seq_len=32)
            steps = steps_from([500.0, 300.0] + [t] * 10, [9.0, 8.0] + [3.0] * 10, run.warmup)
            write_ok_run(tmp_path / folder / "runs" / f"torch-{recipe}", run, steps)
    assert main(["crossover", "small", "large", "--output-dir", "out", "--bootstraps", "200"]) == 0
    out = fits(capsys)
    assert "|" not in out and "#" not in out and "1.250×" in out


def test_train_summary_fits(capsys):
    assert main(["train", "--model", "tiny", "--device", "cpu", "--no-compile", "--batch-size", "2", "--seq-len",
                 "16", "--steps", "3", "--warmup", "1", "--output-dir", "run"]) == 0
    assert "tokens/s" in fits(capsys)


def test_list_plans_fits(capsys):
    assert main(["benchmark", "--list-plans"]) == 0
    fits(capsys)


def test_check_env_fits(capsys):
    assert main(["check-env"]) in (0, 1)
    fits(capsys)


def test_profile_summary_wraps(capsys, monkeypatch):
    record = {"title": "torch te-fp8-current", "timing": {"step_ms": 123.456, "tokens_per_s": 123456.0},
              "classes": [{"class": name, "share": 0.1} for name in ("GEMM fp8", "GEMM bf16", "attention forward",
                                                                     "attention backward", "elementwise", "norms",
                                                                     "optimizer", "host gaps", "communication")]}
    monkeypatch.setattr("parallax.run.profile.profile_run", lambda *a, **k: record)
    assert main(["profile", "--model", "tiny", "--device", "cpu", "--output-dir", "p"]) == 0
    out = fits(capsys)
    assert " ".join(out.split()).startswith("parallax profile: torch te-fp8-current: 123.46 ms/step")


def test_data_prepare_summary_wraps(capsys):
    pytest.importorskip("tokenizers")
    from fixtures.samples import VALID

    assert main(["data", "prepare", str(VALID), "--out", "d", "-q", "--vocab-size", "300"]) == 0
    assert "tokens" in fits(capsys)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_fits(name, capsys):
    assert main([name, "--help"]) == 0
    fits(capsys)


def test_results_pack_fits(tmp_path, capsys):
    results(tmp_path / "r", ("torch",), ("bf16",))
    assert main(["results", "pack", "r"]) == 0
    fits(capsys)
    assert json.loads((tmp_path / "r" / "runs" / "torch-bf16" / "run.json").read_text())["status"] == "ok"


def test_the_profilers_own_log_lines_are_dropped(capfd):
    from parallax.engines.profiler import native_log_filtered

    with native_log_filtered():
        os.write(2, b"USDT:2026-12-04 16:25:50 SyncActivityProfilerHandler.cpp:52] profiler_start\nkept\n")
    assert capfd.readouterr().err == "kept\n"


def test_pythons_own_stderr_is_not_held_back_while_the_profilers_lines_are_caught():
    import subprocess
    import sys

    script = ("import os, sys\n"
              "from parallax.engines.profiler import native_log_filtered\n"
              "with native_log_filtered():\n"
              "    print('profiled step 1/2', file=sys.stderr)\n"
              "    os.write(2, b'STAGE:2026-12-04 Kineto profiler_stop\\nnative kept\\n')\n"
              "    print('profiled step 2/2', file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    # the command's lines as it writes them (a progress bar draws meanwhile), the native ones after
    assert done.stderr.splitlines() == ["profiled step 1/2", "profiled step 2/2", "native kept"]


def test_export_configs_and_unpack_fit(tmp_path, capsys):
    assert main(["export-configs", "--output-dir", "y", "--model", "tiny"]) == 0
    fits(capsys)
    results(tmp_path / "r", ("torch",), ("bf16",))
    assert main(["results", "pack", "r"]) == 0
    assert main(["results", "unpack", "r"]) == 0
    fits(capsys)


def test_check_env_verbose_fits(capsys):
    assert main(["check-env", "--verbose"]) in (0, 1)
    assert "…" not in fits(capsys)
