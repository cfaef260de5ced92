"""The JAX/Flax engine: the shared LLaMA in Flax, Optax AdamW, one jitted step with donation.

Importing this module does not import JAX; ``check`` raises a ParallaxError naming the
``jax`` extra when it is missing.
"""

from __future__ import annotations

import numpy as np

from parallax.spec.config import RunConfig
from parallax.engines.base import Engine, EngineOutput, Plan, Progress, Step
from parallax.errors import ParallaxError
from parallax.plan.resolve import RunPlan


def set_xla_flags(flags: tuple[str, ...]) -> None:
    """Add the recipe's XLA flags to XLA_FLAGS (a flag the user set wins). XLA reads them once,
    when JAX starts its backends: a process that already started JAX on a GPU without them
    cannot run the recipe as it is meant to, and that is an error, not a quiet difference (a
    process whose JAX runs on the CPU only needs none of these GPU flags)."""
    import os
    import sys

    if not flags:
        return
    current = os.environ.get("XLA_FLAGS", "")
    names = {f.split("=", 1)[0] for f in current.split()}
    missing = [f for f in flags if f.split("=", 1)[0] not in names]
    if not missing:
        return
    jax = sys.modules.get("jax")
    started = jax is not None and getattr(getattr(jax, "_src", None), "xla_bridge", None) is not None \
        and jax._src.xla_bridge.backends_are_initialized()
    if started and all(d.platform == "cpu" for d in jax.devices()):
        return  # GPU code-generation flags: nothing to XLA:CPU
    if started:
        raise ParallaxError(f"this recipe needs XLA_FLAGS {' '.join(missing)}, but JAX has already started "
                            "in this process; set XLA_FLAGS before starting Python")
    os.environ["XLA_FLAGS"] = " ".join([current, *missing]).strip()


class JaxEngine(Engine):
    name = "jax"

    def check(self, plan: RunPlan) -> Plan:
        """Device, recipe (library, capability, the recipe's own checks) and the label the run
        records, decided once, before any training. The attention backend is chosen when the
        model is built (it needs a compiled probe on the device)."""
        from parallax.engines.jax import parallel
        from parallax.engines.jax.runtime import import_jax, resolve_device
        from parallax.plan import capability
        from parallax.engines.jax.recipes.select import for_recipe, on_device

        run, recipe = plan.run, plan.recipe
        capability.require_implemented(recipe)
        if not run.compile:
            raise ParallaxError(
                "the JAX engine always compiles with XLA; drop --no-compile (it applies to torch only)"
            )
        if run.cuda_graphs == "on":
            raise ParallaxError(
                "--cuda-graphs on is for the torch engine's TransformerEngine recipes; XLA already runs the "
                "JAX step as whole-step compiled executables; use --cuda-graphs auto or off"
            )
        hooks = recipe.load_hooks()
        if run.gpus > 1:
            hooks.check_parallel(run)
        # the recipe's flags and the knob set's (--tuning), before JAX starts: its details() may start it
        set_xla_flags(hooks.xla_flags() + plan.knobs.xla_flags)
        hooks.prepare()
        jax = import_jax()
        parallel.start(run)  # before JAX starts too: CPU device count, jax.distributed
        if run.gpus == 1 and jax.process_count() == 1:
            device = resolve_device(run.device)
            layout = parallel.Layout.of(run, device)
        else:
            layout = parallel.Layout.of(run, None)
            device = layout.local_devices[0]
        cc = getattr(device, "compute_capability", None)
        capability.require(recipe, device.platform, cc, getattr(device, "device_kind", ""))
        hooks.check(device, run)
        precision = for_recipe(recipe, hooks)
        precision = on_device(precision, device.platform, cc)
        return Plan(recipe=recipe, precision=precision.info, device=f"{device.platform}:{device.id}",
                    rank=jax.process_index(), world=jax.process_count(),  # process 0 writes the result
                    details={"parallel": {
                        # The data source of this process: make_batch_source(run, rank=process_index,
                        # world=process_count) gives the rows of its devices.
                        "process_index": jax.process_index(), "process_count": jax.process_count(),
                        "devices": [f"{d.platform}:{d.id}" for d in layout.devices],
                        "local_devices": len(layout.local_devices), "rows": list(layout.rows),
                        "launch": parallel.launch_kind()}},
                    handles={"device": device, "precision": precision, "layout": layout})

    def train(self, run: RunConfig, plan: Plan, batches, progress: Progress) -> EngineOutput:
        from parallax.engines.jax.training import train

        return train(run, plan, batches, progress)

    def build_step(self, plan, attention: str | None = None, source=None) -> Step:
        """The jitted step of ``plan`` (a RunPlan of one device) as ``train`` builds and compiles
        it (``training.build``): the recipe's XLA flags, model, extra variables and kernels,
        compiled ahead of time for the run's batch; ``attention`` (cudnn or xla) overrides the
        engine's choice; ``source``: the batches (a BatchSource; the run's synthetic ones when
        None). ``state`` is (params, extra, opt_state); ``lowered`` the lowering."""
        import itertools
        import os

        from parallax.data.synthetic import SyntheticBatches
        from parallax.engines.jax import training
        from parallax.engines.jax.runtime import import_jax

        run = plan.run
        if run.gpus > 1:
            raise ParallaxError(f"build_step builds the step of one device; the plan has --gpus {run.gpus}")
        checked = self.check(plan)
        jax, hooks = import_jax(), checked.handles["precision"].hooks
        if source is None:
            source = SyntheticBatches(run.seed, run.batch_size, run.seq_len, run.model_config.vocab_size)
        with hooks.context():  # TE's autocast: its modules read the recipe when traced
            built = training.build(run, checked, source, attention)
            first = next(built.device_batches)
            lowered = built.step.lower(*built.state, first)
            compiled = lowered.compile()
        device = checked.handles["device"]
        details = {**training.framework_info(device, built.attention, built.attention_reason),
                   "xla_flags": os.environ.get("XLA_FLAGS", ""), "attention": built.attention, "jax": jax.__version__}
        return Step(fn=compiled, state=built.state, batch=first, batches=itertools.chain([first], built.device_batches),
                    wait=lambda metrics: metrics.block_until_ready(), plan=checked, details=details, lowered=lowered)

    def reference_trainer(self, run: RunConfig, weights: dict[str, np.ndarray], compute_dtype: str,
                          device: str):
        from parallax.engines.jax.reference import JaxReferenceTrainer

        return JaxReferenceTrainer(run, weights, compute_dtype, device)
