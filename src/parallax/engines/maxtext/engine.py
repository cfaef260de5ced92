"""The MaxText engine: ``check`` decides everything before any GPU work; ``train`` runs MaxText.

``check`` refuses, each with one line (exit 2): Python < 3.12, MaxText missing (naming the
extra) or older than the version the keys were read from, a key Parallax writes that the
installed ``base.yml`` lacks, a CPU run, no GPU, and a mode this GPU or installation cannot run
(the registry's capability check: fp8 needs 8.9+, nvfp4 10.0+, ``te_*`` TE's JAX extension,
``fp8_gpu`` Qwix). Nothing here imports JAX or MaxText; the GPU is asked through the native
probe, so this process never holds GPU memory that the MaxText subprocess needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from parallax.spec.config import RunConfig
from parallax.engines.base import Engine, EngineOutput, Plan, Progress
from parallax.plan.envinfo import older
from parallax.errors import ParallaxError
from parallax.plan.resolve import RunPlan

MIN_PYTHON = (3, 12)  # MaxText 0.2.5: Requires-Python >= 3.12
EXTRA = "slm-parallax[maxtext]"


def require_python() -> None:
    if sys.version_info[:2] < MIN_PYTHON:
        have = ".".join(map(str, sys.version_info[:2]))
        raise ParallaxError(f"the maxtext engine needs Python >= {'.'.join(map(str, MIN_PYTHON))} (MaxText "
                            f"requires it); this is Python {have}: use a 3.12+ environment and pip install '{EXTRA}'")


def require_maxtext() -> str:
    """MaxText's version, or a one-line error naming the extra."""
    import importlib.util

    from parallax.engines.maxtext import config
    from parallax.engines.maxtext.recipes import MAXTEXT

    version = config.installed_version()
    if version is None or importlib.util.find_spec("maxtext") is None:
        raise ParallaxError(f"maxtext is not installed; install it with: pip install '{EXTRA}' (Python >= 3.12)")
    if older(version, MAXTEXT.min_version):
        raise ParallaxError(f"maxtext {version} is older than {MAXTEXT.min_version}, whose config keys Parallax "
                            f"writes; pip install --upgrade '{EXTRA}'")
    return version




def gpu_index(spec: str) -> int:
    """The GPU ``--device`` names: auto/gpu/cuda is GPU 0, cuda:N GPU N; cpu is an error."""
    if spec in ("auto", "gpu", "cuda"):
        return 0
    if spec.startswith(("cuda:", "gpu:")) and spec.split(":", 1)[1].isdigit():
        return int(spec.split(":", 1)[1])
    if spec == "cpu":
        raise ParallaxError("the maxtext engine trains on an NVIDIA GPU (MaxText's hardware: gpu); "
                            "drop --device cpu, or use --framework jax on the CPU")
    raise ParallaxError(f"unknown --device '{spec}'; choose auto, cuda or cuda:N")


class MaxTextEngine(Engine):
    name = "maxtext"

    def check(self, plan: RunPlan) -> Plan:
        from parallax.plan import envinfo, machine
        from parallax.engines.maxtext import config, launch
        from parallax.spec.precision import NATIVE, PrecisionInfo
        from parallax.plan import capability

        run, recipe = plan.run, plan.recipe
        capability.require_implemented(recipe)
        require_python()
        version = require_maxtext()
        base_yml = config.installed_base_yml()
        if base_yml is None:
            raise ParallaxError(f"maxtext {version} has no configs/base.yml; reinstall it: pip install '{EXTRA}'")
        tuning_name = config.recipe_tuning(recipe)
        keys = config.flat(config.sections(run, recipe, tuning_name, data=planned_data_keys(run),
                                           output=launch.output_keys(run), weights=config.weights_keys(Path("weights")),
                                           knobs=plan.knobs.maxtext_keys))
        config.check_keys(keys, base_yml, version)
        if run.eval_every > 0:
            raise ParallaxError("the maxtext engine does not evaluate yet (MaxText's eval pipeline is not wired); "
                                "use --eval-every 0")
        index = gpu_index(run.device)
        probe = machine.probe()
        device = next((d for d in probe.get("devices") or [] if d.get("index") == index), None)
        if device is None:
            raise ParallaxError(f"the maxtext engine needs an NVIDIA GPU; {capability.no_gpu_reason(probe)}"
                                if not probe.get("devices") else f"--device {run.device}: there is no GPU {index}")
        cap = capability.capability(recipe, probe, envinfo.package_versions(), index)
        if not cap.runnable:
            raise ParallaxError(f"maxtext recipe '{recipe.name}' cannot run here: {cap.reason}")
        mode = recipe.load_hooks().keys()
        precision = PrecisionInfo.of(recipe, cap.status == NATIVE,
                                     {"maxtext_keys": mode, "maxtext_version": version,
                                      "compute_dtype": "bfloat16", "param_dtype": "float32"})
        tuning = config.TUNINGS[tuning_name]
        return Plan(recipe=recipe, precision=precision, device=f"cuda:{index}", attention=tuning["attention"],
                    details={"tuning": tuning_name, "settings": dict(tuning)},
                    handles={"device": device, "version": version, "base_yml": str(base_yml), "knobs": plan.knobs})

    def train(self, run: RunConfig, plan: Plan, batches, progress: Progress) -> EngineOutput:
        from parallax.engines.maxtext.launch import train

        return train(run, plan, batches, progress)

    def reference_trainer(self, run: RunConfig, weights: dict[str, np.ndarray], compute_dtype: str, device: str):
        raise ParallaxError("parallax parity cannot drive MaxText: it runs in a subprocess; compare it through "
                            "benchmark results instead (it starts from parallax.engines.weights, as every engine does)")


def planned_data_keys(run: RunConfig) -> dict:
    """The data keys ``train`` will write (values are placeholders of the right kind: the
    key check needs the names only)."""
    from parallax.engines.maxtext import config, data

    if run.synthetic:
        return config.synthetic_keys()
    return data.keys_for("npy_dir", "prefix", 0)
