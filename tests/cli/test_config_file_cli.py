"""``parallax train --config FILE``: every wrong type, range or missing field of the file is one
line and exit 2, before any compute and before anything is written (spec/config_schema.py)."""

from __future__ import annotations

import json

import pytest

from fixtures.cli import one_error_line

from parallax.cli import main
from parallax.spec.config import RunConfig

BASE = {"framework": "torch", "precision": "bf16", "model": "tiny", "device": "cpu"}


@pytest.mark.parametrize("fields, message", [
    ({"steps": "five"}, "'steps' must be an integer, got \"five\""),
    ({"batch_size": "8"}, "'batch_size' must be an integer, got \"8\""),
    ({"batch_size": 8.7}, "'batch_size' must be an integer, got 8.7"),
    ({"steps": True}, "'steps' must be an integer, got true"),
    ({"compile": 1}, "'compile' must be true or false, got 1"),
    ({"framework": 3}, "'framework' must be a string, got 3"),
    ({"epochs": 0}, "'epochs' must be greater than 0, got 0"),
    ({"warmup": -1}, "'warmup' must be at least 0, got -1"),
    ({"optim": {"lr": "fast"}}, "'optim.lr' must be a number, got \"fast\""),
    ({"optim": {"lr": -1}}, "'optim.lr' must be greater than 0, got -1"),
    ({"optim": {"beta2": 1.0}}, "'optim.beta2' must be below 1, got 1.0"),
    ({"optim": {"speed": 1}}, "unknown field 'optim.speed'; the fields are: beta1, beta2, eps"),
    ({"optim": []}, "'optim' must be a JSON object, got []"),
    ({"stepz": 5}, "unknown field 'stepz'; the fields are: batch_size, compile, cuda_graphs"),
])
def test_a_bad_field_is_one_line_and_nothing_is_written(tmp_path, monkeypatch, capsys, fields, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.json").write_text(json.dumps({**BASE, "output_dir": "out", **fields}))
    assert main(["train", "--config", "c.json"]) == 2
    assert one_error_line(capsys).startswith(f"parallax: error: --config c.json: {message}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]


@pytest.mark.parametrize("missing", ["framework", "precision", "model"])
def test_a_file_must_name_what_it_runs(tmp_path, capsys, missing):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({k: v for k, v in BASE.items() if k != missing}))
    assert main(["train", "--config", str(path)]) == 2
    assert one_error_line(capsys) == (f"parallax: error: --config {path}: '{missing}' is missing; "
                                      "a run configuration names framework, precision, model")


@pytest.mark.parametrize("text, message", [
    ("[1]", "a run configuration is a JSON object, got list"),
    ("{", "is not JSON (Expecting property name"),
])
def test_a_file_that_is_not_a_configuration(tmp_path, capsys, text, message):
    path = tmp_path / "c.json"
    path.write_text(text)
    assert main(["train", "--config", str(path)]) == 2
    assert message in one_error_line(capsys)


def test_what_to_dict_writes_reads_back_with_its_types():
    run = RunConfig.for_preset("tiny", epochs=2.0, peak_tflops=100.0)
    assert RunConfig.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    data = {**run.to_dict(), "epochs": 2, "optim": {"lr": 1}}  # JSON integers in float fields
    loaded = RunConfig.from_dict(data)
    assert (loaded.epochs, loaded.optim.lr) == (2.0, 1.0)
    assert isinstance(loaded.epochs, float) and isinstance(loaded.optim.lr, float)
