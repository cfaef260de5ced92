"""--cuda-graphs: the config field, the torch engine's decision (faked devices), the matrix's
per-cell setting, the comparison's guard against mixed settings and the report's Stacks table.
The capture itself (stand-in TE) is in test_torch_recipes.py; the real one in tests/gpu/."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from fixtures.fake_runs import ok_run, steps_from, tiny_config

from parallax.analysis.compare import build_comparison
from parallax.spec.config import CUDA_GRAPHS, RunConfig
from parallax.errors import ParallaxError
from parallax.spec import registry
from parallax.analysis.report import markdown
from parallax.store.results import write_run
from parallax.run.runner import Cell, Matrix
from parallax.plan.resolve import planned

CUDA, CPU = types.SimpleNamespace(type="cuda"), types.SimpleNamespace(type="cpu")
TE_RECIPES = ("te-bf16", "te-fp8-delayed", "te-fp8-current")


def test_cuda_graphs_defaults_to_auto_validates_and_round_trips():
    assert CUDA_GRAPHS == ("auto", "on", "off") and RunConfig().cuda_graphs == "auto"
    for value in CUDA_GRAPHS:
        run = RunConfig(cuda_graphs=value).validate()
        assert RunConfig.from_dict(run.to_dict()) == run and run.to_dict()["cuda_graphs"] == value
    with pytest.raises(ParallaxError, match=r"^--cuda-graphs must be one of auto, on, off, got 'yes'$"):
        RunConfig(cuda_graphs="yes").validate()
    old = RunConfig().to_dict()
    del old["cuda_graphs"]  # a run.json written before the option
    assert RunConfig.from_dict(old).cuda_graphs == "auto"


# ---- the decision (engines/torch/engine.py), without torch's devices

def decide(value: str, recipe: str, device) -> bool:
    from parallax.engines.torch.engine import cuda_graphs_decision

    return cuda_graphs_decision(RunConfig(cuda_graphs=value), registry.get("torch", recipe), device)


@pytest.mark.parametrize("recipe", TE_RECIPES)
def test_auto_is_on_for_te_recipes_on_cuda_and_off_on_the_cpu(recipe):
    assert decide("auto", recipe, CUDA) is True
    assert decide("on", recipe, CUDA) is True
    assert decide("off", recipe, CUDA) is False
    assert decide("auto", recipe, CPU) is False
    assert decide("off", recipe, CPU) is False
    with pytest.raises(ParallaxError, match=r"^--cuda-graphs on needs a CUDA GPU; this run is on .*; "
                                            r"use --cuda-graphs auto or off, or --device cuda$"):
        decide("on", recipe, CPU)


@pytest.mark.parametrize("recipe", ["bf16", "torchao-fp8-tensorwise", "torchao-fp8-rowwise"])
def test_recipes_without_capture_are_off_under_auto_and_refuse_on(recipe):
    for device in (CUDA, CPU):
        assert decide("auto", recipe, device) is False and decide("off", recipe, device) is False
        with pytest.raises(ParallaxError) as err:
            decide("on", recipe, device)
        assert str(err.value) == (f"--cuda-graphs on: recipe '{recipe}' has no CUDA-graph capture (only "
                                  "te-bf16, te-fp8-delayed, te-fp8-current, te-fp8-dpa have); use --cuda-graphs auto or off")


def test_torch_check_puts_the_decision_in_the_plan(monkeypatch):
    # A faked H200: the device, its capability and name, the recipe's library checks and the
    # attention probe stand in; the decision and the Plan are the engine's own.
    torch = pytest.importorskip("torch")
    from parallax.engines.torch import engine
    from parallax.plan import capability
    from parallax.engines.torch.recipes import select

    fake = torch.device("cuda", 0)
    monkeypatch.setattr(engine, "resolve_device", lambda torch, spec: fake)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(capability, "require", lambda *args: None)
    precision = types.SimpleNamespace(info=None, compute_dtype=torch.bfloat16)
    monkeypatch.setattr(select, "for_recipe", lambda torch, recipe, device, run=None: precision)
    monkeypatch.setattr(engine, "probe_attention", lambda *args: "CUDNN_ATTENTION")
    for recipe, value, expected in (("te-fp8-delayed", "auto", True), ("te-bf16", "on", True),
                                    ("te-fp8-current", "off", False), ("bf16", "auto", False)):
        run = RunConfig(recipe=recipe, precision=None, cuda_graphs=value, device="cuda").validate()
        plan = engine.TorchEngine().check(planned(run))
        assert (plan.recipe.name, plan.cuda_graphs, plan.device) == (recipe, expected, "cuda:0")
    with pytest.raises(ParallaxError, match="recipe 'torchao-fp8-rowwise' has no CUDA-graph capture"):
        engine.TorchEngine().check(planned(RunConfig(recipe="torchao-fp8-rowwise", precision=None, cuda_graphs="on")))


# ---- the matrix: --cuda-graphs on applies to the recipes that can capture

@pytest.mark.parametrize("value", CUDA_GRAPHS)
def test_the_matrix_hands_each_cell_its_setting(value):
    matrix = Matrix(("torch", "jax"), ("bf16", "fp8", "te-bf16"), base=tiny_config(cuda_graphs=value))
    settings = {(c.framework, c.recipe): matrix.run_config(c, Path("x")).cuda_graphs for c in matrix.cells()}
    without = "off" if value == "on" else value
    assert settings == {("torch", "bf16"): without, ("torch", "te-fp8-delayed"): value,
                        ("torch", "te-bf16"): value, ("jax", "bf16"): without, ("jax", "flax-fp8-delayed"): without,
                        ("jax", "te-bf16"): without}  # TE's JAX modules: XLA runs the whole step already
    assert Matrix.from_dict(matrix.to_dict()).base.cuda_graphs == value  # matrix.json keeps it (resume)


def write_cell(root: Path, framework: str, recipe: str, graphs: str, graphed: bool, seed: int = 0) -> None:
    spec = registry.get(framework, recipe)
    run = tiny_config(framework=framework, precision=spec.format, recipe=recipe, seed=seed, cuda_graphs=graphs)
    cell = Cell(framework, recipe, seed, 0, spec.format)
    run_dir = root / "runs" / cell.id
    steps = steps_from([500.0, 300.0] + [100.0] * 10, [9.0, 8.0] + [3.0] * 10, run.warmup)
    result = ok_run(run.replace(output_dir=str(run_dir)), steps)
    result["framework"].update(compiled=True, cuda_graphs=graphed)
    write_run(run_dir, result, steps)


def test_the_report_says_which_cells_replayed_cuda_graphs(tmp_path):
    write_cell(tmp_path, "torch", "bf16", "off", False)
    write_cell(tmp_path, "torch", "te-fp8-delayed", "on", True)
    text = markdown.render(build_comparison(tmp_path))
    section = text.split("## Stacks\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")][2:]  # the body, after the header
    rows = {line.split(" | ")[1]: line.split(" | ")[5] for line in lines}
    assert rows == {"bf16": "yes", "fp8 te-fp8-delayed": "yes + CUDA graphs"}, section


def test_the_comparison_refuses_one_recipe_with_two_settings(tmp_path):
    write_cell(tmp_path, "torch", "te-fp8-delayed", "on", True, seed=0)
    write_cell(tmp_path, "torch", "te-fp8-delayed", "off", False, seed=1)
    with pytest.raises(ParallaxError, match=r"mixes runs of torch te-fp8-delayed with and without CUDA graphs "
                                            r"\(--cuda-graphs\); compare them from separate directories"):
        build_comparison(tmp_path)


def test_the_comparison_takes_what_ran_and_old_runs_as_eager(tmp_path):
    write_cell(tmp_path, "torch", "te-fp8-delayed", "auto", True, seed=0)
    write_cell(tmp_path, "torch", "te-fp8-delayed", "auto", False, seed=1)  # auto, but ran eager: mixed
    with pytest.raises(ParallaxError, match="with and without CUDA graphs"):
        build_comparison(tmp_path)
    other = tmp_path / "old"
    write_cell(other, "torch", "te-fp8-delayed", "off", False, seed=0)
    write_cell(other, "torch", "te-fp8-delayed", "off", False, seed=1)
    for run_json in (other / "runs").glob("*/run.json"):  # written before the option existed
        data = json.loads(run_json.read_text())
        del data["config"]["cuda_graphs"], data["framework"]["cuda_graphs"]
        run_json.write_text(json.dumps(data))
    assert [c["framework_info"].get("cuda_graphs") for c in build_comparison(other)["cells"]] == [None]
