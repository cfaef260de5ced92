"""`parallax` itself: bare, --help, and the spec's commands that are not here yet."""

from __future__ import annotations

import subprocess
import sys

from fixtures.cli import one_error_line

from parallax.cli import main


def test_bare_parallax_prints_the_help_and_exits_0():
    proc = subprocess.run([sys.executable, "-m", "parallax"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("Usage: parallax [OPTIONS] [COMMAND] [ARGS]...")
    assert "parallax: error" not in proc.stdout
    assert proc.stdout == subprocess.run([sys.executable, "-m", "parallax", "--help"], capture_output=True,
                                         text=True, timeout=120).stdout


def test_help_lists_export_configs_and_nothing_as_not_yet(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "export-configs" in text and "Not yet" not in text


def test_export_configs_without_output_dir_is_one_line(capsys):
    assert main(["export-configs"]) == 2
    assert one_error_line(capsys) == ("parallax: error: Missing option '--output-dir'. "
                                      "(see 'parallax export-configs --help')")


def test_an_unknown_command_is_one_line(capsys):
    assert main(["trian"]) == 2
    assert one_error_line(capsys) == "parallax: error: No such command 'trian'. (see 'parallax --help')"
