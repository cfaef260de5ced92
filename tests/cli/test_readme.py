"""The README's commands are real: every `parallax ...` line of its code blocks names a command and
only options that command has, every command has an example, and `make run` / `make test` exist."""

import re
from pathlib import Path

import click

from parallax.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[2]


def command_lines(text: str) -> list[str]:
    """The `parallax ...` lines of the ```bash blocks, continuation lines joined, comments kept."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("parallax "):
                lines.append(line)
    return lines


def resolve(line: str) -> tuple[str, click.Command]:
    """The command path ('data prepare') and the click command a README line runs."""
    words = line.split()[1:]
    ctx = click.Context(cli)
    command, path = cli.get_command(ctx, words[0]), [words[0]]
    while isinstance(command, click.Group):
        path.append(words[len(path)])
        command = command.get_command(ctx, path[-1])
    assert command is not None, f"README: no command for {line!r}"
    return " ".join(path), command


def unknown_options(line: str) -> list[str]:
    """Options of a README line that its command does not have."""
    _, command = resolve(line)
    known = {name for param in command.params for name in getattr(param, "opts", []) + getattr(param, "secondary_opts", [])}
    return [opt for opt in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line) if opt not in known]


def test_every_option_the_readme_shows_exists_on_its_command():
    lines = command_lines((ROOT / "README.md").read_text())
    assert len(lines) >= len(COMMANDS)
    assert {line: unknown_options(line) for line in lines if unknown_options(line)} == {}


def test_every_command_has_an_example_in_the_readme():
    shown = {resolve(line)[0].split()[0] for line in command_lines((ROOT / "README.md").read_text())}
    assert shown == set(COMMANDS)


def test_an_option_a_command_lacks_is_found():
    assert unknown_options("parallax train --model tiny --valid-fraction 0.1  # --steps 10") == ["--valid-fraction"]
    assert unknown_options("parallax data prepare corpus.txt --out tokens --valid-fraction 0.1") == []
    assert command_lines("```bash\nparallax benchmark --frameworks torch \\\n    --report\n```\n") == [
        "parallax benchmark --frameworks torch      --report"]


def test_the_two_commands_on_the_readmes_first_lines_exist():
    head = (ROOT / "README.md").read_text().splitlines()[:6]
    assert any(line.startswith("make run ") for line in head) and any(line.startswith("make test ") for line in head)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^run: ", makefile, re.M) and re.search(r"^test: ", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
