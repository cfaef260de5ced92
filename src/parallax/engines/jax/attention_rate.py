"""Attention's measured speed at a run's shape: ``jax.nn.dot_product_attention`` with each
implementation (cuDNN's fused attention, XLA's), causal, on [B, S, H, head_dim] inputs,
forward and backward timed apart: the jitted forward called ``iters`` times, then the jitted
backward (the forward's VJP, its residuals kept) ``iters`` times, each after ``warmup`` calls, on
the host clock with the last result waited for (JAX queues the calls back to back).
``parallax profile`` holds the attention classes to the fastest implementation's rate; one that
fails at this shape is recorded with its reason.
"""

from __future__ import annotations

import time
from functools import partial

from parallax.engines.jax.runtime import import_jax

IMPLEMENTATIONS = ("cudnn", "xla")


def measure(batch_size: int, seq_len: int, heads: int, head_dim: int, device, dtype, warmup: int = 3,
            iters: int = 10, implementations=IMPLEMENTATIONS) -> list[dict]:
    """[{backend, forward_ms, backward_ms, error}] of each implementation: the mean of one call."""
    jax = import_jax()
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v, grad = (jax.device_put(jax.random.normal(key, (batch_size, seq_len, heads, head_dim), dtype), device)
                     for key in keys)
    return [_implementation(jax, name, (q, k, v), grad, warmup, iters) for name in implementations]


def _implementation(jax, name: str, qkv, grad, warmup: int, iters: int) -> dict:
    row = {"backend": name, "forward_ms": None, "backward_ms": None, "error": None}
    try:
        forward = jax.jit(partial(jax.nn.dot_product_attention, is_causal=True, implementation=name))
        _, vjp = jax.vjp(forward, *qkv)
        backward = jax.jit(lambda fn, g: fn(g))
        row["forward_ms"] = _mean_ms(lambda: forward(*qkv), warmup, iters)
        row["backward_ms"] = _mean_ms(lambda: backward(vjp, grad), warmup, iters)
    except Exception as exc:  # noqa: BLE001 (XLA's errors have no common type: a refusal is data here)
        row["error"] = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return row


def _mean_ms(fn, warmup: int, iters: int) -> float:
    import jax

    for _ in range(warmup):
        out = fn()
    jax.block_until_ready(out)
    started = time.perf_counter()
    for _ in range(iters):
        out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - started) * 1e3 / iters
