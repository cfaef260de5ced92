"""scripts/ensure_system_deps.sh (run by `make setup` and `make test`): what it installs, when.

A fake dpkg-query, apt-get and id stand in for the machine's, so every case is decided
without touching the system: installed or missing, root or not, Debian or not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure_system_deps.sh"


@pytest.fixture
def machine(tmp_path):
    """Run the script on a fake machine: ``installed`` Debian packages, ``uid``, ``debian``."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    apt_log = tmp_path / "apt.log"

    def tool(name, body):
        path = fake_bin / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def run(*args, installed=(), uid=0, debian=True, cxx="c++"):
        for stale in fake_bin.iterdir():
            stale.unlink()
        for real in ("grep", "c++"):  # PATH is this folder only: the real apt-get is never reached
            (fake_bin / real).symlink_to(shutil.which(real))
        tool("id", f'[ "$1" = -u ] && echo {uid}\n')
        if debian:
            tool("dpkg-query", 'for p in $FAKE_INSTALLED; do [ "$p" = "$3" ] && printf "install ok installed" '
                               '&& exit 0; done; exit 1\n')
            tool("apt-get", f'echo "$@" >> {apt_log}\n')
        env = dict(os.environ, PATH=str(fake_bin), FAKE_INSTALLED=" ".join(installed),
                   PYTHON=sys.executable, CXX=cxx)
        apt_log.unlink(missing_ok=True)
        proc = subprocess.run([shutil.which("bash"), str(SCRIPT), *args], capture_output=True, text=True, env=env,
                              timeout=60)
        calls = apt_log.read_text().splitlines() if apt_log.exists() else []
        return proc, calls

    return run


def test_nothing_missing_does_nothing_and_says_nothing(machine):
    proc, calls = machine("--tests", installed=["libgtest-dev", "chromium"])
    assert (proc.returncode, proc.stdout, proc.stderr, calls) == (0, "", "", [])


def test_build_only_does_not_ask_for_googletest(machine):
    proc, calls = machine(installed=[])
    assert (proc.returncode, calls) == (0, [])


def test_root_installs_what_is_missing_after_one_update(machine):
    proc, calls = machine("--tests", installed=[], cxx="no-such-compiler")
    assert proc.returncode == 0, proc.stderr
    assert calls == ["update -qq", "install -y -qq --no-install-recommends g++ libgtest-dev chromium"]
    assert proc.stderr.strip() == "ensure_system_deps: installing g++ libgtest-dev chromium"


def test_not_root_names_what_to_install_in_one_line_and_fails(machine):
    proc, calls = machine("--tests", installed=[], uid=1000)
    assert proc.returncode == 1 and calls == []
    assert proc.stderr.strip() == ("ensure_system_deps: missing system packages: libgtest-dev chromium; install them "
                                   "with: sudo apt-get update && sudo apt-get install -y libgtest-dev chromium")


def test_not_debian_is_a_note_and_leaves_the_rest_to_cmake(machine):
    proc, calls = machine("--tests", debian=False)
    assert proc.returncode == 0 and calls == []
    assert "not a Debian system; make sure these are installed: GoogleTest" in proc.stderr


def test_an_unknown_argument_is_refused(machine):
    proc, _ = machine("--everything")
    assert proc.returncode == 2 and "unknown argument '--everything'" in proc.stderr


def test_makefile_runs_it_before_the_venv_and_the_cpp_suite():
    makefile = (SCRIPT.parents[1] / "Makefile").read_text()
    assert "bash scripts/ensure_system_deps.sh --tests" in makefile
    setup = makefile.split("$(VENV)/.setup-done:")[1]
    assert setup.index("ensure_system_deps.sh") < setup.index("-m venv")
    ci = (SCRIPT.parents[1] / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == "make test" and not any("apt-get" in line for line in ci)
