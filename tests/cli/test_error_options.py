"""Every ``--option`` an error names exists on the command that printed it.

How the messages are collected, and why this way: each command's known refusals are run through
the real command line (``parallax.cli.main``), and every ``ParallaxError`` constructed while one
runs is recorded, not only the line that reaches stderr: a message caught and re-worded on the way
is advice that some path can still print. Reading the messages out of the source instead would
check the wrong thing: one module serves several commands (``spec/config.py``'s ``DataConfig``
names ``data prepare``'s options and is imported by ``train``; ``data/loader.py`` runs for
``train`` and ``benchmark`` alike), so whether an option fits depends on the command that reaches
the message, which only running the command tells exactly.

The refusals are the bad-input classes of each command that give advice: numbers out of range,
paths that are missing, empty or damaged, raw text that cannot be split or held out, prepared
data of another vocabulary; for ``train`` and ``data prepare`` every data refusal of issue 29. An
option inside a backticked command (``parallax data prepare --vocab-size 10000``) is checked
against that command instead: advice may send the user to another command, naming it.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil

import click
import pytest

from fixtures.samples import TRAIN, VALID, stories, unseparated

pytest.importorskip("tokenizers")

from parallax.cli import COMMANDS, main  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
NAMED_COMMAND = re.compile(r"`parallax ([a-z-]+(?: [a-z]+)?)([^`]*)`")
TINY = ["--framework", "torch", "--model", "tiny", "--batch-size", "2", "--seq-len", "16", "--device", "cpu",
        "--no-compile", "--steps", "3", "--warmup", "1"]


def command_options(words: list[str]) -> tuple[str, set[str]]:
    """('parallax data prepare', its long options) for the command that ``words`` start with."""
    command = importlib.import_module(COMMANDS[words[0]]).command
    name = f"parallax {words[0]}"
    if isinstance(command, click.Group):
        command, name = command.commands[words[1]], f"{name} {words[1]}"
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
    return name, options | {"--help"}


def foreign_options(argv: list[str], message: str) -> list[str]:
    """The options ``message`` names that its command (``argv``'s, or a backticked one) lacks."""
    wrong = []
    for named in NAMED_COMMAND.finditer(message):
        words = named.group(1).split()
        if words[0] in COMMANDS:
            name, options = command_options(words)
            wrong += [f"{o} (of `{name}`)" for o in OPTION.findall(named.group(2)) if o not in options]
    name, options = command_options(argv)
    rest = NAMED_COMMAND.sub("", message)
    return wrong + [f"{o} (of `{name}`)" for o in OPTION.findall(rest) if o not in options]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Raw texts and prepared folders, all cut from the package's TinyStories sample."""
    root = tmp_path_factory.mktemp("refusals")
    (root / "empty.txt").write_text("")
    (root / "blank.txt").write_text(" \n<|endoftext|>\n\n")
    (root / "one.txt").write_text("\n".join(stories(TRAIN)[:40]) + "\n")  # one paragraph: one document
    unseparated(root / "seven.txt", stories(VALID)[:7])
    unseparated(root / "three.txt", stories(TRAIN)[:3])
    (root / "nothing").mkdir()
    (root / "notes").mkdir()
    (root / "notes" / "notes.md").write_text("mine")
    prepared = root / "vocab5000"
    assert main(["data", "prepare", str(TRAIN), "--valid", str(VALID), "--vocab-size", "5000", "-q",
                 "--out", str(prepared)]) == 0
    broken = root / "broken"
    shutil.copytree(prepared, broken)
    (broken / "meta.json").write_text("{")
    damaged = root / "damaged"
    shutil.copytree(prepared, damaged)
    (damaged / "train.bin").write_bytes((damaged / "train.bin").read_bytes()[:-2])
    meta = json.loads((damaged / "meta.json").read_text())
    assert meta["splits"]["train"]["tokens"] > 0
    return root


REFUSALS = {
    "train": [
        ["--data", "{root}/missing.txt"],
        ["--data", "{root}/empty.txt"],
        ["--data", "{root}/nothing"],
        ["--data", "{root}/blank.txt", "--eval-every", "2"],
        ["--data", "{root}/one.txt", "--eval-every", "2"],  # the issue: advised --valid, --valid-fraction
        ["--data", "{root}/three.txt", "--eval-every", "2", "--eval-batches", "64"],
        ["--data", "{root}/vocab5000"],
        ["--data", "{root}/broken"],
        ["--data", "{root}/damaged"],
        ["--model", "llama-100m", "--data", "{root}/vocab5000"],
        ["--data", "{train}", "--steps", "100000"],
        ["--data", "{train}", "--eval-every", "1", "--eval-batches", "10000"],
        ["--synthetic", "--data", "{root}/one.txt"],
        ["--steps", "5", "--warmup", "0"],
        ["--batch-size", "0"],
        ["--epochs", "0", "--data", "{train}"],
        ["--eval-every", "-1"],
        ["--gpus", "two"],
        ["--recipe", "te-bf16", "--cuda-graphs", "on"],
    ],
    "data prepare": [
        ["--out", "{root}/o"],
        ["{root}/missing.txt", "--out", "{root}/o"],
        ["{root}/empty.txt", "--out", "{root}/o"],
        ["{root}/blank.txt", "--out", "{root}/o"],
        ["{root}/one.txt", "--out", "{root}/o"],
        ["{root}/seven.txt", "--out", "{root}/o"],
        ["{train}", "--valid", "{root}/blank.txt", "--out", "{root}/o"],
        ["{train}", "--out", "{root}/notes"],
        ["{train}", "--out", "{root}/vocab5000", "--vocab-size", "6000"],
        ["{train}", "--valid", "{valid}", "--out", "{root}/damaged", "--vocab-size", "5000"],
        ["{train}", "--out", "{root}/broken"],
        ["{train}", "--out", "{root}/o", "--tokenizer", "{root}/none.json"],
        ["{train}", "--out", "{root}/o", "--tokenizer", "{root}/vocab5000/tokenizer.json"],
        ["{train}", "--out", "{root}/o", "--vocab-size", "70000"],
        ["{train}", "--out", "{root}/o", "--valid-fraction", "0.9"],
        ["{train}", "--out", "{root}/o", "--tokenizer-sample-mb", "0"],
        ["--hf", "--valid", "x.txt", "--out", "{root}/o"],
    ],
    "benchmark": [
        ["--data", "{root}/vocab5000", "--max-loss-gap", "0"],
        ["--steps", "2", "--warmup", "2"],
        ["--repeats", "0"],
        ["--seeds", "0,x"],
    ],
    "parity": [["--seq-len", "33"], ["--steps", "0"], ["--model", "huge"]],
}


def _argv(command: str, args: list[str], root) -> list[str]:
    head = command.split()
    if command == "train":
        head = head + TINY
    elif command == "benchmark":
        head = head + ["--model", "tiny", "--device", "cpu", "--output-dir", str(root / "bench")]
    return head + [a.format(root=root, train=TRAIN, valid=VALID) for a in args]


@pytest.mark.parametrize("command, args", [(c, a) for c, refusals in REFUSALS.items() for a in refusals],
                         ids=lambda x: x if isinstance(x, str) else " ".join(x).replace("{root}/", ""))
def test_every_option_an_error_names_exists_on_its_command(command, args, corpora, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    made: list[str] = []
    original = ParallaxError.__init__

    def recording(self, *args, **kwargs):
        made.append(str(args[0]) if args else "")
        original(self, *args, **kwargs)

    monkeypatch.setattr(ParallaxError, "__init__", recording)
    argv = _argv(command, args, corpora)
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err, err  # a refusal, or the table is stale
    wrong = {message: foreign_options(argv, message) for message in [*made, err[-1]]}
    assert not {m: f for m, f in wrong.items() if f}


def test_the_check_catches_advice_for_another_command():
    """The check itself: advice naming data prepare's options from train is caught, the same
    advice inside a backticked `parallax data prepare ...` is not."""
    train = ["train", "--data", "x.txt"]
    message = "no validation text: holding out every 100-th of 1 documents left none; pass --valid FILE " \
              "(or a larger --valid-fraction)"
    assert foreign_options(train, message) == ["--valid (of `parallax train`)", "--valid-fraction (of `parallax train`)"]
    assert foreign_options(train, "prepare it with `parallax data prepare --valid-fraction 0.5`") == []
    assert foreign_options(train, "see `parallax data prepare --valid-frac`") == [
        "--valid-frac (of `parallax data prepare`)"]
    assert foreign_options(["data", "prepare"], "lower --eval-batches") == ["--eval-batches (of `parallax data prepare`)"]
