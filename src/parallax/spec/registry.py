"""The one registry of precision recipes. Every reader asks it: config (validation),
capability and check-env (what can run here), hardware (the peak column of MFU), the runner
(the cells of a matrix) and the report (grouping by format).

Recipes are defined in the modules of ``RECIPE_MODULES`` (one per backend), each exporting
``RECIPES``; none of them imports a framework at import time.
"""

from __future__ import annotations

import functools
import importlib

from parallax.errors import ParallaxError
from parallax.spec.recipe import FORMATS, FRAMEWORKS, Recipe, cc_tuple

RECIPE_MODULES = (
    "parallax.engines.torch.recipes.autocast",
    "parallax.engines.torch.recipes.te",
    "parallax.engines.torch.recipes.torchao",
    "parallax.engines.torch.recipes.emulated_nvfp4",
    "parallax.engines.torch.recipes.emulated_mx",
    "parallax.engines.jax.recipes.flax_bf16",
    "parallax.engines.jax.recipes.flax_fp8",
    "parallax.engines.jax.recipes.te",
    "parallax.engines.jax.recipes.nvfp4",
    "parallax.engines.jax.recipes.mx",
    "parallax.engines.maxtext.recipes",
)


@functools.cache
def recipes() -> tuple[Recipe, ...]:
    """Every recipe, in framework then format order (definition order within those)."""
    found: list[Recipe] = []
    for name in RECIPE_MODULES:
        found += importlib.import_module(name).RECIPES
    _check_unique(found)
    return tuple(sorted(found, key=lambda r: (FRAMEWORKS.index(r.framework), FORMATS.index(r.format))))


def _check_unique(found: list[Recipe]) -> None:
    keys = [r.key for r in found]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise RuntimeError(f"recipes defined twice: {', '.join(twice)}")
    for fw in FRAMEWORKS:
        for fmt in FORMATS:
            defaults = [r.name for r in found if r.framework == fw and r.format == fmt and r.default]
            if len(defaults) > 1:
                raise RuntimeError(f"{fw} has several default {fmt} recipes: {', '.join(defaults)}")


def of_framework(framework: str) -> tuple[Recipe, ...]:
    check_framework(framework)
    return tuple(r for r in recipes() if r.framework == framework)


def names(framework: str) -> tuple[str, ...]:
    return tuple(r.name for r in of_framework(framework))


def check_framework(framework: str) -> str:
    if framework not in FRAMEWORKS:
        raise ParallaxError(f"unknown framework '{framework}'; choose one of: {', '.join(FRAMEWORKS)}")
    return framework


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ParallaxError(f"unknown precision '{fmt}'; choose one of: {', '.join(FORMATS)}")
    return fmt


def default(framework: str, fmt: str, compute_capability=None) -> Recipe | None:
    """The framework's recipe for ``--precision fmt`` on a GPU of ``compute_capability`` (None:
    no GPU, or not known), or None when it has none. The one place where the device chooses: a
    recipe with ``default_min_cc`` is the default on GPUs of at least that capability (torch
    nvfp4: TE's native NVFP4BlockScaling on 10.0+), the plain ``default`` recipe elsewhere
    (torch nvfp4: emulated-nvfp4 on the H200, A100, CPU)."""
    check_format(fmt)
    own = [r for r in of_framework(framework) if r.format == fmt]
    have = cc_tuple(compute_capability)
    if have is not None:
        found = next((r for r in own if r.default_min_cc and have >= r.default_min_cc), None)
        if found is not None:
            return found
    return next((r for r in own if r.default), None)


def device_dependent(framework: str, fmt: str) -> bool:
    """Whether ``default(framework, fmt, cc)`` depends on the GPU's compute capability."""
    return any(r.default_min_cc for r in of_framework(framework) if r.format == check_format(fmt))


def get(framework: str, name: str) -> Recipe:
    for recipe in of_framework(framework):
        if recipe.name == name:
            return recipe
    raise ParallaxError(
        f"unknown recipe '{name}' for {framework}; choose one of: {', '.join(names(framework))}"
        " (parallax check-env lists them)")


def resolve(framework: str, precision: str | None, recipe: str | None, compute_capability=None) -> Recipe:
    """The recipe a run uses: ``recipe`` by name, else the framework's default for
    ``precision`` on a GPU of ``compute_capability``. A recipe whose format contradicts
    ``precision`` is an error, never a swap."""
    if recipe is not None:
        chosen = get(framework, recipe)
        if precision is not None and check_format(precision) != chosen.format:
            raise ParallaxError(
                f"recipe '{recipe}' is {chosen.format}, not {precision}; drop --precision or pick "
                f"a {precision} recipe: {', '.join(r.name for r in of_framework(framework) if r.format == precision) or 'none yet'}")
        return chosen
    fmt = check_format(precision or "bf16")
    chosen = default(framework, fmt, compute_capability)
    if chosen is None:
        raise ParallaxError(f"{framework} has no {fmt} recipe yet; parallax check-env lists the recipes")
    return chosen


def select(frameworks: tuple[str, ...], selectors: tuple[str, ...]) -> list[Recipe]:
    """The recipes of a benchmark: for each framework, each selector in order — a format
    (its default recipe), a recipe name (where the framework has it), ``all`` (every recipe of
    the framework), ``FORMAT:all`` (every recipe of that format), or any of these after
    ``FRAMEWORK:`` to apply to that framework only (``torch:te-bf16``: JAX has a te-bf16 too). A
    selector no framework knows is an error."""
    chosen: list[Recipe] = []
    for selector in selectors:
        matched = [r for fw in frameworks for r in _matching(fw, selector)]
        if not matched and selector not in FORMATS:
            known = sorted({r.name for fw in frameworks for r in of_framework(fw)})
            raise ParallaxError(
                f"no framework of {', '.join(frameworks)} has a recipe '{selector}'; give a format "
                f"({', '.join(FORMATS)}), 'all', FORMAT:all or one of: {', '.join(known)}")
        chosen += [r for r in matched if r not in chosen]
    # framework, then format, the default recipe first (the sort is stable: selector order after that)
    return sorted(chosen, key=lambda r: (frameworks.index(r.framework), FORMATS.index(r.format), not r.default))


def _matching(framework: str, selector: str) -> list[Recipe]:
    scope, _, rest = selector.partition(":")
    if rest and scope in FRAMEWORKS:
        return _matching(framework, rest) if scope == framework else []
    own = of_framework(framework)
    if selector == "all":
        return list(own)
    fmt, _, rest = selector.partition(":")
    if rest == "all" and fmt in FORMATS:
        return [r for r in own if r.format == fmt]
    if selector in FORMATS:
        found = default(framework, selector)
        return [found] if found else []
    return [r for r in own if r.name == selector]


def default_name(framework: str, fmt: str) -> str:
    """The name of the framework's default recipe of ``fmt``; the format itself where the
    registry has none (results of an unknown framework or format, read by ``compare``)."""
    try:
        found = default(framework, fmt)
    except ParallaxError:
        found = None
    return found.name if found else fmt
