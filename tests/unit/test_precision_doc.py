"""The walkthrough "How to add a recipe" (docs/precision.md) names real things: every file path
exists, the registry line is in RECIPE_MODULES, every ``module:Class`` and hook class is defined
where it says, every recipe it names is in the registry, and every test it names is a test
function of a test file it names."""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

from parallax.spec import registry

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "parallax"


def walkthrough() -> str:
    text = (ROOT / "docs" / "precision.md").read_text()
    start = text.index("## How to add a recipe\n")
    return text[start:text.index("\n## ", start + 1)]


def paths(section: str) -> list[str]:
    return sorted(set(re.findall(r"`((?:src|tests|engines|spec)/[\w/]+\.py)`", section)))


def test_every_path_of_the_walkthrough_exists():
    found = paths(walkthrough())
    assert "src/parallax/engines/torch/recipes/torchao.py" in found and len(found) >= 8
    missing = [p for p in found if not (ROOT / p).is_file() and not (SRC / p).is_file()]
    assert missing == []


def test_the_registry_line_is_in_recipe_modules_and_its_module_defines_the_recipes():
    section = walkthrough()
    lines = re.findall(r'^    "(parallax\.[\w.]+)",$', section, flags=re.M)
    assert lines == ["parallax.engines.torch.recipes.torchao"]
    assert lines[0] in registry.RECIPE_MODULES
    module = importlib.import_module(lines[0])
    names = [r.name for r in module.RECIPES]
    for name in re.findall(r'name="([\w-]+)"', section):
        assert name in names and registry.get("torch", name).hooks.startswith(lines[0] + ":")


def test_the_hook_classes_and_their_methods_exist_where_the_walkthrough_puts_them():
    section = walkthrough()
    for target in re.findall(r'"(parallax\.[\w.]+:\w+)"', section):
        module, _, cls = target.partition(":")
        hooks = getattr(importlib.import_module(module), cls)
        for method in re.findall(r"^    def (\w+)\(", section, flags=re.M):
            assert method in vars(hooks), method
    assert hasattr(importlib.import_module("parallax.engines.jax.recipes.flax_fp8"), "FlaxFp8Hooks")
    assert hasattr(importlib.import_module("parallax.engines.maxtext.recipes"), "_mode")


def test_every_test_the_walkthrough_names_is_a_test_of_a_file_it_names():
    section = walkthrough()
    defined = {}
    for path in paths(section):
        if path.startswith("tests/"):
            tree = ast.parse((ROOT / path).read_text())
            defined[path] = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            defined[path] |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                              if isinstance(t, ast.Name)}
    named = set(re.findall(r"`(test_\w+)`", section)) | set(re.findall(r"`([A-Z_]{6,})`", section))
    named -= {"RECIPE_MODULES", "RECIPES"}
    assert len(named) >= 10
    assert [n for n in sorted(named) if not any(n in names for names in defined.values())] == []
