"""A run is resolved once per process (``parallax.plan``): the native GPU probe is asked once,
``--gpus`` becomes a count once, the run is validated once — over a whole CPU ``train`` and a
``benchmark`` up to its cells (a fake trainer runs them)."""

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


def test_a_cpu_train_probes_the_gpu_once(tmp_path, counted):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    # --model auto asks for a GPU, the recipe's default and the environment record ask again:
    # the probe answers once
    assert main(["train", *TINY, "--gpus", "1", "--output-dir", str(out)]) == 0
    assert counted == {"probe": 1, "resolve_gpus": 1, "validate": 1}
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
    assert plan.recipe.name == "emulated-nvfp4" and plan.recipe is plan.run.recipe_spec
    assert counted == {"probe": 0, "resolve_gpus": 1, "validate": 1}  # the CPU: no GPU asked


@pytest.fixture
def lookups(monkeypatch):
    """The modules that looked a recipe up by name (the registry's get, resolve, default, or
    RunConfig.recipe_spec), one entry per lookup."""
    callers: list[str] = []

    def caller() -> str:
        frame = sys._getframe(2)
        return frame.f_globals.get("__name__", "?")

    def counting(function):
        def wrapper(*args, **kwargs):
            callers.append(caller())
            return function(*args, **kwargs)
        return wrapper

    for name in ("get", "resolve", "default"):
        monkeypatch.setattr(registry, name, counting(getattr(registry, name)))
    spec = RunConfig.recipe_spec.fget
    monkeypatch.setattr(RunConfig, "recipe_spec", property(counting(spec)))
    return callers


@pytest.mark.parametrize("framework,recipe", [("torch", "torchao-fp8-tensorwise"), ("jax", "flax-fp8-delayed")])
def test_the_engines_read_the_recipe_from_the_run_plan(tmp_path, lookups, framework, recipe):
    pytest.importorskip(framework)
    out = tmp_path / "run"
    options = [*TINY[2:], "--framework", framework, "--recipe", recipe, "--device", "cpu"]
    if framework == "jax":
        options.remove("--no-compile")
    assert main(["train", *options, "--output-dir", str(out)]) == 0
    assert json.loads((out / "run.json").read_text())["recipe"]["name"] == recipe
    assert [m for m in lookups if m.startswith("parallax.engines")] == []
    assert "parallax.plan.resolve" in lookups  # the one place a run's recipe is named


def test_no_engine_module_asks_a_run_for_its_recipe_by_name():
    """Every engine module (MaxText's included, which no CPU run reaches) takes the recipe from
    the RunPlan or the checked Plan, never from ``RunConfig.recipe_spec``."""
    engines = pathlib.Path(resolve.__code__.co_filename).parents[1] / "engines"
    asking = sorted(str(path.relative_to(engines)) for path in engines.rglob("*.py")
                    if any(isinstance(node, ast.Attribute) and node.attr == "recipe_spec"
                           for node in ast.walk(ast.parse(path.read_text()))))
    assert asking == []
