"""errors.installed finds an optional library without importing it: importing TransformerEngine loads a
cuDNN, and on a machine with a system cuDNN beside pip's that must wait until the engine chose one (a
GPU fixture that imported TE first failed with an undefined cuDNN symbol, docs/results/2026-12-03-h200-b)."""

import subprocess
import sys

import pytest

from parallax.errors import ParallaxError, installed, require_installed


def test_finds_packages_and_submodules_without_importing_them():
    code = ("import sys; from parallax.errors import installed; "
            "print(installed('email.mime.text'), installed('xml.dom.minidom'), 'email.mime' in sys.modules, "
            "'xml.dom' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False", "False"]


def test_missing_modules_and_submodules_are_not_installed():
    assert not installed("no_such_package_parallax")
    assert not installed("json.no_such_submodule")
    assert not installed("json.decoder.not_a_package")  # a module, not a package: nothing beneath it


def test_a_blocked_import_counts_as_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "json", None)
    assert not installed("json.decoder")
    with pytest.raises(ParallaxError) as err:
        require_installed("json.decoder", "te")
    assert str(err.value) == "json.decoder is not installed; install it with: pip install 'slm-parallax[te]'"
