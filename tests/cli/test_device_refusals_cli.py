"""Refusals about the device that name what does work: a GPU-only recipe on the CPU names the
recipes of its format that run there, ``parity --device gpu`` without a GPU names parity's own
choice, and a PARALLAX_CUDA_LIB_DIRS entry that is no folder is named instead of ignored."""

from __future__ import annotations

import pytest

from fixtures.cli import one_error_line

from parallax.cli import main

CPU = ["train", "--device", "cpu", "--model", "tiny", "--steps", "3", "--warmup", "1"]


@pytest.mark.parametrize("args, advice", [
    (["--recipe", "te-fp8-delayed"], "fp8 recipes that run on the CPU: torchao-fp8-tensorwise, torchao-fp8-rowwise; "
                                     "or run on a GPU"),
    (["--framework", "jax", "--recipe", "te-fp8-delayed"], "use --recipe flax-fp8-delayed: what --precision fp8 "
                                                           "picks here"),
    (["--recipe", "te-nvfp4"], "use --recipe emulated-nvfp4: what --precision nvfp4 picks here"),
])
def test_a_gpu_recipe_on_the_cpu_names_what_runs_there(tmp_path, monkeypatch, capsys, args, advice):
    monkeypatch.chdir(tmp_path)
    assert main([*CPU, *args]) == 2
    line = one_error_line(capsys)
    assert line.endswith(f"this run is on the CPU ({advice})") and "pick a bf16 recipe" not in line


def test_parity_on_a_gpu_that_is_not_there_names_parity_s_choice(monkeypatch, capsys):
    monkeypatch.setattr("parallax.plan.machine.devices", lambda: [])
    assert main(["parity", "--device", "gpu"]) == 2
    assert one_error_line(capsys) == "parallax: error: --device gpu: no NVIDIA GPU found on this machine; use --device cpu"


def test_a_cuda_lib_dir_that_is_no_folder_is_named(tmp_path, monkeypatch, capsys):
    from parallax.plan import machine

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PARALLAX_CUDA_LIB_DIRS", f"{tmp_path}:garbage")
    machine.forget()
    assert main(["check-env", "--json"]) == 2
    assert one_error_line(capsys) == ("parallax: error: PARALLAX_CUDA_LIB_DIRS: 'garbage' is not a folder; "
                                      "list existing folders separated by ':', or unset it")
    assert list(tmp_path.iterdir()) == []
