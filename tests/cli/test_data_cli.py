"""`parallax data prepare` through the real command line: output, no-op re-run, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.samples import TRAIN, VALID

pytest.importorskip("tokenizers")

from parallax.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """The package's sample prepared through the command line (this module's own, not conftest's)."""
    out = tmp_path_factory.mktemp("cli") / "tokens"
    assert main(["data", "prepare", str(TRAIN), str(VALID), "--out", str(out), "--quiet"]) == 0
    return out


def test_prepare_writes_the_directory_and_a_summary(prepared, capsys):
    meta = json.loads((prepared / "meta.json").read_text())
    assert sorted(p.name for p in prepared.iterdir()) == ["meta.json", "tokenizer.json", "train.bin", "validation.bin"]
    assert meta["tokenizer"]["vocab_size"] == 10_000
    # Re-running is a no-op that says so.
    assert main(["data", "prepare", str(TRAIN), str(VALID), "-o", str(prepared)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # wrapped to the terminal
    assert out.strip() == f"{prepared}: up to date (same inputs and settings; files verified), nothing to do"


def test_summary_reports_counts_and_speed(prepared, tmp_path, capsys):
    out = tmp_path / "again"
    code = main(["data", "prepare", str(TRAIN), str(VALID), "-o", str(out),
                 "--tokenizer", str(prepared / "tokenizer.json"), "--valid-fraction", "0.5", "-q"])
    assert code == 0
    meta = json.loads((out / "meta.json").read_text())
    line = " ".join(capsys.readouterr().out.split())  # wrapped to the terminal
    train, valid = meta["splits"]["train"], meta["splits"]["validation"]
    assert valid["documents"] == (400 + 100) // 2
    # train.txt and valid.txt: 330,538 + 83,967 bytes, 0.4 MB
    assert line.startswith(f"{out}: train {train['tokens']:,} tokens ({train['documents']:,} documents), "
                           f"validation {valid['tokens']:,} tokens ({valid['documents']:,} documents); "
                           f"tokenizer 10,000 tokens, sha256 {meta['tokenizer']['sha256'][:12]}; tokenized 0.4 MB in ")
    assert line.endswith(f"MB/s, {meta['tokenization']['threads']} threads)")


@pytest.mark.parametrize("args, message", [
    (["data", "prepare", "--out", "{tmp}/o"], "no corpus given"),
    (["data", "prepare", "{tmp}/missing.txt", "--out", "{tmp}/o"], "missing.txt: no such file or directory"),
    (["data", "prepare", "{tmp}/empty.txt", "--out", "{tmp}/o"], "empty.txt: empty file"),
    (["data", "prepare", "{tmp}/corpus.txt", "--out", "{tmp}/o", "--tokenizer", "{tmp}/none.json"],
     "none.json: no such file"),
    (["data", "prepare", "{tmp}/corpus.txt", "--out", "{tmp}/o", "--vocab-size", "70000"],
     "--vocab-size must be in [2, 65536]"),
    (["data", "prepare", "--hf", "--valid", "x.txt", "--out", "{tmp}/o"], "with --hf the dataset's validation split"),
    (["data", "prepare", "{tmp}/corpus.txt"], "Missing option '--out'"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "corpus.txt").write_text("Once upon a time there was a cat.\n<|endoftext|>\nThe end.\n")
    code = main([a.replace("{tmp}", str(tmp_path)) for a in args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("parallax: error: ") and err.count("\n") == 1
    assert message in err


def test_a_tokenizer_of_another_size_is_refused(prepared, tmp_path, capsys):
    code = main(["data", "prepare", str(TRAIN), "-o", str(tmp_path / "o"), "--tokenizer",
                 str(prepared / "tokenizer.json"), "--vocab-size", "8000"])
    assert code == 2
    assert "has 10,000 tokens but the model's vocabulary is 8,000" in capsys.readouterr().err


def test_data_group_lists_prepare(capsys):
    assert main(["data", "--help"]) == 0
    assert "prepare" in capsys.readouterr().out
