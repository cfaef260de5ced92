"""NVFP4 quantize-dequantize written in plain PyTorch operations (round to nearest even only):
the baseline that scripts/device/quant_bench.py compiles with torch.compile and times against
the native CUDA kernel, the "same math written in PyTorch" of the issue's speed target.

It follows csrc/quant/nvfp4.h operation by operation, so in eager mode on the CPU it equals the
native CPU function bit for bit (tests/unit/test_quant_bindings.py) on inputs whose tensor amax
is a normal float. Known differences, by construction:
- a tensor whose finite amax is below ~2688 * 2^-126 (s_global subnormal or zero) may differ in
  blocks where d * s_global underflows (the native side's NaN-to-code-7 rule is not repeated);
- compiled for a GPU, Triton may divide with an approximate (not correctly rounded) division,
  so a handful of elements at rounding boundaries can differ; the benchmark reports the
  fraction of bit-identical elements next to its timings.
"""

from __future__ import annotations

import torch

_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def hadamard_signs(seed: int, device="cpu") -> torch.Tensor:
    """The 16 RHT signs of a seed (the native hash32's bit 31), float32 +-1. Computed outside
    the function torch.compile traces: the native hash is not traceable."""
    from parallax import _native

    return torch.tensor([-1.0 if _native.quant_hash32(seed, j) >> 31 else 1.0 for j in range(16)],
                        dtype=torch.float32, device=device)


def hadamard16_reference(x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """Forward 16x16 RHT of each group of 16 along the last dimension, float32, in the
    reference's butterfly order (signs, strides 1, 2, 4, 8, then x 0.25)."""
    shape = x.shape
    v = x.to(torch.float32).reshape(-1, 16) * signs
    for stride in (1, 2, 4, 8):
        w = v.reshape(-1, 16 // (2 * stride), 2, stride)
        a, b = w[:, :, 0, :], w[:, :, 1, :]
        v = torch.stack((a + b, a - b), dim=2).reshape(-1, 16)
    return (v * 0.25).reshape(shape)


def e2m1_rne(v: torch.Tensor) -> torch.Tensor:
    """v rounded to the E2M1 grid (ties to the even code), |v| > 6 saturating, sign kept; NaN -> +6."""
    m = v.abs()
    mag = ((m > 0.25).to(torch.int64) + (m >= 0.75).to(torch.int64) + (m > 1.25).to(torch.int64)
           + (m >= 1.75).to(torch.int64) + (m > 2.5).to(torch.int64) + (m >= 3.5).to(torch.int64)
           + (m > 5.0).to(torch.int64))
    mag = torch.where(torch.isnan(m), 7, mag)
    q = torch.tensor(_GRID, dtype=torch.float32, device=v.device)[mag]
    return torch.where(torch.isnan(v), q, torch.copysign(q, v))


def nvfp4_qdq_reference(x: torch.Tensor, mode: str = "1x16", rht_signs: torch.Tensor | None = None) -> torch.Tensor:
    """NVFP4 quantize-dequantize (RNE) along the last dimension, after the RHT with these
    signs (hadamard_signs(seed)) when given; returns x's dtype. 16x1: the 1x16 result on the
    transpose of the [rows, cols] view, transposed back."""
    if mode == "16x1":
        cols = x.shape[-1]
        xt = x.reshape(-1, cols).t().contiguous()
        return nvfp4_qdq_reference(xt, "1x16", rht_signs).t().reshape(x.shape)
    cols = x.shape[-1]
    rows = x.numel() // cols
    xf = x.to(torch.float32).reshape(rows, cols)
    if rht_signs is not None:
        xf = hadamard16_reference(xf, rht_signs)
    finite = torch.isfinite(xf)
    a = torch.where(finite, xf.abs(), 0.0)
    amax = a.amax()
    sg = torch.where(amax == 0, torch.ones_like(amax), amax / 2688.0)
    bh = 16 if mode == "16x16" else 1
    blocks = xf.reshape(rows // bh, bh, cols // 16, 16)
    amax_b = a.reshape(blocks.shape).amax(dim=(1, 3), keepdim=True)
    bad = ~finite.reshape(blocks.shape).all(dim=3, keepdim=True).all(dim=1, keepdim=True)
    d = ((amax_b / 6.0) / sg).clamp(max=448.0).to(torch.float8_e4m3fn).to(torch.float32)
    q = e2m1_rne(blocks / (d * sg))
    y = (q * d) * sg
    y = torch.where(d == 0, 0.0, y)
    y = torch.where(bad, float("nan"), y)
    return y.reshape(x.shape).to(x.dtype)
