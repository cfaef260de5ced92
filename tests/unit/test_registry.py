"""The recipe registry is the one place a recipe is defined: every reader follows it."""

from __future__ import annotations

import json
import pathlib

import pytest

from parallax.plan import hardware
from parallax.spec.config import RunConfig
from parallax.errors import ParallaxError
from parallax.plan import capability as cap
from parallax.spec import recipe as recipe_mod
from parallax.spec import registry
from parallax.spec.recipe import Backend, Recipe

SRC = pathlib.Path(registry.__file__).parents[1]
PLANTED = Recipe(framework="torch", name="planted-fp8", format="fp8", backend=Backend("torch.autocast"),
                 hooks="parallax.engines.torch.recipes.autocast:AutocastHooks", min_cc=(8, 9), cpu=True,
                 summary="a recipe defined only in the registry")
H200 = {"devices": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}]}
PACKAGES = {"torch": "2.11.0+cu130", "jax": "0.11.2", "jaxlib": "0.11.2", "jax_cuda13_plugin": "0.11.2",
            "flax": "0.12.10", "optax": "0.2.8"}


@pytest.fixture
def planted(monkeypatch):
    real = registry.recipes()
    monkeypatch.setattr(registry, "recipes", lambda: real + (PLANTED,))
    return PLANTED


def test_every_reader_sees_a_recipe_added_to_the_registry_alone(planted, tmp_path):
    from parallax.cli.check_env import build_report
    from parallax.analysis.compare import _baselines
    from parallax.run.runner import Matrix

    assert RunConfig(recipe="planted-fp8", precision=None).validate().precision == "fp8"  # config
    found = [c for c in cap.capability_matrix(H200, PACKAGES) if c.recipe == "planted-fp8"]  # capability
    assert [c.status for c in found] == ["native"]
    report = build_report({"driver": {}, "nvml": {}, "devices": []}, 0)  # check-env
    assert "planted-fp8" in {c["recipe"] for c in report["capability"]}
    assert "planted-fp8" in {r["name"] for r in report["recipes"]}
    matrix = Matrix(("torch",), ("bf16", "planted-fp8"), base=RunConfig(model="tiny", seq_len=32, steps=4,
                                                                          warmup=1, device="cpu"))
    assert [c.id for c in matrix.validate().cells()] == ["torch-bf16-seed0-rep0", "torch-planted-fp8-seed0-rep0"]
    assert json.loads(json.dumps(matrix.to_dict()))["cells"][1] == ["torch", "planted-fp8", "fp8"]  # runner
    assert _baselines("torch", "planted-fp8", "fp8") == ["bf16"]  # report
    assert hardware.lookup("NVIDIA H200", "9.0").spec.peak(planted.mfu_format) == 1979  # hardware


def test_a_backends_bf16_baseline_has_the_same_tuning():
    from parallax.analysis.compare import _baselines

    assert _baselines("torch", "te-fp8-delayed", "fp8") == ["bf16", "te-bf16"]
    # MaxText's fp8 modes share bf16's backend; bf16 with base.yml's defaults is not their baseline
    assert _baselines("maxtext", "fp8", "fp8") == ["bf16"]
    assert _baselines("maxtext", "bf16-defaults", "bf16") == ["bf16"]


# Where recipes are defined: the registry and what a recipe is (spec/), the recipe modules and
# their hooks (engines/<framework>/recipes/, engines/maxtext/recipes.py: one file per recipe family),
# the emulated NVFP4 scheme, TE's shape rule, and what can run here (plan/capability.py).
RECIPE_FILES = ("spec/registry.py", "spec/recipe.py", "spec/precision.py", "spec/nvfp4_scheme.py",
                "engines/te_shapes.py", "engines/maxtext/recipes.py",
                "plan/capability.py")


def is_recipe_file(relative: pathlib.Path) -> bool:
    return "recipes" in relative.parts or relative.as_posix() in RECIPE_FILES


def test_recipe_names_live_only_in_the_recipe_files():
    """No module outside the recipe files spells a recipe name (a default or a planned mode
    alike): they ask the registry."""
    names = {r.name for r in registry.recipes() if r.name not in recipe_mod.FORMATS}
    offenders = []
    for path in SRC.rglob("*.py"):
        if is_recipe_file(path.relative_to(SRC)):
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(SRC)}: {n}" for n in names if f'"{n}"' in text or f"'{n}'" in text]
    assert offenders == []


def test_each_framework_has_one_default_per_format_and_unique_names():
    keys = [r.key for r in registry.recipes()]
    assert len(keys) == len(set(keys))
    for fw in recipe_mod.FRAMEWORKS:
        for fmt in recipe_mod.FORMATS:
            assert len([r for r in registry.of_framework(fw) if r.format == fmt and r.default]) <= 1
    assert registry.default("torch", "fp8").name == "te-fp8-delayed"  # the spec: TE DelayedScaling HYBRID
    assert registry.default("jax", "fp8").name == "flax-fp8-delayed"


def test_every_implemented_recipe_loads_its_hooks_without_a_framework_import():
    for r in registry.recipes():
        if r.implemented:
            module, _, cls = r.hooks.partition(":")
            path = pathlib.Path(*module.split(".")[1:]).with_suffix(".py")
            assert is_recipe_file(path), r.key
            assert cls, r.key


def test_select_expands_formats_names_and_all():
    pick = registry.select(("torch", "jax"), ("bf16", "fp8", "te-fp8-current"))
    assert [r.key for r in pick] == ["torch:bf16", "torch:te-fp8-delayed", "torch:te-fp8-current",
                                     "jax:bf16", "jax:flax-fp8-delayed"]
    every_fp8 = registry.select(("jax",), ("fp8:all",))
    assert [r.name for r in every_fp8] == ["flax-fp8-delayed", "flax-fp8-direct", "te-fp8-delayed"]
    assert len(registry.select(("torch",), ("all",))) == len(registry.of_framework("torch"))
    with pytest.raises(ParallaxError, match="no framework of torch has a recipe 'flax-fp8-direct'"):
        registry.select(("torch",), ("flax-fp8-direct",))


def test_a_framework_prefix_scopes_a_selector_to_that_framework():
    pick = registry.select(("torch", "jax"), ("bf16", "torch:te-bf16", "torch:te-fp8-delayed", "jax:fp8:all"))
    assert [r.key for r in pick] == ["torch:bf16", "torch:te-bf16", "torch:te-fp8-delayed", "jax:bf16",
                                     "jax:flax-fp8-delayed", "jax:flax-fp8-direct", "jax:te-fp8-delayed"]
    with pytest.raises(ParallaxError, match="no framework of jax has a recipe 'torch:te-bf16'"):
        registry.select(("jax",), ("torch:te-bf16",))


def test_a_planted_duplicate_is_refused(monkeypatch):
    registry.recipes.cache_clear()
    try:
        import parallax.engines.torch.recipes.autocast as autocast

        monkeypatch.setattr(autocast, "RECIPES", autocast.RECIPES * 2)
        with pytest.raises(RuntimeError, match="recipes defined twice: torch:bf16"):
            registry.recipes()
    finally:
        monkeypatch.undo()
        registry.recipes.cache_clear()


def test_emulated_recipes_divide_mfu_by_the_bf16_peak():
    emulated = registry.get("jax", "emulated-nvfp4")
    assert emulated.emulated and emulated.mfu_format == "bf16" and emulated.peak_column == "bf16"
    assert registry.get("torch", "te-nvfp4").peak_column == "fp4"
