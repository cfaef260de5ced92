"""An error line through the real command: on a terminal, wrapped at the terminal's width (words
never cut, the lines after the first indented by two spaces); in a pipe or a log, one line as it
is, so that ``grep 'parallax: error'`` keeps the whole message. The terminal is a pseudo-terminal
of 80, then 60, columns."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from parallax.errors import wrap

# 228 columns in one line; its longest word is 22 characters, so every wrapped line fits
LONG_ERROR = ["benchmark", "--plan", "no-such-plan"]
START_S = 60  # a guard against a child that hangs, not a timing threshold


def child_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def piped(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parallax", *args], capture_output=True, text=True,
                          env=child_env(), timeout=START_S)


def on_terminal(args: list[str], columns: int) -> tuple[int, list[str]]:
    """(exit code, stderr's lines) of the command with its stderr on a terminal ``columns`` wide."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "parallax", *args], stdout=subprocess.DEVNULL, stderr=follower,
                            env=child_env())
    os.close(follower)
    said = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # Linux: EIO once the child's end is closed
            break
        if not chunk:
            break
        said += chunk
    os.close(leader)
    return proc.wait(timeout=START_S), said.decode().splitlines()


def test_a_pipe_gets_the_error_as_one_line():
    done = piped(LONG_ERROR)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("parallax: error: unknown plan")
    assert len(done.stderr.rstrip("\n")) > 200


@pytest.mark.parametrize("columns", [80, 60])
def test_a_terminal_gets_the_error_wrapped_at_its_width(columns):
    line = piped(LONG_ERROR).stderr.rstrip("\n")
    code, lines = on_terminal(LONG_ERROR, columns)
    assert code == 2
    assert len(lines) >= len(line) // columns + 1 and lines[0].startswith("parallax: error: ")
    assert [len(row) for row in lines if len(row) > columns] == []
    assert all(row.startswith("  ") and not row.startswith("   ") for row in lines[1:])
    assert " ".join(row.strip() for row in lines) == line  # no word cut, none lost


def test_a_path_longer_than_the_terminal_stays_whole():
    path = "/no/such/folder/" + "a-very-long-folder-name/" * 4 + "run-config.json"
    assert wrap(f"parallax: error: --config {path}: No such file or directory", 60) == [
        "parallax: error: --config", f"  {path}:", "  No such file or directory"]


@pytest.mark.parametrize("terminal", [False, True], ids=["log", "terminal"])
def test_a_benchmarks_warning_follows_the_same_rule(terminal):
    import io

    from rich.console import Console

    from parallax.cli.benchmark import LiveDisplay

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=terminal, width=60, color_system=None)
    text = ("extending the benchmark by 3 run(s) of jax bf16, jax flax-fp8-delayed, jax flax-fp8-direct "
            "(the folder's matrix.json named fewer cells)")
    LiveDisplay(console, steps=10).warning(text)
    lines = buffer.getvalue().splitlines()
    if not terminal:  # a log: one line, whole
        assert lines == [f"parallax: warning: {text}"]
        return
    assert lines == wrap(f"parallax: warning: {text}", 60) and len(lines) == 3
