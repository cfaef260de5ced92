"""Attention's measured speed (engines/*/attention_rate.py) on the CPU: each backend either ran,
with a forward and a backward time, or refused the shape with its reason. (The times of a GPU
are what ``parallax profile`` divides by: tests/gpu/test_profile_gpu.py.)"""

from __future__ import annotations

import pytest


def check(rows: list[dict], ran: str, refused: str) -> None:
    by = {r["backend"]: r for r in rows}
    assert by[ran]["error"] is None and by[ran]["forward_ms"] > 0 and by[ran]["backward_ms"] > 0
    assert by[refused]["forward_ms"] is None and by[refused]["backward_ms"] is None and by[refused]["error"]


def test_torch_backends_on_the_cpu():
    torch = pytest.importorskip("torch")
    from parallax.engines.torch import attention_rate

    rows = attention_rate.measure(2, 64, 4, 16, torch.device("cpu"), torch.bfloat16, warmup=1, iters=2)
    assert [r["backend"] for r in rows] == ["cudnn", "flash", "efficient"]
    check(rows, ran="flash", refused="cudnn")


def test_jax_implementations_on_the_cpu():
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from parallax.engines.jax import attention_rate

    rows = attention_rate.measure(2, 64, 4, 16, None, jnp.bfloat16, warmup=1, iters=2)
    assert [r["backend"] for r in rows] == ["cudnn", "xla"]
    check(rows, ran="xla", refused="cudnn")
