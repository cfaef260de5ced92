"""Step timing for JAX, which has no device event API (see docs/timing.md, "JAX engine").

The step time of step k is t_ready(k) − t_ready(k−1): the host clock read when step k's
metrics (loss, gradient norm) become ready, with step k+1 already dispatched so the device never waits for the host.
t_ready(−1) is the host clock just before the first dispatch. ``overhead`` measures what
this method costs against the cheapest possible measurement: the same number of steps with
a single block at the end.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

import numpy as np

from parallax.engines.jax.parallel import host_value


def device_batches(host_batches, put) -> Iterator:
    """Device copies of host batches with the next one already in transfer; ``put`` is a
    jax.Device, or ``parallel.Layout.put_batch`` (on a mesh: this process's rows of the global
    batch as the global array).

    Each host batch is copied first (``put`` does): a BatchSource only keeps a yielded batch
    valid until two more are drawn, and a transfer (or a CPU buffer aliasing host memory) may
    outlive that.
    """
    if not callable(put):
        import jax

        device = put

        def put(batch):
            return jax.device_put(np.array(batch, dtype=np.int32, copy=True), device)

    source = iter(host_batches)
    upcoming = put(next(source))
    while True:
        current = upcoming
        try:
            upcoming = put(next(source))
        except StopIteration:
            yield current
            return
        yield current


def timed_steps(step_fn, state: tuple, batches: Iterator, steps: range,
                on_done: Callable[[int, np.ndarray, float, float], None],
                pause_after: Callable[[int], bool] = lambda k: False,
                on_pause: Callable[[tuple], None] = lambda state: None) -> tuple:
    """Run ``steps`` with one step in flight; call on_done(k, metrics, step_ms, wait_ms) as
    each completes, metrics being step k's metrics array copied to the host and wait_ms the
    host time ``next(batches)`` took before step k's dispatch (its data wait: drawing the
    batch, and with ``device_batches`` starting the next one's transfer).

    ``state`` is the training state, e.g. (params, extra, opt_state); ``step_fn(*state, batch)``
    returns (*state, metrics). When pause_after(k), the pipeline drains, on_pause(state)
    runs (an evaluation), and timing restarts, so the pause is in no step's time.
    """
    pending = None
    t_prev = time.perf_counter()
    for k in steps:
        t_ask = time.perf_counter()
        batch = next(batches)
        wait_ms = (time.perf_counter() - t_ask) * 1e3
        *state, metrics = step_fn(*state, batch)
        state = tuple(state)
        if pending is not None:
            t_prev = _complete(pending, t_prev, on_done)
        pending = (k, metrics, wait_ms)
        if pause_after(k):
            _complete(pending, t_prev, on_done)
            pending = None
            on_pause(state)
            t_prev = time.perf_counter()
    if pending is not None:
        _complete(pending, t_prev, on_done)
    return state


def _complete(pending, t_prev: float, on_done) -> float:
    k, metrics, wait_ms = pending
    metrics.block_until_ready()  # every local device's copy: the slowest local device decides
    t_ready = time.perf_counter()
    on_done(k, host_value(metrics), (t_ready - t_prev) * 1e3, wait_ms)
    return t_ready


def untimed_steps(step_fn, state: tuple, batches: Iterator, n: int) -> tuple[tuple, float]:
    """Run n steps, blocking once at the end; (state, total seconds)."""
    t0 = time.perf_counter()
    metrics = None
    for _ in range(n):
        *state, metrics = step_fn(*state, next(batches))
        state = tuple(state)
    metrics.block_until_ready()
    return state, time.perf_counter() - t0


def overhead(step_fn, state: tuple, batches: Iterator, n: int, rounds: int = 2) -> tuple[tuple, dict]:
    """The cost of per-step timing: mean step time by the per-step method vs. by one block at
    the end, over ``rounds`` interleaved pairs of ``n`` steps each (after training, on the
    training state). Positive ``overhead_ms`` means the per-step method reads slower."""
    per_step, single = [], []
    for _ in range(rounds):
        times: list[float] = []
        state = timed_steps(step_fn, state, batches, range(n), lambda k, metrics, ms, wait: times.append(ms))
        per_step.append(sum(times) / n)
        state, total_s = untimed_steps(step_fn, state, batches, n)
        single.append(total_s * 1e3 / n)
    per_step_ms, single_ms = float(np.mean(per_step)), float(np.mean(single))
    return state, {
        "steps_per_round": n,
        "rounds": rounds,
        "per_step_method_mean_ms": per_step_ms,
        "single_block_mean_ms": single_ms,
        "overhead_ms": per_step_ms - single_ms,
        "overhead_pct": 100.0 * (per_step_ms - single_ms) / single_ms,
    }
