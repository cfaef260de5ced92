"""What the MaxText child process gets besides its config (engines/maxtext/launch.py): pip's
cuDNN for every libcudnn it opens, and the line of its log that says why it failed."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from parallax.engines.maxtext import launch


@pytest.fixture
def pip_cudnn(tmp_path, monkeypatch):
    """A site-packages with nvidia/cudnn/lib/libcudnn.so.9 (and a cuBLAS beside it) on sys.path."""
    for package, lib in (("cudnn", "libcudnn.so.9"), ("cublas", "libcublas.so.13")):
        folder = tmp_path / "site" / "nvidia" / package / "lib"
        folder.mkdir(parents=True)
        (folder / lib).write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    importlib.invalidate_caches()
    return str(tmp_path / "site" / "nvidia" / "cudnn" / "lib")


def test_te_and_its_sub_libraries_get_pips_cudnn(pip_cudnn):
    env = launch.one_cudnn({"LD_LIBRARY_PATH": f"/usr/local/cuda/lib64{os.pathsep}{pip_cudnn}"})
    assert env == {"CUDNN_PATH": os.path.dirname(pip_cudnn),
                   "LD_LIBRARY_PATH": f"{pip_cudnn}{os.pathsep}/usr/local/cuda/lib64"}  # first, once
    assert launch.one_cudnn({})["LD_LIBRARY_PATH"] == pip_cudnn


@pytest.mark.parametrize("chosen", ["CUDNN_HOME", "CUDNN_PATH"])
def test_a_users_own_cudnn_is_left_alone(pip_cudnn, chosen):
    assert launch.one_cudnn({chosen: "/opt/cudnn"}) == {}


def test_no_pip_cudnn_changes_nothing(monkeypatch):
    monkeypatch.setattr(launch, "pip_cudnn_folder", lambda: None)
    assert launch.one_cudnn({"LD_LIBRARY_PATH": "/x"}) == {}


def test_the_child_env_has_it(pip_cudnn, monkeypatch):
    monkeypatch.delenv("CUDNN_HOME", raising=False)
    monkeypatch.delenv("CUDNN_PATH", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    env = launch.child_env(1)
    assert (env["CUDA_VISIBLE_DEVICES"], env["DECOUPLE_GCLOUD"]) == ("5", "TRUE")
    assert env["CUDNN_PATH"] == os.path.dirname(pip_cudnn)
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == pip_cudnn


# the tail MaxText 0.2.5 printed on the H200 when TE could not load (2026-12-01), shortened
H200_TAIL = """\
  File "/tmp/carry-site/transformer_engine/common/__init__.py", line 485, in _load_core_library
    return ctypes.CDLL(_get_shared_object_file("core"), mode=ctypes.RTLD_GLOBAL | os.RTLD_LAZY)
OSError: /lib/x86_64-linux-gnu/libcudnn_heuristic.so.9: undefined symbol: _ZTVN5cudnn7backend12OperationSetE, \
version libcudnn_graph.so.9
--------------------
For simplicity, JAX has removed its internal frames from the traceback of the following exception. Set \
JAX_TRACEBACK_FILTERING=off to include these.
"""


@pytest.mark.parametrize("tail,line", [
    (H200_TAIL, "OSError: /lib/x86_64-linux-gnu/libcudnn_heuristic.so.9: undefined symbol: "
                "_ZTVN5cudnn7backend12OperationSetE, version libcudnn_graph.so.9"),
    ("Traceback (most recent call last):\njax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: 99 GiB\n",
     "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: 99 GiB"),
    ("I1201 step 3\nKilled\n\n", "Killed"),  # no exception line: the last line
    ("--------------------\n", "no output"),
    ("", "no output"),
])
def test_the_failure_line_is_the_exception_not_jaxs_note(tail, line):
    assert launch.failure_line(tail) == line


@pytest.mark.parametrize("recipe, platform", [("bf16", "cpu"), ("fp8_gpu", "cpu"), ("fp8", "cpu"),
                                              ("te_fp8_delayedscaling", None), ("te_nvfp4", None),
                                              (None, None)])  # --precision nvfp4 alone: its default, te_nvfp4
def test_initial_weights_run_on_the_cpu_except_for_tes_modes(recipe, platform, tmp_path, monkeypatch):
    """TE's primitives have no CPU lowering, and the te_* modes' concrete init runs TE's quantize."""
    from parallax.plan.resolve import planned
    from parallax.spec.config import RunConfig
    seen = {}

    def fake_run(command, env, **kw):
        seen.update(env=env, command=command)
        return subprocess.CompletedProcess(command, 0, "parallax-maxtext-weights: x\nparallax-maxtext-parameters: 7\n", "")

    monkeypatch.setattr(launch.subprocess, "run", fake_run)
    fmt = {"bf16": "bf16", "te_nvfp4": "nvfp4", None: "nvfp4"}.get(recipe, "fp8")
    run = RunConfig(framework="maxtext", precision=fmt, recipe=recipe, model="tiny")
    given = {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "3"}
    (tmp_path / "maxtext").mkdir()
    parameters = launch.write_initial_weights(run, planned(run).recipe, tmp_path / "c.yml", launch.Layout(tmp_path),
                                              tmp_path / "w", given)
    assert parameters == 7 and seen["command"][-2:] == ["tiny", "0"]
    assert seen["env"].get("JAX_PLATFORMS") == platform and seen["env"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert seen["env"].get("XLA_PYTHON_CLIENT_PREALLOCATE") == (None if platform else "false")
