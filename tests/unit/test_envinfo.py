"""The environment record: versions from metadata, the probe passed through, no heavy imports."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys

import pytest

import parallax.native
from parallax.plan import envinfo

PROBE = {
    "driver": {"available": False, "error": "libcuda.so.1: not found", "library": None, "version": None,
               "version_str": None},
    "nvml": {"available": False, "error": "libnvidia-ml.so.1: not found", "library": None, "driver_version": None},
    "devices": [],
}


def test_environment_fields():
    env = envinfo.environment(PROBE)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", env["captured_at"])
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["parallax"] == parallax.__version__
    assert env["cuda_driver"] is PROBE["driver"]
    assert env["nvml"] is PROBE["nvml"]
    assert env["gpus"] == []
    assert env["gpu_topology"] is None  # this probe read no topology; gpu.probe() always does
    assert env["hostname"] and env["platform"]
    assert set(env["packages"]) == set(envinfo.PACKAGES)
    assert env["packages"]["numpy"] == importlib.metadata.version("numpy")
    json.dumps(env)  # it goes into run.json as is


def test_package_versions_absent_is_none():
    assert envinfo.package_version("no-such-distribution-parallax") is None
    assert envinfo.package_versions(("numpy", "no_such_dist_x")) == {
        "numpy": importlib.metadata.version("numpy"),
        "no_such_dist_x": None,
    }


def test_probe_failure_becomes_a_probe_shaped_answer(monkeypatch):
    class Broken:
        @staticmethod
        def probe():
            raise RuntimeError("native module failed to load")

    monkeypatch.setitem(sys.modules, "parallax.native.gpu", Broken)
    monkeypatch.setattr(parallax.native, "gpu", Broken, raising=False)
    probe = envinfo.probe_gpus()
    assert probe["devices"] == []
    assert probe["driver"]["available"] is False
    assert probe["driver"]["error"] == "GPU probe failed: RuntimeError: native module failed to load"


def test_environment_imports_neither_torch_nor_jax():
    code = (
        "import sys; from parallax.plan import envinfo; envinfo.environment(); "
        "print(sorted(m for m in ('torch', 'jax', 'flax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("version, minimum, expected", [
    ("2.20.2+cu13", "2.19", False), ("2.19.0.dev0", "2.19", False), ("2.18.9", "2.19", True),
    ("2.9", "2.19", True), ("0.2.5", "0.2.5", False), ("0.2.4", "0.2.5", True), ("2.19rc1", "2.19", False),
])
def test_release_versions_compare_by_their_numeric_parts(version, minimum, expected):
    assert envinfo.older(version, minimum) is expected


def test_a_modules_version_falls_back_to_its_distributions():
    class Bare:
        pass

    class Versioned:
        __version__ = "1.2.3"

    assert envinfo.module_version(Versioned, ("not-installed",)) == "1.2.3"
    assert envinfo.module_version(Bare, ("not-installed", "numpy")) == envinfo.package_version("numpy")
    assert envinfo.module_version(Bare, ("not-installed",)) is None
