"""MaxText itself profiled by MaxText (``parallax profile --framework maxtext``): the ``maxtext``
engine's config of the run's recipe, on MaxText's synthetic data, run in a subprocess with
MaxText's own profiler keys (``PROFILE_KEYS``: ``profiler: xplane``,
``skip_first_n_steps_for_profiler`` = warmup + steps, ``profiler_steps`` = steps, and one step
more so that the profiler stops before the last step).

MaxText calls ``jax.profiler.start_trace`` into its TensorBoard folder, so the trace is the same
``*.xplane.pb`` our JAX engine's profile is, read by the same code; XLA dumps the optimized HLO of
``jit_train_step`` beside it (``--xla_dump_to``), which describes each kernel's op as for our JAX
step (no compilation cache: a step found in it is not compiled, and XLA would dump no HLO).
The step time without the profiler is the mean of MaxText's ``perf/step_time_seconds`` over the
``steps`` steps before the profiled ones. MaxText's files (config, log, metrics) stay in
``<out>/maxtext/``.
"""

from __future__ import annotations

import shutil
import sys
import tarfile
from pathlib import Path

from parallax.engines import profiling
from parallax.engines.profiler import Profiled
from parallax.errors import ParallaxError
from parallax.plan.resolve import RunPlan
from parallax.store.files import make_folder, replacing

HLO_MODULE = "jit_train_step"


def profile_keys(warmup: int, steps: int) -> dict:
    # No compilation cache: a step found in it is not compiled, so XLA would dump no HLO of it.
    return {"profiler": "xplane", "skip_first_n_steps_for_profiler": warmup + steps, "profiler_steps": steps,
            "profile_cleanly": True, "jax_cache_dir": ""}


def total_steps(warmup: int, steps: int) -> int:
    """Warm-up, timed and profiled steps, and one more: MaxText's profiler stops before its last."""
    return warmup + 2 * steps + 1


def profile(plan: RunPlan, warmup: int, steps: int, out: Path, keep_trace: bool = False, before=None,
            progress=None) -> Profiled:
    """Run MaxText on ``plan`` (its ``steps`` = ``total_steps``) with its profiler; the kernels
    of the profiled steps and the mean step time of the timed ones. ``before()``, when given,
    runs once the engine has accepted the run, before MaxText starts; ``progress``
    (``engines.base.Progress``) is told each step that MaxText's log reports, as ``train`` is."""
    from parallax.engines.base import NullProgress
    from parallax.engines.maxtext import config, launch, metrics
    from parallax.engines.maxtext.engine import MaxTextEngine

    checked = MaxTextEngine().check(plan)  # the engine's refusals, before MaxText starts
    if before is not None:
        before()
    work = out / "maxtext"
    shutil.rmtree(work, ignore_errors=True)
    make_folder(work, "--output-dir")
    yml = _write_config(plan, checked, work, warmup, steps)
    env = launch.child_env(int(checked.device.split(":")[1]))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # JAX's own cache (jax_cache_dir above is MaxText's)
    hlo_dir = work / "hlo"
    env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS", ""), f"--xla_dump_to={hlo_dir}",
                                              f"--xla_dump_hlo_module_re={HLO_MODULE}", "--xla_dump_hlo_as_text"]))
    launch.stream([sys.executable, "-m", config.TRAIN_MODULE, str(yml)], env, work / "train.log",
                  progress or NullProgress())
    step_ms = _timed_ms(metrics.read_metrics(work / "metrics.jsonl"), warmup, steps, work)
    trace = work / "output"
    events, on_gpu = profiling.jax_kernel_events(trace), True
    if not events:
        events, on_gpu = profiling.jax_host_events(trace), False
    hlo = profiling.find_hlo_text(hlo_dir, HLO_MODULE)
    if hlo is not None:
        events = profiling.describe_hlo_ops(events, hlo)
    shutil.rmtree(hlo_dir, ignore_errors=True)  # tens of MB of text; the trace is what stays
    details = {"maxtext": checked.handles["version"], "tuning": checked.details["tuning"],
               **checked.details["settings"], "attention": checked.attention, "hlo_described": hlo is not None,
               "device_name": checked.handles["device"].get("name") or "GPU", "compiled": True,
               "compile_scope": "jax.jit of MaxText's train step (its own process)",
               "data": "MaxText's synthetic data (a profile of MaxText runs no --data)"}
    kept = _tar_xplanes(trace, out / "trace.xplane.tar.gz") if keep_trace else None
    rates = jax_attention_rates(plan, int(checked.device.split(":")[1])) if on_gpu else []
    return Profiled(step_ms, events, on_gpu, details, checked.device, kept,
                    timing="mean of MaxText's perf/step_time_seconds over the timed steps", attention_rates=rates)


def jax_attention_rates(plan: RunPlan, index: int) -> list[dict]:
    """JAX's attention implementations measured in this process once MaxText has ended (MaxText
    runs JAX's cuDNN attention or TE's): [] with the reason where this process's JAX has no GPU."""
    from parallax.engines.jax.runtime import import_jax
    from parallax.engines.profiler import attention_rates

    try:
        device = import_jax().devices("gpu")[index]
    except (ParallaxError, RuntimeError, IndexError) as exc:
        return [{"backend": "jax", "forward_ms": None, "backward_ms": None,
                 "error": f"this process's JAX has no GPU {index} ({str(exc).splitlines()[0][:200]})"}]
    return attention_rates("jax", plan, device)


def _write_config(plan: RunPlan, checked, work: Path, warmup: int, steps: int) -> Path:
    from parallax.engines.maxtext import config, launch

    run, recipe = plan.run, plan.recipe
    output = {"run_name": "profile", "base_output_directory": str((work / "output").resolve()),
              "metrics_file": str((work / "metrics.jsonl").resolve()),
              "enable_tensorboard": False}  # else into MaxText's installation (child.point_tensorboard)
    tuning = checked.details["tuning"]
    sections = config.sections(run, recipe, tuning, output=output)
    sections.append(config.Section("profiling (parallax profile)", profile_keys(warmup, steps)))
    config.check_keys(config.flat(sections), Path(checked.handles["base_yml"]), checked.handles["version"])
    return launch.write_config(work, run, recipe, sections, tuning)


def _timed_ms(records, warmup: int, steps: int, work: Path) -> float:
    times = {r.step: r.step_s for r in records}
    timed = [times[k] for k in range(warmup, warmup + steps) if k in times]
    if len(timed) != steps:
        raise ParallaxError(f"MaxText's metrics file {work / 'metrics.jsonl'} lacks steps {warmup}.."
                            f"{warmup + steps - 1}; see {work / 'train.log'}")
    return sum(timed) * 1e3 / len(timed)


def _tar_xplanes(trace: Path, path: Path) -> Path:
    """The trace's ``*.xplane.pb`` files as one archive at ``path``, written beside it and renamed."""
    with replacing(path, "--output-dir") as tmp, tarfile.open(tmp, "w:gz") as tar:
        for found in sorted(trace.rglob("*.xplane.pb")):
            tar.add(found, arcname=str(found.relative_to(trace)))
    return path
