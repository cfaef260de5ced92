"""A run's training step under its framework's profiler, for ``parallax profile``: the step time
without the profiler, then the kernels of as many profiled steps, and attention's best measured
rate at the run's shape.

The step is the one ``train`` runs (``Engine.build_step``): ``warmup`` steps first (compilation,
autotuning, CUDA-graph capture), then ``steps`` steps timed on the host clock with the last one
waited for (as ``scripts/device`` timed them), then ``steps`` more under the profiler: torch's
``torch.profiler`` (CPU and CUDA activities), JAX's ``jax.profiler.trace`` (an XSpace, read with
``profiling.jax_kernel_events`` and described by the compiled step's HLO). MaxText runs in its
own process with its own profiler (``engines/maxtext/profile.py``).

On a GPU the events are its kernels; without one, the CPU operators (``on_gpu`` False): torch's
with their self times, XLA:CPU's ops. ``trace``: the kept trace (torch: a gzipped Chrome trace;
JAX: the xplane folder as .tar.gz), when asked for.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from parallax.engines import get_engine, profiling
from parallax.engines.base import NullProgress, Progress
from parallax.plan.resolve import RunPlan
from parallax.store.files import make_folder, replacing


@dataclass
class Profiled:
    """What one profile measured."""

    step_ms: float  # mean step time without the profiler
    events: list  # profiling.Kernel of the profiled steps
    on_gpu: bool
    details: dict = field(default_factory=dict)  # what ran: versions, attention, compilation, device
    device: str = "cpu"  # the engine's device, e.g. cuda:0, gpu:0
    trace: Path | None = None
    timing: str = "host clock over the timed steps, the last one waited for"
    attention_rates: list = field(default_factory=list)  # attention_rates(), on a GPU


def profile(plan: RunPlan, source, warmup: int, steps: int, trace_dir: Path | None = None,
            before=None, progress: Progress | None = None) -> Profiled:
    """Build ``plan``'s step on ``source``'s batches, time ``steps`` steps after ``warmup``, then
    profile ``steps`` more (torch or jax), and on a GPU measure attention's backends at the run's
    shape; ``trace_dir``: where to keep the trace. ``before()``, when given, runs once the engine
    has accepted the run (its checks raise first) and before its first step. ``progress`` is told
    each step, numbered from 0 over the three stages as ``train`` numbers a run's steps: each
    warm-up step once it is done (each waited for: the first ones compile), the timed steps
    together once timed (nothing runs between them), each profiled step once dispatched."""
    framework = plan.run.framework
    progress = progress or NullProgress()
    step = get_engine(framework).build_step(plan, source=source)
    if before is not None:
        before()
    for k in range(warmup):
        step.run(1)
        progress.step(k, None, None)
    started = time.perf_counter()
    step.run(steps)
    step_ms = (time.perf_counter() - started) * 1e3 / steps
    progress.step(warmup + steps - 1, None, None)
    reader = _torch_events if framework == "torch" else _jax_events
    events, on_gpu, trace = reader(step, steps, trace_dir, lambda k: progress.step(warmup + steps + k, None, None))
    profiled = Profiled(step_ms, events, on_gpu, dict(step.details), step.plan.device, trace)
    if on_gpu:
        profiled.attention_rates = attention_rates(framework, plan, step.plan.handles["device"])
    return profiled


def _torch_events(step, steps: int, trace_dir: Path | None, each):
    from torch.profiler import ProfilerActivity, profile as torch_profile

    on_gpu = step.plan.handles["device"].type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with native_log_filtered(), torch_profile(activities=activities) as prof:
        step.run(steps, each)
    trace = _gzip_chrome_trace(prof, _made(trace_dir) / "trace.json.gz") if trace_dir else None
    events = profiling.torch_kernel_events(prof) if on_gpu else profiling.torch_cpu_events(prof)
    return events, on_gpu, trace


# Lines the profilers' native libraries (Kineto) write on stderr about their own start and stop:
# not Parallax's output, so they are dropped; every other line written meanwhile is passed on.
NATIVE_LOG_PREFIXES = ("USDT:", "STAGE:")


@contextlib.contextmanager
def native_log_filtered():
    """File descriptor 2 into a temporary file while the body runs; then its lines, less the
    profiler's own log lines (``NATIVE_LOG_PREFIXES``), written to stderr. Python's own stderr
    (the progress bar, the command's lines) keeps writing where it did meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    caught = tempfile.TemporaryFile()
    try:
        with _python_stderr_to(saved):
            os.dup2(caught.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
        caught.seek(0)
        kept = [line for line in caught.read().decode(errors="replace").splitlines(keepends=True)
                if not line.startswith(NATIVE_LOG_PREFIXES)]
        caught.close()
        sys.stderr.write("".join(kept))


@contextlib.contextmanager
def _python_stderr_to(fd: int):
    """``sys.stderr`` onto ``fd`` while inside, where it writes to file descriptor 2 (a stderr
    captured elsewhere, as a test captures it, is left alone)."""
    try:
        on_fd2 = sys.stderr.fileno() == 2
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is both
        on_fd2 = False
    if not on_fd2:
        yield
        return
    sys.stderr.flush()
    before = sys.stderr
    with open(fd, "w", buffering=1, encoding=before.encoding or "utf-8", errors="backslashreplace",
              closefd=False) as own:
        sys.stderr = own
        try:
            yield
        finally:
            sys.stderr = before


def _gzip_chrome_trace(prof, path: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        with open(trace, "rb") as src, replacing(path) as tmp, gzip.open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return path


def _jax_events(step, steps: int, trace_dir: Path | None, each):
    import jax

    on_gpu = step.plan.handles["device"].platform == "gpu"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "trace"
        with jax.profiler.trace(str(folder)):
            step.run(steps, each)
        events = profiling.jax_kernel_events(folder) if on_gpu else profiling.jax_host_events(folder)
        trace = _tar(folder, _made(trace_dir) / "trace.xplane.tar.gz") if trace_dir else None
    return profiling.describe_hlo_ops(events, step.fn.as_text()), on_gpu, trace


def _tar(folder: Path, path: Path) -> Path:
    with replacing(path) as tmp, tarfile.open(tmp, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return path


def attention_rates(framework: str, plan: RunPlan, device) -> list[dict]:
    """Each attention backend's forward and backward time at ``plan``'s shape on ``device`` (the
    engine's device object: torch's, or a JAX device; JAX's for MaxText), in the compute dtype
    of the run's recipe (bf16 on a GPU)."""
    run, model = plan.run, plan.run.model_config
    shape = (run.batch_size, run.seq_len, model.n_heads, model.head_dim)
    if framework == "torch":
        from parallax.engines.torch import attention_rate
        from parallax.engines.torch.engine import import_torch

        return attention_rate.measure(*shape, device, import_torch().bfloat16)
    from parallax.engines.jax import attention_rate
    from parallax.engines.jax.runtime import import_jax

    return attention_rate.measure(*shape, device, import_jax().numpy.bfloat16)


def _made(folder: Path) -> Path:
    """The output folder, made now: the first file written into it is the trace."""
    return make_folder(folder)
