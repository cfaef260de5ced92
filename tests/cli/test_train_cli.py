"""``parallax train`` through the real command line: runs, the CPU fallback, every bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fixtures.cli import one_error_line

from parallax import results
from parallax.cli import main
from parallax.cli import train as train_cli

TINY = ["--framework", "torch", "--model", "tiny", "--batch-size", "2", "--seq-len", "16",
        "--device", "cpu", "--no-compile"]


@pytest.mark.parametrize("args, message", [
    (["--framework", "mxnet"], "unknown framework 'mxnet'; choose one of: torch, jax"),
    (["--precision", "fp16"], "unknown precision 'fp16'; choose one of: bf16, fp8, nvfp4"),
    (["--batch-size", "0"], "--batch-size must be positive, got 0"),
    (["--seq-len", "-8"], "--seq-len must be positive, got -8"),
    (["--steps", "5", "--warmup", "0"], "--warmup must be at least 1: the first step compiles"),
    (["--steps", "0", "--warmup", "0"], "--steps must be positive, got 0"),
    (["--steps", "20", "--warmup", "20"], "--steps (20) must be greater than --warmup (20)"),
    (["--model", "llama-7b"], "unknown model preset 'llama-7b'"),
    (["--precision", "nvfp4"], "torch recipe 'te-nvfp4' is not implemented yet (planned: "),
    (["--precision", "fp4"], "unknown precision 'fp4'; choose one of: bf16, fp8, nvfp4"),
    (["--recipe", "te-fp9"], "unknown recipe 'te-fp9' for torch; choose one of: bf16, te-bf16, te-fp8-delayed"),
    (["--recipe", "bf16", "--precision", "fp8"], "recipe 'bf16' is bf16, not fp8; drop --precision or pick a fp8 recipe"),
    (["--framework", "jax", "--recipe", "te-fp8-delayed"], "jax recipe 'te-fp8-delayed' is not implemented yet"),
    (["--framework", "maxtext"], "the maxtext engine is not implemented yet; choose one of: torch, jax"),
    (["--synthetic", "--data", "somewhere"], "choose one of --synthetic, --data PATH and --hf"),
    (["--device", "tpu"], "unknown --device 'tpu'"),
    (["--epochs", "0"], "--epochs must be positive, got 0"),
    (["--batch-size", "two"], "Invalid value for '--batch-size'"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, message):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    code = main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out), *args])
    assert code == 2
    assert message in one_error_line(capsys)
    assert not (out / "run.json").exists()


def test_an_unwritable_output_dir_is_refused(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(blocker / "run")])
    assert code == 2
    line = one_error_line(capsys)
    assert f"output directory '{blocker / 'run'}' is not writable" in line and "--output-dir" in line


def test_missing_torch_names_the_extra(tmp_path):
    # A fresh interpreter where `import torch` fails, as on a machine without the extra.
    script = ("import sys; sys.modules['torch'] = None\n"
              "from parallax.cli import main\n"
              f"sys.exit(main(['train', '--model', 'tiny', '--seq-len', '64', '--output-dir', {str(tmp_path / 'run')!r}]))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "parallax: error: torch is not installed; install it with: pip install 'slm-parallax[torch]'"
    )
    assert not (tmp_path / "run" / "run.json").exists()


def test_train_runs_and_prints_a_summary(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    code = main(["train", *TINY, "--steps", "4", "--warmup", "1", "--seed", "3", "--synthetic",
                 "--output-dir", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "tokens/s (median)" in captured.out and "step time (median)" in captured.out
    assert f"wrote {out}/run.json and steps.jsonl" in captured.out
    assert "step 4/4" in captured.err  # progress goes to stderr (plain lines when not a terminal)
    run = results.load_run(out)
    assert run["status"] == "ok"
    assert (run["config"]["seed"], run["config"]["steps"], run["config"]["compile"]) == (3, 4, False)
    assert len(results.load_steps(out)) == 4


def test_model_auto_without_a_gpu_trains_tiny_on_the_cpu_and_says_so(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(train_cli, "_gpu_found", lambda: False)
    out = tmp_path / "run"
    code = main(["train", "--model", "auto", "--steps", "2", "--warmup", "1", "--no-compile",
                 "--output-dir", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "no NVIDIA GPU found; training the 'tiny' preset on the CPU (batch 8, seq 128)" in captured.err
    config = results.load_run(out)["config"]
    assert (config["model"], config["batch_size"], config["seq_len"], config["device"]) == ("tiny", 8, 128, "cpu")


def test_model_auto_with_a_gpu_is_llama_100m_with_the_defaults(monkeypatch):
    monkeypatch.setattr(train_cli, "_gpu_found", lambda: True)
    run = train_cli.build_run({"model": "auto", "synthetic": False, "data": None, "hf": False,
                               "no_compile": False, "batch_size": None})
    assert run.model == "llama-100m"
    assert (run.batch_size, run.seq_len, run.compile) == (32, 1024, True)  # RunConfig's defaults


def test_model_auto_keeps_sizes_the_user_gave(monkeypatch):
    monkeypatch.setattr(train_cli, "_gpu_found", lambda: False)
    run = train_cli.build_run({"model": "auto", "synthetic": False, "data": None, "hf": False,
                               "no_compile": True, "seq_len": 64})
    assert (run.model, run.batch_size, run.seq_len, run.compile) == ("tiny", 8, 64, False)


def test_data_options_map_onto_the_run_config():
    base = {"synthetic": False, "data": None, "hf": False, "no_compile": False}
    assert train_cli.build_run(dict(base)).synthetic is True
    run = train_cli.build_run({**base, "data": "corpus/"})
    assert (run.synthetic, run.data) == (False, "corpus/")
    run = train_cli.build_run({**base, "hf": True})
    assert (run.synthetic, run.data) == (False, None)
    assert train_cli.build_run({**base, "epochs": 2.5}).epochs == 2.5


@pytest.mark.slow
def test_compiled_train_smoke(tmp_path, capsys):
    """torch.compile (the default) on the CPU: tiny, two steps."""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    code = main(["train", "--model", "tiny", "--batch-size", "2", "--seq-len", "16", "--device", "cpu",
                 "--steps", "2", "--warmup", "1", "--output-dir", str(out)])
    assert code == 0, capsys.readouterr().err
    run = results.load_run(out)
    assert run["framework"]["compiled"] is True and run["config"]["compile"] is True
