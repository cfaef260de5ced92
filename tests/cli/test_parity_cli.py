"""``parallax parity`` through the real CLI."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from fixtures.cli import one_error_line  # noqa: E402

from parallax.analysis import parity  # noqa: E402
from parallax.cli import main  # noqa: E402


def test_parity_prints_the_table_passes_and_writes_json(tmp_path, capsys):
    path = tmp_path / "parity.json"
    assert main(["parity", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    for text in ("logits", "gradients", "params, 3 steps", "max rel err", "PASS"):
        assert text in out
    report = json.loads(path.read_text())
    assert report["passed"] is True and report["gate"] is True
    assert report["settings"]["dtype"] == "float32" and report["backends"]["jax"] == "xla"
    loss = next(row for row in report["rows"] if row["quantity"] == "loss")
    assert loss["max_rel"] <= 1e-5 and loss["tolerance"] == 1e-5


def test_parity_exits_1_when_a_gated_quantity_fails(monkeypatch, capsys):
    impossible = parity.Tolerances(logits=1e-12, loss=1e-12, grads=1e-12, step_losses=1e-12, params=1e-12,
                                   updates=1e-12, gate=True)
    monkeypatch.setitem(parity.TOLERANCES, "float32", impossible)
    assert main(["parity", "--steps", "1", "--seq-len", "8"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out


@pytest.mark.parametrize("args, message", [
    (["--dtype", "float16"], "Invalid value for '--dtype'"),
    (["--seq-len", "33"], "--seq-len must be even"),
    (["--model", "huge"], "unknown model preset 'huge'"),
    (["--steps", "0"], "--steps must be positive"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    assert main(["parity", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("parallax: error: ") and message in err


@pytest.mark.parametrize("where", ["file-as-folder", "directory"])
def test_an_unwritable_json_path_is_refused_before_the_run(tmp_path, capsys, monkeypatch, where):
    monkeypatch.setattr("parallax.cli.parity.run_parity", lambda *a: pytest.fail("the run started"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = blocker / "parity.json" if where == "file-as-folder" else tmp_path
    assert main(["parity", "--json", str(path)]) == 2
    line = one_error_line(capsys)
    if where == "directory":
        assert line.startswith("parallax: error: Invalid value for '--json'") and "is a directory" in line
    else:
        assert line == (f"parallax: error: --json '{path}' cannot be written (its folder '{blocker}' is not writable); "
                        "pass --json with a writable path")
