"""A spec becomes a plan here, once per process: ``resolve(run)`` checks ``--gpus`` against this
machine (``world.resolve_gpus``), names the run's recipe — the format's default on the GPU that
``run.device`` names where that default depends on the GPU (torch nvfp4), which is the only
reason the GPU's capability is asked — and validates the run. What comes out, a ``RunPlan``, is
what the driver (its MFU peak too), the launcher (its failure record too), ``export-configs``
and the engines read; none of them looks the recipe up again."""

from __future__ import annotations

from dataclasses import dataclass

from parallax.plan import machine, world
from parallax.spec import registry, tuning
from parallax.spec.config import RunConfig
from parallax.spec.recipe import FORMATS, FRAMEWORKS, Recipe


@dataclass(frozen=True)
class RunPlan:
    """A run resolved on this machine."""

    run: RunConfig  # validated: ``recipe`` named, ``precision`` its format, ``gpus`` a count
    recipe: Recipe  # the registry's recipe of ``run.recipe``

    @property
    def knobs(self) -> tuning.KnobSet:
        """The knob set the run's ``--tuning`` resolves to for its recipe (spec/tuning.py)."""
        return tuning.resolve(self.run.framework, self.recipe, self.run.tuning)

    @property
    def multi_gpu(self) -> bool:
        return self.run.gpus > 1


def resolve(run: RunConfig, timed: bool = True, asked_device: str | None = None) -> RunPlan:
    """The plan of ``run`` on this machine; a one-line ParallaxError for bad input. ``timed``:
    as ``RunConfig.validate``. ``--gpus`` counts against ``asked_device``, the device the user
    asked for (default: ``run.device``): ``--model auto`` on a machine without a GPU runs on
    the CPU, but its ``--gpus 3`` stays a count of GPUs, never three CPU ranks."""
    run = run.replace(gpus=world.resolve_gpus(run.gpus, asked_device or run.device))
    recipe = registry.resolve(run.framework, run.precision, run.recipe, default_capability(run))
    return RunPlan(run=run.validate(timed, recipe), recipe=recipe)


def planned(run: RunConfig) -> RunPlan:
    """The plan of a run that is already resolved or built by hand (tests, scripts): its recipe
    looked up by name, the format's default where none is named; no machine asked, nothing
    checked."""
    return RunPlan(run=run, recipe=registry.resolve(run.framework, run.precision, run.recipe))


def default_capability(run: RunConfig) -> str | None:
    """The compute capability that chooses ``run``'s default recipe: the GPU's that ``run.device``
    names, asked only where the format's default depends on it (``registry.device_dependent``);
    None for a named recipe, the CPU, no GPU, or a format whose default is fixed."""
    if run.recipe is not None or run.precision not in FORMATS or run.framework not in FRAMEWORKS:
        return None
    if not registry.device_dependent(run.framework, run.precision):
        return None
    return machine.compute_capability(run.device)
