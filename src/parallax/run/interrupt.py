"""A run stopped by SIGINT (Ctrl-C) or SIGTERM keeps what it did.

While an engine trains, ``StepLog`` sees every finished step through the engine's progress
(step, loss, step time: what ``Progress.step`` receives), and ``signals_interrupt`` turns SIGTERM
into the same exception Ctrl-C raises (``Interrupted``, a KeyboardInterrupt). The driver then
writes run.json with status ``interrupted``, the steps done in steps.jsonl and the step-time
statistics over the timed ones done (``interrupted_record``), and the command exits 128 + the
signal's number (130 for SIGINT, 143 for SIGTERM), as shells do. A benchmark's resume runs an
interrupted cell again. Evaluations and memory peaks of the unfinished run are not kept.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass

from parallax.analysis.stats import percentile_summary


class Interrupted(KeyboardInterrupt):
    """The run was stopped by ``signum``."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(exc: BaseException) -> int:
    return getattr(exc, "signum", signal.SIGINT)


def exit_code_of(signum: int) -> int:
    return 128 + int(signum)


@contextlib.contextmanager
def signals_interrupt():
    """SIGTERM raises ``Interrupted`` in the main thread while the block runs (SIGINT already
    raises KeyboardInterrupt); the previous handler comes back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class Done:
    step: int
    loss: float | None
    step_ms: float | None


class StepLog:
    """A Progress that records each finished step and passes everything on to ``inner``."""

    def __init__(self, inner):
        self.inner = inner
        self.steps: list[Done] = []

    def step(self, step: int, loss: float | None, step_ms: float | None) -> None:
        self.steps.append(Done(step, loss, step_ms))
        self.inner.step(step, loss, step_ms)

    def phase(self, text: str) -> None:
        self.inner.phase(text)


def step_rows(steps: list[Done], warmup: int) -> list[dict]:
    """steps.jsonl of the steps done (no lr or gradient norm: the engine never handed them over)."""
    return [{"step": s.step, "loss": s.loss, "step_ms": s.step_ms, "measured": s.step >= warmup} for s in steps]


def interrupted_record(steps: list[Done], warmup: int, tokens_per_step: int, signum: int) -> dict:
    """run.json's fields of an interrupted run beyond config, model, precision and environment."""
    timed = [s.step_ms for s in steps if s.step >= warmup and s.step_ms is not None]
    losses = [s.loss for s in steps if s.loss is not None]
    name = signal.Signals(signum).name
    record = {
        "status": "interrupted",
        "error": f"interrupted by {name} after {len(steps)} steps ({len(timed)} timed)",
        "steps_done": len(steps),
        "timing": {"warmup_steps": warmup, "measured_steps": len(timed)},
    }
    if timed:
        step_ms = percentile_summary(timed)
        record["timing"]["step_ms"] = step_ms
        record["throughput"] = {"tokens_per_s": tokens_per_step / (step_ms["median"] / 1e3)}
    if losses:
        record["loss"] = {"first": losses[0], "final": losses[-1]}
    return record
