"""The training driver every engine shares: RunConfig in, ``run.json`` + ``steps.jsonl`` out.

Order of work: validate the run, check the output directory is writable, ask the engine
whether it can run (``Engine.check``: dependency, device, precision), open the batch source —
all before any GPU work, so bad input costs nothing and writes nothing (ParallaxError, exit 2).
Then the engine trains and this module turns its raw measurements into the result: step-time
statistics over the measured steps (index ≥ warmup), throughput, FLOPs and MFU under every
accounting and denominator, memory, loss and evaluation.

A run that fails after it started still leaves a ``run.json``: status ``oom`` (exit code 3) or
``failed`` with the error and the traceback's tail (exit code 1). One stopped by Ctrl-C or
SIGTERM (``parallax.run.interrupt``) leaves status ``interrupted`` with the steps it did and
their statistics (exit code 130 or 143). A run's first step replaces the result files of a run
before it in the folder; ``claimed`` is what ``parallax train`` holds its folder with: no
second process in it, and no run or benchmark there replaced unless asked.

Several GPUs (``RunConfig.gpus`` > 1; ``parallax.run.distributed``): a torch run first launches its
ranks (this process becomes the launcher, which writes the run.json of a failed launch), each
rank trains here on its rows of every global batch, and rank 0 alone writes the result from
every rank's measurements: ``timing.step_ms`` summarises, step by step, the slowest rank's time
(the step ends when the last rank's does); ``throughput.tokens_per_s`` is global and
``tokens_per_s_per_gpu`` its share per GPU, which MFU divides by one GPU's peak; ``memory`` is
the largest rank's; ``parallel`` holds the launch and every rank's median step and peak memory.
A rank that fails records its error for the launcher and exits non-zero (no run.json of its own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import socket
import statistics
import time
import traceback
from pathlib import Path

from parallax.run import distributed, interrupt, live_log
from parallax.spec import flops, tuning
from parallax.plan import hardware, machine
from parallax.plan.resolve import RunPlan, resolve
from parallax.spec.config import RunConfig
from parallax.data.source import make_batch_source
from parallax.engines import get_engine
from parallax.engines.base import EngineOutput, NullProgress, Progress, StepRecord
from parallax.engines.schedule import lr_at
from parallax.store.timestamps import utc_now
from parallax.errors import ParallaxError
from parallax.spec.precision import PrecisionInfo
from parallax.store.files import make_folder
from parallax.store.lock import locked
from parallax.store.results import (MATRIX_FILE, RUN_FILE, RUNS_DIR, STEPS_FILE, is_out_of_memory, model_record,
                                    writable_output_dir, write_run)
from parallax.analysis.stats import percentile_summary, perplexity, smoothed_final

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_OOM = 0, 1, 2, 3
EXIT_CODES = {"ok": EXIT_OK, "failed": EXIT_FAILED, "oom": EXIT_OOM}
TRACEBACK_LINES = 30


def run_training(run: RunConfig | RunPlan, progress: Progress | None = None) -> dict:
    """Train ``run`` and write its result into ``run.output_dir``; return the run.json dict.
    A RunConfig is resolved here (``plan.resolve``); the command line hands its RunPlan, which
    it resolved once to decide how to show the run.

    Raises ParallaxError (nothing written) when the run cannot start. A torch run of several
    GPUs started here launches its ranks (``distributed.launch``) and returns rank 0's result
    or the launcher's record of the failure; in a rank, ``progress`` is shown by rank 0 only."""
    plan = run if isinstance(run, RunPlan) else resolve(run)
    run = plan.run
    distributed.check_parallel(plan)
    if distributed.needs_launch(run):
        return distributed.launch(plan)
    rank = distributed.rank_info() if run.gpus > 1 and run.framework in distributed.LAUNCHED else None
    if rank is None:
        return _train(plan, progress)
    try:
        return _train(plan, progress if rank.rank == 0 else None, launched=True)
    except BaseException as exc:  # the launcher records the rank that failed first
        step = getattr(exc, "parallax_step", None)
        if distributed.launched_here():
            distributed.record_failure(exc, rank, step)
        elif not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            distributed.outer_failure(plan, rank, exc, step)
        raise


def _train(resolved: RunPlan, progress: Progress | None, launched: bool = False) -> dict:
    """One process's part of the run; the writer (rank 0 of ``Plan.rank``) writes the result.
    ``launched``: a rank under the launcher, whose failures end the process instead of being
    written here."""
    run = resolved.run
    setup = SetupClock()
    run_dir = writable_output_dir(run.output_dir)
    engine = get_engine(run.framework)
    plan = engine.check(resolved)
    setup.lap("check")
    batches = make_batch_source(run, plan.rank, plan.world)
    setup.lap("data")
    environment = machine.environment()
    setup.lap("environment")
    started = utc_now()
    live = open_live_log(resolved, plan, run_dir, environment)  # TensorBoard, W&B: where --log asks
    if plan.rank == 0:
        clear_run(run_dir)  # a run there before is replaced from this one's first step
    done = StepLog(run, progress or NullProgress(), live)
    try:
        out = engine.train(run, plan, batches, done)
        result = summarize(resolved, out, environment, data_record(run, batches), started)
        result["timing"]["setup_s"] = setup.laps
        result["recipe"] = plan.recipe.to_dict()
        steps = step_rows(run, out.steps)
    except ParallaxError:
        done.close_log()
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: keep the steps done
        if launched:
            done.close_log()
            raise
        result = interrupted_result(run, plan.precision, environment, started, interrupt.of(exc), done.steps)
        result["timing"]["setup_s"] = setup.laps
        result["recipe"] = plan.recipe.to_dict()
        steps = step_rows(run, done.steps)
    except Exception as exc:  # the run started: record how it ended instead of losing it
        if launched:
            done.close_log()
            raise
        traceback.print_exc()
        result, steps = failure_result(run, plan.precision, environment, started, exc), []
        result["recipe"] = plan.recipe.to_dict()
    finally:
        batches.close()
    try:
        if plan.rank == 0:
            write_run(run_dir, result, steps)
    finally:
        done.finish_log(steps, result)
    engine.close(plan)
    return result


def clear_run(run_dir: Path) -> None:
    for name in (RUN_FILE, STEPS_FILE):
        (run_dir / name).unlink(missing_ok=True)


@contextlib.contextmanager
def claimed(path: str, overwrite: bool = False):
    """``path`` held for one ``parallax train`` while the body runs: created, and locked against a
    second process (``store/lock.py``). Refused first, with nothing made, when it is not writable,
    holds a benchmark, or holds a run or is a benchmark's cell (unless ``overwrite``). A run that
    ends before it writes (a refusal in the body, Ctrl-C during the checks) leaves the file system
    as it was: the lock goes, and so do the folders made here. The benchmark runner's cells pass
    ``--overwrite``: the runner owns them and has cleared the one it runs."""
    run_dir = writable_output_dir(path)
    check_free(run_dir, overwrite)
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # deepest first
    make_folder(run_dir, "--output-dir")
    try:
        with locked(run_dir, "parallax train"):
            check_free(run_dir, overwrite)  # again, holding the lock: a run may have ended meanwhile
            yield run_dir
    finally:
        for folder in made:
            with contextlib.suppress(OSError):  # not empty: the run wrote its result
                folder.rmdir()


def check_free(run_dir: Path, overwrite: bool) -> None:
    """One line naming the way out, when ``run_dir`` holds a benchmark, or (unless ``overwrite``)
    a run or a benchmark's cell."""
    if (run_dir / MATRIX_FILE).exists():
        raise ParallaxError(f"{run_dir} holds a benchmark ({MATRIX_FILE}); pick a fresh --output-dir")
    if overwrite:
        return
    held = [name for name in (RUN_FILE, STEPS_FILE) if (run_dir / name).exists()]
    if held:
        raise ParallaxError(f"{run_dir} already holds a run ({held[0]}); pass --overwrite to replace it, "
                            "or pick a fresh --output-dir")
    bench = run_dir.absolute().parent
    if bench.name == RUNS_DIR and (bench.parent / MATRIX_FILE).exists():
        raise ParallaxError(f"{run_dir} is a cell of the benchmark in {bench.parent}; pass --overwrite to run it "
                            "by hand, or pick a fresh --output-dir")


class StepLog:
    """The Progress an engine reports to, passed on to ``inner``; it keeps every step reported
    (loss, time, and the schedule's learning rate), which an interrupted run records, and hands
    each to ``live`` (TensorBoard, W&B: ``run/live_log.py``) where the run is watched."""

    def __init__(self, run: RunConfig, inner: Progress, live: live_log.LiveLog | None = None):
        self.run, self.inner, self.live = run, inner, live
        self.steps: list[StepRecord] = []

    def step(self, step: int, loss: float | None, step_ms: float | None) -> None:
        lr = float(lr_at(step, self.run.optim, self.run.steps))
        self.steps.append(StepRecord(step, loss, step_ms, lr))
        if self.live is not None:
            self.live.step(step, loss, step_ms, lr)
        self.inner.step(step, loss, step_ms)

    def finish_log(self, rows: list[dict], result: dict) -> None:
        """steps.jsonl's ``rows`` and the result to the live log, which then closes."""
        if self.live is not None:
            self.live.finish(rows, result)

    def close_log(self) -> None:
        if self.live is not None:
            self.live.close()

    def phase(self, text: str) -> None:
        self.inner.phase(text)


class SetupClock:
    """Seconds spent before training starts, by phase: ``imports`` (from the package's first
    import to here), then each ``lap``. Recorded as ``timing.setup_s``; a benchmark cell's wall
    time minus its training time is mostly this."""

    def __init__(self):
        import parallax

        self.last = time.monotonic()
        self.laps = {"imports": round(self.last - parallax.IMPORTED_AT, 3)}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(now - self.last, 3)
        self.last = now


def exit_code(result: dict) -> int:
    """0 ok, 1 failed, 3 oom; an interrupted run 128 + its signal's number (130, 143)."""
    if result["status"] == "interrupted":
        return interrupt.exit_code(result["signal"])
    return EXIT_CODES.get(result["status"], EXIT_FAILED)


def failure_result(run: RunConfig, precision: PrecisionInfo, environment: dict, started: str,
                   exc: BaseException) -> dict:
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    tail = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(tail).rstrip().splitlines()[-TRACEBACK_LINES:]
    oom = is_out_of_memory(exc)
    return {
        "status": "oom" if oom else "failed",
        "error": f"{'out of memory: ' if oom else ''}{type(exc).__name__}: {first}",
        "traceback": "\n".join(tail),
        "config": run.to_dict(),
        "model": model_record(run),
        "precision": precision.to_dict(),
        "environment": environment,
        # an engine that runs another program (MaxText) attaches that program's last lines
        **({"log_tail": exc.log_tail} if getattr(exc, "log_tail", None) else {}),
        "started_at": started,
        "finished_at": utc_now(),
    }


def interrupted_result(run: RunConfig, precision: PrecisionInfo, environment: dict, started: str,
                       stop: interrupt.Interrupted, done: list[StepRecord]) -> dict:
    """The run.json of a run stopped by a signal: the steps done, and the statistics of the timed
    ones (index >= warmup) where there are any (``timing.step_ms`` and ``throughput`` else None)."""
    timed = [s.step_ms for s in done if s.step >= run.warmup and s.step_ms is not None]
    step_ms = percentile_summary(timed) if timed else None
    losses = [s.loss for s in done if s.loss is not None]
    return {
        "status": "interrupted",
        "error": f"interrupted by {stop.name} after {len(done)} of {run.steps} steps",
        "signal": stop.name,
        "steps_done": len(done),
        "config": run.to_dict(),
        "model": model_record(run),
        "precision": precision.to_dict(),
        "environment": environment,
        "timing": {"warmup_steps": run.warmup, "measured_steps": len(timed), "step_ms": step_ms},
        "throughput": throughput_record(run.tokens_per_step, step_ms) if step_ms else None,
        "loss": {"first": losses[0], "final": losses[-1], "final_smoothed": smoothed_final(losses)} if losses else None,
        "started_at": started,
        "finished_at": utc_now(),
    }


def measured_steps(run: RunConfig, out: EngineOutput) -> list:
    return [s for s in out.steps if s.step >= run.warmup]


def data_record(run: RunConfig, batches) -> dict:
    """Where the tokens came from; a real-data source adds its facts (files, hashes, ring)."""
    info = batches.info() if hasattr(batches, "info") else {}
    return {"source": batches.description, "synthetic": run.synthetic, **info}


def summarize(plan: RunPlan, out: EngineOutput, environment: dict, data: dict, started: str) -> dict:
    """The run.json of a run that finished (see ``parallax.store.results``)."""
    run = plan.run
    parallel = parallel_record(run, out)  # the slowest rank's step times go into out.steps
    measured = measured_steps(run, out)
    if not measured:
        raise RuntimeError(f"the engine returned {len(out.steps)} steps, none after the {run.warmup} warmup steps")
    step_ms = percentile_summary(s.step_ms for s in measured)
    throughput = throughput_record(run.tokens_per_step, step_ms)
    throughput["tokens_per_s_per_gpu"] = throughput["tokens_per_s"] / run.gpus
    peaks = {key: _max_over_ranks(parallel["per_rank"], key, getattr(out, key))
             for key in ("peak_allocated_bytes", "peak_reserved_bytes")}
    losses = [s.loss for s in out.steps]
    problem = training_problem(out)
    return {
        "status": "failed" if problem else "ok",
        "error": problem,
        "config": run.to_dict(),
        "model": model_record(run),
        "precision": out.precision.to_dict(),
        "framework": out.framework,
        "tuning": tuning.record(run.framework, plan.recipe, run.tuning),
        "environment": environment,
        "data": {**data, **out.extra.get("data", {})},  # the engine may say what it really read
        "timing": {
            "method": out.timing_method,
            "warmup_steps": run.warmup,
            "measured_steps": len(measured),
            "compile_s": out.compile_s,
            "warmup_ms_total": sum(s.step_ms for s in out.steps if s.step < run.warmup),
            "step_ms": step_ms,
            "data_wait": data_wait_record(measured),
        },
        "throughput": throughput,
        # MFU per GPU: one GPU's share of the tokens against one GPU's peak.
        "flops": flops_record(plan, out, environment, throughput["tokens_per_s_per_gpu"]),
        "memory": peaks,  # the largest rank's
        "parallel": parallel,
        "loss": {
            "first": losses[0],
            "final": losses[-1],
            "final_smoothed": smoothed_final(losses),
        },
        "eval": [
            {"step": e.step, "loss": e.loss, "perplexity": perplexity(e.loss), "batch_losses": e.batch_losses}
            for e in out.evals
        ],
        "per_step": {
            "step_ms": [s.step_ms for s in out.steps],
            "loss": [s.loss for s in out.steps],
        },
        "engine_extra": out.extra,
        "guards": {"tolerated_zero_gradients": tolerated_zero_gradients(out)},
        "started_at": started,
        "finished_at": utc_now(),
    }


DATA_WAIT_METHOD = ("host wall time of each step getting its batch ready for the device (drawing it "
                    "from the source, handing it to the device), over the timed steps; fraction = "
                    "total wait / total step time")


def data_wait_record(measured: list[StepRecord]) -> dict | None:
    """``timing.data_wait``: how long the timed steps waited for their batches (median, mean and
    total ms, and the total's fraction of their total step time); None where the engine did not
    record a step's wait. ``analysis.comparability.input_bound`` reads it."""
    waits = [s.data_wait_ms for s in measured]
    if not waits or any(w is None for w in waits):
        return None
    total, step_total = sum(waits), sum(s.step_ms for s in measured)
    return {"median_ms": statistics.median(waits), "mean_ms": total / len(waits), "total_ms": total,
            "fraction": total / step_total if step_total > 0 else None, "method": DATA_WAIT_METHOD}


def parallel_record(run: RunConfig, out: EngineOutput) -> dict:
    """run.json's ``parallel`` record from the engine's ``extra["parallel"]`` (absent: one
    process on one GPU). Ranks that report per-step times (``step_ms``, one per step: torch)
    make each step's time the slowest rank's, in ``out.steps`` too, and lose the lists here
    (steps.jsonl keeps them as ``rank_step_ms``)."""
    given = dict(out.extra.get("parallel") or {})
    ranks = [dict(r) for r in given.get("per_rank") or []] or [{
        "rank": 0, "host": socket.gethostname(), "device": out.framework.get("device"),
        "peak_allocated_bytes": out.peak_allocated_bytes, "peak_reserved_bytes": out.peak_reserved_bytes}]
    timed = [r for r in ranks if len(r.get("step_ms") or ()) == len(out.steps)]
    if len(timed) > 1:
        for i, step in enumerate(out.steps):
            step.rank_step_ms = [r["step_ms"][i] for r in timed]
            step.step_ms = max(step.rank_step_ms)
    run_times = [s.step_ms for s in measured_steps(run, out)]
    for entry in ranks:
        own = entry.pop("step_ms", None)
        entry.pop("loss", None)
        if "step_ms_median" not in entry:
            # a rank without times of its own steps with the run (one process: JAX's devices)
            times = [t for k, t in enumerate(own) if out.steps[k].step >= run.warmup] if own else run_times
            entry["step_ms_median"] = statistics.median(times) if times else None
    return {
        "gpus": run.gpus, "processes": given.get("processes", 1), "hosts": given.get("hosts", 1),
        "sharding": run.sharding, "per_gpu_batch": run.batch_size, "global_batch": run.global_batch,
        "launcher": given.get("launcher", "single"), "backend": given.get("backend"),
        **{k: v for k, v in given.items() if k not in PARALLEL_KEYS},
        "per_rank": ranks,
    }


PARALLEL_KEYS = ("gpus", "processes", "hosts", "sharding", "per_gpu_batch", "global_batch", "launcher",
                 "backend", "per_rank")


def _max_over_ranks(ranks: list[dict], key: str, fallback):
    values = [r[key] for r in ranks if r.get(key) is not None]
    return max(values) if values else fallback


def throughput_record(tokens: int, step_ms: dict) -> dict:
    """Tokens/s from the step-time summary: the median step gives ``tokens_per_s``."""
    return {
        "tokens_per_step": tokens,
        "tokens_per_s": tokens * 1e3 / step_ms["median"],
        "tokens_per_s_mean": tokens * 1e3 / step_ms["mean"],
        # tokens/s percentiles are the step-time percentiles mirrored: p10 of tokens/s
        # is the p90 step time.
        "tokens_per_s_p10": tokens * 1e3 / step_ms["p90"],
        "tokens_per_s_p90": tokens * 1e3 / step_ms["p10"],
    }


def flops_record(plan: RunPlan, out: EngineOutput, environment: dict, tokens_per_s: float) -> dict:
    """TFLOP/s and MFU under every accounting against every denominator of the run's GPU."""
    run = plan.run
    denominators, warnings = mfu_denominators(plan, out, environment)
    return {
        "primary_accounting": flops.PRIMARY_ACCOUNTING,
        "denominators_tflops": dataclasses.asdict(denominators),
        "warnings": warnings,
        "accountings": flops.mfu_table(tokens_per_s, run.model_config, run.seq_len, denominators),
    }


def training_problem(out: EngineOutput) -> str | None:
    """Why a run that finished did not really train, or None. Failures that look like success
    in a throughput table: a loss that became NaN/inf; a quantized layer whose gradient is all
    zero or not finite (TransformerEngine's NVFP4 recipe trained on zero gradients on sm_120
    before TE 2.19; REFERENCE.md §1); gradients that are all zero at every step. Such a run is
    recorded as failed with the reason, step and layer, all its measurements kept. (The third
    guard, a loss gap against the run's bf16 twin, needs the twin: ``runner`` applies it.)"""
    bad = [s.step for s in out.steps if not math.isfinite(s.loss)]
    if bad:
        return f"the loss is not finite from step {bad[0]} on ({len(bad)} of {len(out.steps)} steps)"
    layers = next((s for s in out.steps if guard_trips(s)), None)
    if layers is not None:
        count = sum(1 for s in out.steps if guard_trips(s))
        return (f"numerics guard: quantized layer gradient all zero or not finite at step {layers.step}: "
                f"{', '.join(layers.bad_layers[:3])}{' ...' if len(layers.bad_layers) > 3 else ''} "
                f"({count} of {len(out.steps)} steps)")
    norms = [s.grad_norm for s in out.steps if s.grad_norm is not None]
    if norms and all(n == 0.0 for n in norms):
        return (f"the gradient norm is exactly 0 at all {len(norms)} steps: nothing trained "
                "(a precision recipe that drops gradients?)")
    return None


# Rule: zero quantized-layer gradients in the first GUARD_GRACE_STEPS steps are recorded
# (``guards.tolerated_zero_gradients``), not a failure; later ones, and non-finite ones at any
# step, fail the run. A delayed-scaling fp8 recipe's scales have seen no amax in its first steps,
# so E5M2 can round a layer's small first gradients to zero (TE and Flax, up to step 1 at
# llama-860m: docs/results/2026-12-01-h200-c/crossover/, docs/results/2026-12-01-h200-b/).
GUARD_GRACE_STEPS = 2


def guard_trips(step) -> bool:
    """Whether a step's quantized-layer gradients fail the run (see GUARD_GRACE_STEPS)."""
    if not step.bad_layers:
        return False
    return step.step >= GUARD_GRACE_STEPS or any(not b.endswith("(zero)") for b in step.bad_layers)


def tolerated_zero_gradients(out: EngineOutput) -> list[dict]:
    return [{"step": s.step, "layers": len(s.bad_layers)} for s in out.steps
            if s.bad_layers and not guard_trips(s)]


def step_rows(run: RunConfig, steps: list[StepRecord]) -> list[dict]:
    """The lines of ``steps.jsonl``."""
    return [
        {"step": s.step, "loss": s.loss, "step_ms": s.step_ms, "lr": s.lr,
         "grad_norm": s.grad_norm, "measured": s.step >= run.warmup,
         **({"bad_layers": s.bad_layers} if s.bad_layers else {}),
         **({"rank_step_ms": s.rank_step_ms} if s.rank_step_ms else {}),
         **({"data_wait_ms": s.data_wait_ms} if s.data_wait_ms is not None else {})}
        for s in steps
    ]


def mfu_denominators(plan: RunPlan, out: EngineOutput, environment: dict):
    """(Denominators, warnings) for the GPU the engine ran on: the datasheet peaks from
    ``parallax.plan.hardware`` and the cuBLASLt ceiling that ``check-env --measure`` stored for it."""
    device = run_gpu(out.framework, environment.get("gpus") or [])
    fmt = plan.recipe.mfu_format  # an emulated recipe's GEMMs run in bf16
    ceiling = measured_ceiling(device, fmt)
    return hardware.denominators(device, fmt, plan.run.peak_tflops, ceiling)


def run_gpu(framework: dict, gpus: list[dict]) -> dict | None:
    """The probe entry of the GPU the engine used: by UUID where the engine reports one, else
    the only GPU, else the first of the reported name; None for CPU runs. Without a probe
    entry (no native probe in this build), the name and capability the engine reports."""
    uuid = _uuid(framework.get("device_uuid"))
    if uuid:
        for gpu in gpus:
            if _uuid(gpu.get("uuid")) == uuid:
                return gpu
    on_cpu = str(framework.get("device", "")).startswith("cpu") or framework.get("platform") == "cpu"
    if on_cpu:
        return None
    if not gpus:
        if framework.get("device_name") and framework.get("compute_capability"):
            return {"name": framework["device_name"], "compute_capability": framework["compute_capability"]}
        return None
    if len(gpus) == 1:
        return gpus[0]
    name = framework.get("device_name")
    return next((g for g in gpus if g.get("name") == name), gpus[0])


def _uuid(value) -> str:
    """NVML writes 'GPU-<hex>', torch '<hex>'; compare the hex."""
    return str(value or "").lower().removeprefix("gpu-")


def measured_ceiling(device: dict | None, precision: str) -> float | None:
    if device is None:
        return None
    try:
        from parallax.native import gpu
    except ImportError:  # a build without the native GPU module
        return None
    lookup = getattr(gpu, "measured_ceiling_tflops", None)
    return lookup(device.get("uuid"), precision) if lookup else None


def open_live_log(resolved: RunPlan, plan, run_dir: Path, environment: dict) -> live_log.LiveLog | None:
    """The run's TensorBoard and W&B sinks where ``PARALLAX_LOG`` asks for them (``--log``), in
    the process that writes the result; None elsewhere. The per-step MFU divides by the peak
    that run.json's MFU uses (the GPU of ``plan.device``)."""
    sinks = live_log.from_env()
    if not sinks or plan.rank != 0:
        return None
    live_log.check(sinks)
    run, fmt = resolved.run, resolved.recipe.mfu_format
    device = run_gpu({"device": plan.device}, environment.get("gpus") or [])
    peaks, _ = hardware.denominators(device, fmt, run.peak_tflops, measured_ceiling(device, fmt))
    per_token = flops.flops_per_token(run.model_config, run.seq_len)[flops.PRIMARY_ACCOUNTING]
    rates = live_log.Rates(run.tokens_per_step, run.gpus, per_token, peaks.precision_peak)
    where = {"device": plan.device, "gpu": (device or {}).get("name") or "cpu",
             "host": environment.get("hostname") or socket.gethostname()}
    return live_log.open_log(sinks, run_dir, live_log.hparams(run.to_dict(), resolved.recipe.to_dict(), where), rates)
