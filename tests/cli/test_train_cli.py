"""``parallax train`` through the real command line: runs, the CPU fallback, every bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fixtures.cli import one_error_line

from parallax.store import results
from parallax.cli import main
from parallax.cli import defaults
from parallax.cli import train as train_cli

TINY = ["--framework", "torch", "--model", "tiny", "--batch-size", "2", "--seq-len", "16",
        "--device", "cpu", "--no-compile"]


@pytest.mark.parametrize("args, message", [
    (["--framework", "mxnet"], "unknown framework 'mxnet'; choose one of: torch, jax"),
    (["--precision", "fp16"], "unknown precision 'fp16'; choose one of: bf16, fp8, mxfp8, nvfp4, mxfp4"),
    (["--batch-size", "0"], "--batch-size must be positive, got 0"),
    (["--seq-len", "-8"], "--seq-len must be positive, got -8"),
    (["--steps", "5", "--warmup", "0"], "--warmup must be at least 1: the first step compiles"),
    (["--steps", "0", "--warmup", "0"], "--steps must be positive, got 0"),
    (["--steps", "20", "--warmup", "20"], "--steps (20) must be greater than --warmup (20)"),
    (["--model", "llama-7b"], "unknown model preset 'llama-7b'"),
    (["--precision", "nvfp4", "--batch-size", "3", "--seq-len", "10"], "recipe 'emulated-nvfp4': NVFP4 blocks need batch·seq divisible by 16"),
    (["--precision", "fp4"], "unknown precision 'fp4'; choose one of: bf16, fp8, mxfp8, nvfp4, mxfp4"),
    (["--recipe", "te-fp9"], "unknown recipe 'te-fp9' for torch; choose one of: bf16, te-bf16, te-fp8-delayed"),
    (["--recipe", "bf16", "--precision", "fp8"], "recipe 'bf16' is bf16, not fp8; drop --precision or pick a fp8 recipe"),
    (["--framework", "maxtext"], "the maxtext engine needs Python >= 3.12" if sys.version_info < (3, 12)
     else "maxtext is not installed; install it with: pip install 'slm-parallax[maxtext]'"),
    (["--synthetic", "--data", "somewhere"], "choose one of --synthetic, --data PATH and --hf"),
    (["--device", "tpu"], "unknown --device 'tpu'"),
    (["--epochs", "0"], "--epochs must be positive, got 0"),
    (["--batch-size", "two"], "Invalid value for '--batch-size'"),
    (["--eval-every", "-1"], "--eval-every must be 0 (never) or positive, got -1"),
    (["--eval-every", "2", "--eval-batches", "0"],
     "--eval-batches must be positive, got 0 (to skip evaluation, use --eval-every 0)"),
    (["--eval-batches", "0"], "--eval-batches must be positive, got 0"),
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
    monkeypatch.setattr(defaults, "gpu_found", lambda: False)
    out = tmp_path / "run"
    code = main(["train", "--model", "auto", "--steps", "2", "--warmup", "1", "--no-compile",
                 "--output-dir", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "no NVIDIA GPU found; training the 'tiny' preset on the CPU (batch 8, seq 128)" in captured.err
    config = results.load_run(out)["config"]
    assert (config["model"], config["batch_size"], config["seq_len"], config["device"]) == ("tiny", 8, 128, "cpu")


def test_model_auto_with_a_gpu_is_llama_100m_with_the_defaults(monkeypatch):
    monkeypatch.setattr(defaults, "gpu_found", lambda: True)
    run, note = train_cli.build_run({"model": "auto", "synthetic": False, "data": None, "hf": False,
                                     "no_compile": False, "batch_size": None})
    assert note == "NVIDIA GPU found; training llama-100m (batch 32, seq 1024); --model tiny for a quick run"
    assert run.model == "llama-100m"
    assert (run.batch_size, run.seq_len, run.compile) == (32, 1024, True)  # RunConfig's defaults


def test_model_auto_keeps_sizes_the_user_gave(monkeypatch):
    monkeypatch.setattr(defaults, "gpu_found", lambda: False)
    run, _ = train_cli.build_run({"model": "auto", "synthetic": False, "data": None, "hf": False,
                                  "no_compile": True, "seq_len": 64})
    assert (run.model, run.batch_size, run.seq_len, run.compile) == ("tiny", 8, 64, False)


def test_data_options_map_onto_the_run_config():
    base = {"synthetic": False, "data": None, "hf": False, "no_compile": False}
    assert train_cli.build_run(dict(base))[0].synthetic is True
    run, _ = train_cli.build_run({**base, "data": "corpus/"})
    assert (run.synthetic, run.data) == (False, "corpus/")
    run, _ = train_cli.build_run({**base, "hf": True})
    assert (run.synthetic, run.data) == (False, None)
    assert train_cli.build_run({**base, "epochs": 2.5})[0].epochs == 2.5


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


def test_plain_train_on_a_cpu_trains_tiny_and_says_so(tmp_path, capsys, monkeypatch):
    """No --model: 'auto', so a CPU-only machine trains tiny at its own 8 × 128, not llama-100m."""
    pytest.importorskip("torch")
    monkeypatch.setattr(defaults, "gpu_found", lambda: False)
    out = tmp_path / "run"
    code = main(["train", "--steps", "2", "--warmup", "1", "--no-compile", "--output-dir", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    notes = [line for line in captured.err.splitlines() if line.startswith("parallax: no NVIDIA GPU")]
    assert notes == ["parallax: no NVIDIA GPU found; training the 'tiny' preset on the CPU (batch 8, seq 128) "
                     "instead of llama-100m"]
    config = results.load_run(out)["config"]
    assert (config["model"], config["batch_size"], config["seq_len"], config["device"]) == ("tiny", 8, 128, "cpu")


def test_a_preset_brings_its_own_batch_and_sequence_length():
    base = {"synthetic": False, "data": None, "hf": False, "no_compile": False}
    run, note = train_cli.build_run({**base, "model": "tiny"})
    assert (run.model, run.batch_size, run.seq_len, run.device, note) == ("tiny", 8, 128, "auto", None)
    run, note = train_cli.build_run({**base, "model": "llama-100m"})
    assert (run.batch_size, run.seq_len, note) == (32, 1024, None)
    run, _ = train_cli.build_run({**base, "model": "tiny", "batch_size": 2, "seq_len": 64})
    assert (run.batch_size, run.seq_len) == (2, 64)  # what the user gives wins


def test_model_tiny_alone_is_valid(tmp_path, capsys):
    """--model tiny without --seq-len used to fail: the default 1024 exceeded tiny's 128."""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    code = main(["train", "--model", "tiny", "--steps", "2", "--warmup", "1", "--no-compile", "--device", "cpu",
                 "--output-dir", str(out)])
    assert code == 0, capsys.readouterr().err
    assert (results.load_run(out)["config"]["seq_len"], results.load_run(out)["config"]["batch_size"]) == (128, 8)


def test_a_too_long_sequence_for_the_preset_is_still_one_line(tmp_path, capsys):
    code = main(["train", "--model", "tiny", "--seq-len", "256", "--output-dir", str(tmp_path / "run")])
    assert code == 2
    assert one_error_line(capsys) == ("parallax: error: --seq-len 256 exceeds the 'tiny' preset's maximum 128; "
                                      "lower --seq-len or pick another --model")


def test_bad_input_with_model_auto_is_still_one_line(tmp_path, capsys, monkeypatch):
    """The note of --model auto comes only once the input is known to be good."""
    monkeypatch.setattr(defaults, "gpu_found", lambda: False)
    assert main(["train", "--batch-size", "0", "--output-dir", str(tmp_path / "run")]) == 2
    assert one_error_line(capsys) == "parallax: error: --batch-size must be positive, got 0"


def test_train_help_shows_the_defaults_of_run_config(capsys):
    from parallax.spec.config import RunConfig

    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # undo the help's line wrapping
    d = RunConfig()
    for option, value in (("--framework", d.framework), ("--precision", d.precision), ("--steps", d.steps),
                          ("--warmup", f"{d.warmup}, at most half the steps"), ("--seed", d.seed), ("--eval-every", d.eval_every),
                          ("--eval-batches", d.eval_batches), ("--device", d.device),
                          ("--output-dir", d.output_dir)):
        after = text.split(option, 1)[1]
        assert f"[default: {value}]" in after.split(" --", 1)[0], option
    assert "[default: auto]" in text
    from parallax.spec.config import PRESET_SIZES

    for field in ("batch_size", "seq_len"):  # every preset's, in table order
        sizes = ", ".join(f"{name} {getattr(s, field)}" for name, s in PRESET_SIZES.items())
        assert f"[default: the preset's: {sizes}]" in text, field
    assert "--cuda-graphs [auto|on|off]" in text and f"[default: {d.cuda_graphs}]" in text.split("--cuda-graphs", 1)[1]


def test_train_on_the_packages_tinystories_sample(tmp_path, capsys, monkeypatch):
    """Its train.txt (330 KB; 400 stories, all of them training ones: no evaluation, so nothing
    is held out) yields 4,975 distinct BPE tokens, not 10,000: the vocabulary is filled with
    reserved tokens, with a warning that says so, and the run trains."""
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    from fixtures.samples import TRAIN

    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "run"
    code = main(["train", *TINY, "--data", str(TRAIN), "--steps", "3", "--warmup", "1", "--output-dir", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert ("parallax: warning: the training text yields only 4,975 distinct BPE tokens; the vocabulary is filled "
            "up to 10,000 with 5,025 reserved tokens that never occur") in captured.err
    assert "--tokenizer-sample-mb" not in captured.err
    run = results.load_run(out)
    assert run["status"] == "ok" and run["config"]["data"] == str(TRAIN)


def _raw_text(path, texts):
    """``texts`` as raw text without <|endoftext|>: a blank line between them."""
    from fixtures.samples import unseparated

    return unseparated(path, texts)


def test_train_on_raw_text_holds_out_validation_itself(tmp_path, capsys, monkeypatch):
    """30 stories without <|endoftext|> (the issue's case: 'cannot be made to work'): 30
    paragraph documents; evaluation asks for 16 batches x 2 rows, the first hold-out (every 30th:
    1 document, 315 tokens) gives 19 sequences of 17 tokens, so train holds out every 10th
    instead (3 documents, 789 tokens) and trains; the next run reuses the cache."""
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    from fixtures.samples import TRAIN, stories

    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    raw = _raw_text(tmp_path / "raw.txt", stories(TRAIN)[:30])
    args = ["train", *TINY, "--data", str(raw), "--steps", "3", "--warmup", "1", "--eval-every", "2",
            "--eval-batches", "16"]
    assert main([*args, "--output-dir", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert ("parallax: 1 held-out document gives 19 of the 32 evaluation sequences; holding out every 10-th "
            "document instead") in err
    assert "--valid" not in err
    data = results.load_run(tmp_path / "a")["data"]
    assert (data["train_tokens"], data["validation_tokens"]) == (5_326, 789)
    assert main([*args, "--output-dir", str(tmp_path / "b")]) == 0
    assert "preparing" not in capsys.readouterr().err
    assert results.load_run(tmp_path / "b")["data"]["train_sha256"] == data["train_sha256"]


def test_train_on_one_raw_document_trains_without_evaluation_and_refuses_it_with(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    from fixtures.samples import TRAIN, stories

    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    one = tmp_path / "one.txt"  # the 400 stories' lines, no blank line: one document
    one.write_text("\n".join(stories(TRAIN)) + "\n", encoding="utf-8")
    base = ["train", *TINY, "--data", str(one), "--steps", "3", "--warmup", "1"]
    assert main([*base, "--output-dir", str(tmp_path / "a")]) == 0
    data = results.load_run(tmp_path / "a")["data"]
    assert (data["train_tokens"], data["validation_tokens"]) == (79_465, 0)  # every token trains
    capsys.readouterr()
    assert main([*base, "--eval-every", "2", "--output-dir", str(tmp_path / "b")]) == 2
    assert one_error_line(capsys) == (f"parallax: error: --data {one}: 1 document, nothing to hold out for "
                                      "evaluation; separate its documents by blank lines or <|endoftext|>, or pass "
                                      "--eval-every 0")
    three = _raw_text(tmp_path / "three.txt", stories(TRAIN)[:3])
    assert main(["train", *TINY, "--data", str(three), "--steps", "3", "--warmup", "1", "--eval-every", "2",
                 "--eval-batches", "64", "--output-dir", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"parallax: error: --data {three}: every 2nd document held out gives 20 validation sequences of 17 tokens; "
        "64 eval batches x batch 2 need 128; lower --eval-batches, --batch-size or --seq-len, or pass --eval-every 0")


@pytest.mark.parametrize("args, message", [
    (["--recipe", "bf16"], "--cuda-graphs on: recipe 'bf16' has no CUDA-graph capture (only te-bf16, "
                           "te-fp8-delayed, te-fp8-current, te-fp8-dpa have); use --cuda-graphs auto or off"),
    (["--recipe", "torchao-fp8-tensorwise"], "--cuda-graphs on: recipe 'torchao-fp8-tensorwise' has no "
                                             "CUDA-graph capture (only te-bf16, te-fp8-delayed, te-fp8-current, "
                                             "te-fp8-dpa have); use --cuda-graphs auto or off"),
    (["--recipe", "te-bf16"], "--cuda-graphs on needs a CUDA GPU; this run is on cpu; use --cuda-graphs auto or "
                              "off, or --device cuda"),
])
def test_cuda_graphs_on_without_capture_is_one_line_exit_2(tmp_path, capsys, args, message):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    code = main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out), "--cuda-graphs", "on",
                 *args])
    assert code == 2
    assert one_error_line(capsys) == f"parallax: error: {message}"
    assert not (out / "run.json").exists()


def test_cuda_graphs_on_is_refused_by_the_jax_engine(tmp_path, capsys):
    pytest.importorskip("jax")
    out = tmp_path / "run"
    code = main(["train", "--framework", "jax", "--model", "tiny", "--batch-size", "2", "--seq-len", "16",
                 "--device", "cpu", "--steps", "3", "--warmup", "1", "--output-dir", str(out), "--cuda-graphs", "on"])
    assert code == 2
    assert one_error_line(capsys) == (
        "parallax: error: --cuda-graphs on is for the torch engine's TransformerEngine recipes; XLA already runs "
        "the JAX step as whole-step compiled executables; use --cuda-graphs auto or off")
    assert not (out / "run.json").exists()


def test_cuda_graphs_takes_auto_on_or_off(tmp_path, capsys):
    code = main(["train", *TINY, "--output-dir", str(tmp_path / "run"), "--cuda-graphs", "sometimes"])
    assert code == 2
    assert "Invalid value for '--cuda-graphs': 'sometimes' is not one of 'auto', 'on', 'off'" in capsys.readouterr().err


@pytest.mark.parametrize("steps, warmup", [(10, 5), (3, 1), (40, 20), (200, 20)])
def test_warmup_defaults_to_what_fits_steps(steps, warmup):
    assert train_cli.default_warmup(steps) == warmup
    run, _ = train_cli.build_run({"synthetic": True, "data": None, "hf": False, "no_compile": False,
                                  "model": "tiny", "steps": steps})
    assert (run.steps, run.warmup) == (steps, warmup)


def test_steps_10_trains_without_warmup(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "10", "--output-dir", str(out)]) == 0
    run = results.load_run(out / "run.json")
    assert (run["config"]["steps"], run["config"]["warmup"]) == (10, 5)
    assert len(results.load_steps(out)) == 10
