"""Generated inputs (hypothesis) for every command's numeric options and for the files they
read: each ends in exit 0, or exit 2 with one ``parallax: error:`` line, never a traceback.

The work behind a command (training, the matrix, profiling, tokenizing) is replaced by a stub
that raises ``Accepted``: what is tested is everything a command decides before its work.
Derandomized and bounded (100 examples each), so the examples are the same on every run."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parallax.cli import main

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class Accepted(Exception):
    """The command got past its checks to its work."""


def accept(*args, **kwargs):
    raise Accepted


@pytest.fixture
def stubbed(monkeypatch):
    monkeypatch.setattr("parallax.run.train.run_training", accept)
    monkeypatch.setattr("parallax.cli.benchmark.run_matrix", accept)
    monkeypatch.setattr("parallax.run.profile.profile_run", accept)
    monkeypatch.setattr("parallax.data.prepare.prepare", accept)
    monkeypatch.setattr("parallax.cli.export_configs.export", accept)
    monkeypatch.setattr("parallax.analysis.parity.init_weights", accept)


def outcome(argv: list[str]) -> None:
    """Run ``argv``; assert exit 0 (or the work reached), or exit 2 with one error line."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except Accepted:
            code = 0
    lines = err.getvalue().strip().splitlines()
    assert code in (0, 2), (argv, code, lines)
    if code == 2:
        errors = [row for row in lines if row.startswith("parallax: error: ")]
        assert errors == lines[-1:] and len(lines[-1]) < 400, (argv, lines)


NUMBERS = st.one_of(
    st.integers(-2**70, 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "1", "-1", "2", "1e400", "-0", "0x10", "1_000", "nan", "inf", "-inf", "1.5", "", " 3"]),
    st.text(max_size=4),
)
TRAIN_OPTIONS = ["--batch-size", "--seq-len", "--steps", "--warmup", "--seed", "--epochs", "--eval-every",
                 "--eval-batches", "--peak-tflops", "--dist-timeout", "--gpus"]
BENCH_OPTIONS = ["--batch-size", "--seq-len", "--steps", "--warmup", "--epochs", "--repeats", "--concurrent",
                 "--max-loss-gap", "--timeout-per-run", "--eval-every", "--eval-batches", "--peak-tflops",
                 "--seeds", "--gpus"]
PROFILE_OPTIONS = ["--batch-size", "--seq-len", "--warmup", "--steps", "--seed"]
DATA_OPTIONS = ["--valid-fraction", "--vocab-size", "--tokenizer-sample-mb"]
EXPORT_OPTIONS = ["--batch-size", "--seq-len", "--steps", "--seed"]
PARITY_OPTIONS = ["--batch-size", "--seq-len", "--steps", "--seed"]
BASE = ["--model", "tiny", "--device", "cpu"]


def options(names):
    return st.dictionaries(st.sampled_from(names), NUMBERS, min_size=1, max_size=4)


def argv_of(chosen: dict) -> list[str]:
    return [part for name, value in chosen.items() for part in (name, value)]


@SETTINGS
@given(chosen=options(TRAIN_OPTIONS))
def test_train_options(stubbed, chosen):
    with tempfile.TemporaryDirectory() as out:
        outcome(["train", *BASE, *argv_of(chosen), "--output-dir", str(Path(out) / "run")])


@SETTINGS
@given(chosen=options(BENCH_OPTIONS))
def test_benchmark_options(stubbed, chosen):
    with tempfile.TemporaryDirectory() as out:
        outcome(["benchmark", *BASE, "--frameworks", "torch", "--precisions", "bf16", *argv_of(chosen),
                 "--output-dir", str(Path(out) / "bench")])


@SETTINGS
@given(chosen=options(PROFILE_OPTIONS))
def test_profile_options(stubbed, chosen):
    with tempfile.TemporaryDirectory() as out:
        outcome(["profile", *BASE, *argv_of(chosen), "--output-dir", str(Path(out) / "p")])


@SETTINGS
@given(chosen=options(DATA_OPTIONS))
def test_data_prepare_options(stubbed, chosen):
    with tempfile.TemporaryDirectory() as out:
        outcome(["data", "prepare", "corpus.txt", *argv_of(chosen), "--out", str(Path(out) / "d")])


@SETTINGS
@given(chosen=options(EXPORT_OPTIONS))
def test_export_configs_options(stubbed, chosen):
    with tempfile.TemporaryDirectory() as out:
        outcome(["export-configs", "--model", "tiny", *argv_of(chosen), "--output-dir", str(Path(out) / "y")])


@SETTINGS
@given(chosen=options(PARITY_OPTIONS))
def test_parity_options(stubbed, chosen):
    outcome(["parity", *argv_of(chosen)])


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=2), st.dictionaries(st.text(max_size=4), inner, max_size=2)),
    max_leaves=4)
FIELDS = ["framework", "precision", "recipe", "model", "batch_size", "seq_len", "steps", "warmup", "seed",
          "synthetic", "data", "eval_every", "eval_batches", "epochs", "compile", "cuda_graphs", "device",
          "peak_tflops", "gpus", "sharding", "dist_timeout_s", "optim", "bogus"]
CONFIG = {"framework": "torch", "precision": "bf16", "model": "tiny", "device": "cpu", "batch_size": 2,
          "seq_len": 16, "steps": 3, "warmup": 1}


@SETTINGS
@given(changes=st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=3),
       dropped=st.lists(st.sampled_from(sorted(CONFIG)), max_size=2))
def test_train_config_files(stubbed, changes, dropped):
    config = {k: v for k, v in {**CONFIG, **changes}.items() if k not in dropped}
    with tempfile.TemporaryDirectory() as out:
        path = Path(out) / "config.json"
        path.write_text(json.dumps({**config, "output_dir": str(Path(out) / "run")}))
        outcome(["train", "--config", str(path)])
        outcome(["profile", "--config", str(path), "--output-dir", str(Path(out) / "p")])


@SETTINGS
@given(content=st.one_of(st.binary(max_size=40), st.text(max_size=40).map(str.encode)))
def test_files_that_are_not_text_or_not_their_format(stubbed, content):
    with tempfile.TemporaryDirectory() as out:
        path = Path(out) / "file"
        path.write_bytes(content)
        outcome(["train", "--config", str(path)])
        outcome(["benchmark", "--plan", str(path), "--output-dir", str(Path(out) / "b")])
        outcome(["export-configs", "--model", "tiny", "--base-yml", str(path), "--output-dir", str(Path(out) / "y")])
        outcome(["profile", "--from-run", out, "--output-dir", str(Path(out) / "p")])


def test_a_run_whose_config_names_no_model_is_not_profiled_as_another(stubbed, tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps({"config": {"framework": "torch"}}))
    assert main(["profile", "--from-run", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"parallax: error: --from-run {tmp_path}: 'precision' is missing; "
                                               "a run configuration names framework, precision, model")


def test_a_base_yml_that_is_not_one_is_not_blamed_on_maxtext(tmp_path, capsys):
    (tmp_path / "base.yml").write_text("just words, no keys\n")
    assert main(["export-configs", "--model", "tiny", "--base-yml", str(tmp_path / "base.yml"),
                 "--output-dir", str(tmp_path / "out")]) == 2
    line = capsys.readouterr().err.strip()
    assert "holds no top-level YAML key: it is not a base.yml" in line and "has no config key" not in line
    assert not (tmp_path / "out").exists()


def test_a_config_that_streams_the_hub_without_network_fails_at_once(tmp_path, capsys, monkeypatch):
    """'synthetic': false without 'data' streams TinyStories from the hub: without a network, one
    connection attempt and one line, not the hub client's retries."""
    import socket

    attempts = []

    def unreachable(address, timeout=None):
        attempts.append((address, timeout))
        raise OSError(-2, "Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setattr(socket, "create_connection", unreachable)
    pytest.importorskip("datasets")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "synthetic": False, "output_dir": str(tmp_path / "run")}))
    assert main(["train", "--config", str(path)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("parallax: error: cannot stream Hugging Face dataset roneneldan/TinyStories: the hub "
                           "(huggingface.co) cannot be reached (Name or service not known)")
    assert attempts == [(("huggingface.co", 443), 5.0)]
    assert not (tmp_path / "run").exists()
