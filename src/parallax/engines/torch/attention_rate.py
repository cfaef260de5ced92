"""Attention's measured speed at a run's shape: each fused SDPA backend of torch (cuDNN, flash,
memory-efficient) runs causal attention on [B, H, S, head_dim] inputs in the model's layout (a
transposed [B, S, H, head_dim] view), forward and backward timed apart: ``iters`` forward calls,
then ``iters`` backward calls (``torch.autograd.grad`` of one forward's output, its graph kept)
between CUDA events, after ``warmup`` forward+backward rounds. ``parallax profile`` holds the
attention classes to the fastest backend's rate; a backend that refuses the shape is recorded
with its reason. On the CPU the host clock times them (for tests; a profile there has no limits).
"""

from __future__ import annotations

import time
import warnings

from parallax.engines.torch.engine import ATTENTION_NAMES, import_torch, refusal

BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")


def measure(batch_size: int, seq_len: int, heads: int, head_dim: int, device, dtype, warmup: int = 3,
            iters: int = 10, backends=BACKENDS) -> list[dict]:
    """[{backend, forward_ms, backward_ms, error}] of each backend: the mean of one call."""
    torch = import_torch()
    q, k, v = (torch.randn(batch_size, seq_len, heads, head_dim, device=device, dtype=dtype).transpose(1, 2)
               .requires_grad_(True) for _ in range(3))
    return [_backend(torch, name, (q, k, v), warmup, iters) for name in backends]


def _backend(torch, name: str, qkv, warmup: int, iters: int) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    row = {"backend": ATTENTION_NAMES[name], "forward_ms": None, "backward_ms": None, "error": None}
    with warnings.catch_warnings(record=True) as said:  # a refusing backend warns why
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([getattr(SDPBackend, name)]):
                row["forward_ms"], row["backward_ms"] = _times(torch, qkv, warmup, iters)
        except RuntimeError as exc:
            row["error"] = refusal(exc, said)
    return row


def _times(torch, qkv, warmup: int, iters: int) -> tuple[float, float]:
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def forward():
        return sdpa(*qkv, is_causal=True)

    grad = torch.randn_like(forward())
    for _ in range(warmup):
        torch.autograd.grad(forward(), qkv, grad)
    forward_ms = _mean_ms(torch, qkv[0].device, forward, iters)
    out = forward()
    backward_ms = _mean_ms(torch, qkv[0].device, lambda: torch.autograd.grad(out, qkv, grad, retain_graph=True), iters)
    return forward_ms, backward_ms


def _mean_ms(torch, device, fn, iters: int) -> float:
    if device.type != "cuda":
        started = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - started) * 1e3 / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters
