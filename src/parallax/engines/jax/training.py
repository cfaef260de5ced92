"""``JaxEngine.train``: compile, then the timed loop, evaluations and the timing-overhead check."""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from parallax.spec.config import RunConfig
from parallax.engines.base import EngineOutput, EvalRecord, Progress, StepRecord, bad_gradients, eval_due
from parallax.engines.jax import timing
from parallax.engines.jax.parallel import Layout, host_value, memory_by_device, slowest_steps
from parallax.engines.jax.parallel import record as parallel_record
from parallax.engines.jax.runtime import (
    build_model,
    import_jax,
    init_extra,
    jit_train_step,
    make_optimizer,
)
from parallax.engines.schedule import lr_at
from parallax.engines.weights import init_weights
from parallax.plan import machine

TIMING_METHOD = (
    "host clock when step k's metrics are ready minus the same for step k-1, "
    "with step k+1 already dispatched (one step in flight)"
)
PARALLEL_TIMING = ("on several processes each clocks its steps so, and a step's time is the slowest "
                   "process's (a process's clock waits for all of its devices)")
# Steps per round of the timing-overhead measurement, run after training (2 rounds of each method).
OVERHEAD_STEPS = 20


def train(run: RunConfig, plan, batches, progress: Progress) -> EngineOutput:
    """The whole run inside the recipe's context (TE's autocast: its modules read the recipe
    when they are initialised and traced)."""
    with plan.handles["precision"].hooks.context():
        return _train(run, plan, batches, progress)


@dataclass
class Built:
    """The model, its state and its jitted step as ``train`` builds them (``build``)."""

    model: object
    attention: str
    attention_reason: str
    layout: Layout
    state: tuple  # (params, extra, opt_state)
    step: object  # jit_train_step's function, not compiled yet
    names: list[str]  # the quantized kernels whose gradient norms the metrics carry
    first: np.ndarray  # a private copy of the first host batch
    device_batches: Iterator  # every batch from the first, on the device(s)


def build(run: RunConfig, plan, batches, attention: str | None = None) -> Built:
    """The model of ``run``, its initial state and its jitted step, as ``plan`` (the engine's
    check) says; ``attention`` overrides the attention choice (``JaxEngine.build_step``)."""
    jax = import_jax()
    device, precision = plan.handles["device"], plan.handles["precision"]
    # A plan made by hand (tests) may name only its device: one device, then.
    layout: Layout = plan.handles.get("layout") or Layout.one_device(run, device)
    config, hooks = run.model_config, precision.hooks
    model, attention, attention_reason = build_model(
        config, precision.compute_dtype, device, run.batch_size, run.seq_len, module=hooks.model, attention=attention)
    params = layout.place_params(hooks.to_params(init_weights(config, run.seed), config))
    extra = init_extra(model, hooks.extra_collections(), (run.batch_size, run.seq_len), device)
    if not layout.single:  # the recipe's variables, replicated over the mesh
        extra = layout.place(jax.tree.map(np.asarray, extra), jax.tree.map(lambda _: layout.replicated(), extra))
    tx = make_optimizer(run.optim, run.steps)
    opt_state = _init_optimizer(tx, params, layout)
    kernels = hooks.quantized_kernels(config)
    watched, names = [path for path, _ in kernels], [name for _, name in kernels]
    first, host_batches = _with_private_first(batches)
    device_batches = timing.device_batches(host_batches, layout.put_batch)
    state = (params, extra, opt_state)
    return Built(model, attention, attention_reason, layout, state, jit_train_step(model, tx, watched, layout, state),
                 names, first, device_batches)


def _train(run: RunConfig, plan, batches, progress: Progress) -> EngineOutput:
    device, precision = plan.handles["device"], plan.handles["precision"]
    progress.phase("building the model")
    built = build(run, plan, batches)
    model, attention, attention_reason, layout = built.model, built.attention, built.attention_reason, built.layout
    state, names, first, device_batches = built.state, built.names, built.first, built.device_batches
    params, extra, _ = state

    progress.phase("compiling")
    step_fn, aot_compile_s = _timed_compile(built.step, state, first, layout)
    eval_set = batches.eval_batches() if run.eval_every > 0 else []
    evaluate, eval_compile_s = _evaluator(model, eval_set, layout, params, extra)
    peak_after_compile = max_peak(memory_by_device(layout))

    progress.phase("training")
    records: list[StepRecord] = []
    evals: list[EvalRecord] = []

    def on_done(k: int, metrics: np.ndarray, step_ms: float, wait_ms: float) -> None:
        loss, grad_norm, *norms = (float(m) for m in metrics)
        records.append(StepRecord(k, loss, step_ms, float(lr_at(k, run.optim, run.steps)), grad_norm,
                                  bad_gradients(names, norms), data_wait_ms=wait_ms))
        progress.step(k, loss, step_ms)

    def on_pause(state) -> None:
        evals.append(EvalRecord.of(records[-1].step, evaluate(state[0], state[1])))

    state = timing.timed_steps(step_fn, state, device_batches, range(run.steps),
                               on_done, lambda k: evaluate is not None and eval_due(run, k), on_pause)

    progress.phase("measuring the timing overhead")
    repeat = timing.device_batches(itertools.repeat(first), layout.put_batch)
    n = min(OVERHEAD_STEPS, run.steps)
    state, overhead = timing.overhead(step_fn, state, repeat, n)
    del state

    # Every process clocks its own steps: a step takes as long as its slowest process.
    slowest, process_medians = slowest_steps([r.step_ms for r in records])
    for record, ms in zip(records, slowest):
        record.step_ms = ms
    memory = memory_by_device(layout)
    _, _, stats = _memory_peaks(device)
    framework = framework_info(device, attention, attention_reason)
    if not layout.single:
        framework["devices"] = [f"{d.platform}:{d.id}" for d in layout.devices]
    return EngineOutput(
        steps=records,
        precision=precision.info,
        framework=framework,
        timing_method=TIMING_METHOD if layout.single else f"{TIMING_METHOD}; {PARALLEL_TIMING}",
        # As in the torch engine: compilation plus the first step's execution (docs/timing.md).
        compile_s=aot_compile_s + records[0].step_ms / 1e3,
        peak_allocated_bytes=max_peak(memory),
        peak_reserved_bytes=max_peak(memory, 1),
        evals=evals,
        extra={
            "timing_overhead": overhead,
            "aot_compile_s": aot_compile_s,
            "first_step_s": records[0].step_ms / 1e3,
            "eval_compile_s": eval_compile_s,
            "peak_bytes_in_use_after_compile": peak_after_compile,
            "memory_stats": stats,
            "memory_note": "peaks are over the whole process, compilation (autotuning) included"
                           + ("" if layout.single else "; the largest over the devices (per_rank has each)"),
            "quantized_parameters": names,
            "extra_collections": list(extra),
            "parallel": parallel_record(run, layout, process_medians, memory),
        },
    )


def max_peak(memory: list[tuple], column: int = 0) -> int | None:
    """The largest of the devices' peaks (``parallel.memory_by_device``), None where none has one."""
    values = [row[column] for row in memory if row[column] is not None]
    return max(values) if values else None


def _init_optimizer(tx, params, layout: Layout):
    """The optimizer state, committed where the params are: on a mesh each moment shares its
    parameter's sharding (``Layout.state_sharding`` decides by shape), the step count replicated."""
    import jax

    if layout.single:
        return jax.device_put(tx.init(params), layout.devices[0])
    shardings = layout.state_shardings(jax.eval_shape(tx.init, params))
    return jax.jit(tx.init, out_shardings=shardings)(params)


def _with_private_first(batches) -> tuple[np.ndarray, itertools.chain]:
    """A private copy of the first batch (reused for compiling and the overhead check) and an
    iterator over all batches from the first."""
    source = iter(batches)
    first = np.array(next(source), dtype=np.int32, copy=True)
    return first, itertools.chain([first], source)


def _timed_compile(step_fn, state: tuple, first: np.ndarray, layout: Layout):
    """Lower and compile the step ahead of time for ``state`` = (params, extra, opt_state) and
    the global batch (``first`` is this process's rows of it); (compiled step, seconds)."""
    import jax

    t0 = time.perf_counter()
    batch = jax.ShapeDtypeStruct((layout.global_batch, *first.shape[1:]), np.int32,
                                 sharding=layout.batch_sharding())
    compiled = step_fn.lower(*state, batch).compile()
    return compiled, time.perf_counter() - t0


def _evaluator(model, eval_batches: list[np.ndarray], layout: Layout, params, extra):
    """((params, extra) -> each batch's eval loss, compile seconds); compiled before training so that
    the first evaluation's time is only evaluation. (None, 0.0) without eval batches. The
    forward pass reads the recipe's extra variables (fp8 scales) and changes nothing. On a mesh
    each evaluation batch is split over the devices like a training batch; its loss is the
    mean over the whole batch, as on one device."""
    import jax

    from parallax.engines.jax.model import loss_fn

    if not eval_batches:
        return None, 0.0
    on_device = [layout.put_eval(b) for b in eval_batches]
    gather = layout.gather() or (lambda p: p)
    t0 = time.perf_counter()
    compiled = jax.jit(lambda p, e, b: loss_fn(model, gather(p), b, e)).lower(params, extra, on_device[0]).compile()
    compile_s = time.perf_counter() - t0

    def evaluate(p, e) -> list[float]:
        return [float(host_value(compiled(p, e, b))) for b in on_device]

    return evaluate, compile_s


def _memory_peaks(device) -> tuple[int | None, int | None, dict]:
    """(peak bytes in use, peak bytes the allocator reserved, raw stats); None where the
    backend reports nothing (the CPU)."""
    stats = device.memory_stats() or {}
    return stats.get("peak_bytes_in_use"), stats.get("peak_pool_bytes"), dict(stats)


def framework_info(device, attention: str, attention_reason: str) -> dict:
    """What ran: versions, device, attention implementation, compilation, allocator."""
    import flax
    import jax
    import jaxlib
    import optax

    return {
        "name": "jax",
        "version": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "device": f"{device.platform}:{device.id}",
        "device_name": device.device_kind,
        "device_uuid": device_uuid(device),
        "compute_capability": getattr(device, "compute_capability", None),
        "platform": device.platform,
        "attention_backend": attention,
        "attention_reason": attention_reason,
        "compiled": True,
        "compiler": "XLA via jax.jit; params and optimizer state donated",
        "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
        "allocator": os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "bfc (default)"),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def device_uuid(device) -> str | None:
    """The UUID ('GPU-...', NVML's) of a JAX GPU device: the probe's GPU at its CUDA ordinal
    (``local_hardware_id``: JAX and the probe count the visible GPUs alike); None on the CPU or
    where the probe does not see it."""
    if device.platform != "gpu":
        return None
    index = getattr(device, "local_hardware_id", None)
    found = machine.gpu_of(f"cuda:{device.id if index is None else index}")
    return (found or {}).get("uuid")
