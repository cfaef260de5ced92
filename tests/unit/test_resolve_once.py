"""A run is resolved once per process (``parallax.plan``): the native GPU probe is asked once,
``--gpus`` becomes a count once, the run is validated once and its recipe looked up in the
registry once — over a whole CPU ``train`` and a ``benchmark`` up to its cells (a fake trainer
runs them). Everything after ``plan.resolve`` reads the recipe from the ``RunPlan``."""

from __future__ import annotations

import ast
import json
import pathlib
import sys

import pytest

from fixtures.matrix import fake_command

from parallax.cli import main
from parallax.native import gpu
from parallax.plan import machine, world
from parallax.plan.resolve import resolve
from parallax.run import runner
from parallax.spec import registry
from parallax.spec.config import RunConfig

TINY = ["--framework", "torch", "--batch-size", "2", "--seq-len", "16", "--no-compile", "--steps", "3",
        "--warmup", "1"]


@pytest.fixture
def counted(monkeypatch):
    """How often the native probe, --gpus resolution and RunConfig.validate ran."""
    calls = {"probe": 0, "resolve_gpus": 0, "validate": 0}

    def counting(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(gpu, "probe", counting("probe", gpu.probe))
    monkeypatch.setattr(world, "resolve_gpus", counting("resolve_gpus", world.resolve_gpus))
    monkeypatch.setattr(RunConfig, "validate", counting("validate", RunConfig.validate))
    return calls


def test_a_cpu_train_probes_the_gpu_once(tmp_path, counted, lookups):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    # --model auto asks for a GPU, the recipe's default and the environment record ask again:
    # the probe answers once
    assert main(["train", *TINY, "--gpus", "1", "--output-dir", str(out)]) == 0
    assert counted == {"probe": 1, "resolve_gpus": 1, "validate": 1}
    assert outside_the_registry(lookups) == [("resolve", "parallax.plan.resolve")]  # bf16's default, once
    run = json.loads((out / "run.json").read_text())
    assert run["environment"]["gpus"] == machine.probe()["devices"] == []
    assert (run["config"]["model"], run["config"]["gpus"], run["config"]["recipe"]) == ("tiny", 1, "bf16")


def test_a_benchmark_probes_the_gpu_once_before_its_cells(tmp_path, counted, monkeypatch):
    monkeypatch.setattr(runner, "train_command", fake_command)
    monkeypatch.setattr(runner, "collect_environment", lambda: {"python": "3.x", "gpus": []})
    monkeypatch.setenv("FAKE_TRAIN_PLAN", "{}")
    out = tmp_path / "bench"
    code = main(["benchmark", "--frameworks", "torch", "--precisions", "bf16,nvfp4", "--steps", "3", "--warmup",
                 "1", "--batch-size", "2", "--seq-len", "16", "--no-compile", "--gpus", "1", "--output-dir", str(out)])
    assert code == 0
    assert counted["probe"] == 1  # --model auto, --gpus, the nvfp4 default: one probe of this process
    index = json.loads((out / "index.json").read_text())
    assert [c["id"] for c in index["cells"]] == ["torch-bf16-seed0-rep0", "torch-emulated-nvfp4-seed0-rep0"]


def test_resolve_names_the_recipe_and_counts_the_gpus_once(counted):
    plan = resolve(RunConfig.for_preset("tiny", framework="torch", precision="nvfp4", device="cpu", gpus="2"))
    assert (plan.run.gpus, plan.run.recipe, plan.run.precision) == (2, "emulated-nvfp4", "nvfp4")
    assert plan.recipe is registry.get("torch", "emulated-nvfp4")
    assert counted == {"probe": 0, "resolve_gpus": 1, "validate": 1}  # the CPU: no GPU asked


@pytest.fixture
def lookups(monkeypatch):
    """Every lookup of a recipe in the registry (its get, resolve or default), in order:
    (the function, the module that called it)."""
    calls: list[tuple[str, str]] = []

    def counting(name, function):
        def wrapper(*args, **kwargs):
            calls.append((name, sys._getframe(1).f_globals.get("__name__", "?")))
            return function(*args, **kwargs)
        return wrapper

    for name in ("get", "resolve", "default"):
        monkeypatch.setattr(registry, name, counting(name, getattr(registry, name)))
    return calls


def outside_the_registry(lookups: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The lookups the package asked for (``registry.resolve`` asks ``get`` or ``default`` itself)."""
    return [call for call in lookups if call[1] != registry.__name__]


@pytest.mark.parametrize("framework,recipe", [("torch", "torchao-fp8-tensorwise"), ("jax", "flax-fp8-delayed")])
def test_a_train_looks_its_recipe_up_once_and_everything_after_reads_the_plan(tmp_path, lookups, framework,
                                                                             recipe):
    """The engine, the driver's MFU peak and run.json's recipe record all read the RunPlan."""
    pytest.importorskip(framework)
    out = tmp_path / "run"
    options = [*TINY[2:], "--framework", framework, "--recipe", recipe, "--device", "cpu"]
    if framework == "jax":
        options.remove("--no-compile")
    assert main(["train", *options, "--output-dir", str(out)]) == 0
    assert json.loads((out / "run.json").read_text())["recipe"]["name"] == recipe
    # one lookup, in plan.resolve (the registry's resolve then asks its own get for the name)
    assert lookups == [("resolve", "parallax.plan.resolve"), ("get", "parallax.spec.registry")]


def test_export_configs_reads_each_recipe_from_its_plan(tmp_path, lookups):
    assert main(["export-configs", "--output-dir", str(tmp_path), "--model", "tiny", "--recipes", "bf16,fp8_gpu"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["maxtext-tiny-bf16.yml", "maxtext-tiny-fp8_gpu.yml"]
    assert outside_the_registry(lookups) == [("resolve", "parallax.plan.resolve")] * 2  # one plan per file


def test_only_the_plan_and_validate_name_a_runs_recipe():
    """``registry.resolve`` (the recipe a run uses) is called by ``plan.resolve`` and by
    ``RunConfig.validate`` for a run validated without a plan (a matrix's cells, check-env);
    RunConfig has no property that looks its recipe up again."""
    package = pathlib.Path(resolve.__code__.co_filename).parents[1]
    calling = sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                     if any(is_registry_resolve(node) for node in ast.walk(ast.parse(path.read_text()))))
    assert calling == ["plan/resolve.py", "spec/config.py"]
    derived = [name for name, value in vars(RunConfig).items() if isinstance(value, property)]
    assert derived == ["model_config", "global_batch", "tokens_per_step"]  # none asks the registry


def is_registry_resolve(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "resolve" and isinstance(node.value, ast.Name)
            and node.value.id == "registry")
