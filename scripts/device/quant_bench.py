#!/usr/bin/env python3
"""On a GPU machine: the speed of Parallax's CUDA NVFP4 quantize-dequantize (issue 11's kernel
target) against the same math written in PyTorch (parallax.quant.torch_reference), eager and
torch.compile'd, measured side by side in one run.

Variants: 1x16 (the target: >= 60% of the H200's 4.8 TB/s, >= 3x the compiled PyTorch), 16x16
2D blocks, 1x16 after the 16x16 RHT. Every variant is RNE on a bf16 tensor (default 32768 x 768)
with bf16 output. Bytes counted: the input read once and the output written once (2 + 2 bytes
per element), the least any implementation must move; the native kernel reads the input twice
(amax pass, then quantize), so its DRAM traffic is ~1.5x what the GB/s column counts. Times are
per-call times from CUDA events around back-to-back calls (median of 5 trials of `--iters`/5
calls) after `--warmup` calls; the fraction of
bit-identical outputs (NaN = NaN) between native and PyTorch is reported too.

Prints a table; writes $OUT/quant_bench.json when OUT is set.
Usage: python3 -m pip install -q --no-build-isolation --no-deps -e . && python3 scripts/device/quant_bench.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

H200_BANDWIDTH = 4.8e12  # bytes/s, NVIDIA H200 datasheet (REFERENCE.md §2)

VARIANTS = {
    "1x16": {"mode": "1x16", "rht": False},
    "16x16": {"mode": "16x16", "rht": False},
    "1x16+rht": {"mode": "1x16", "rht": True},
}


def bytes_moved(x) -> int:
    """Input read once plus an output of the same dtype written once."""
    return 2 * x.numel() * x.element_size()


def time_ms(torch, fn, x, warmup: int, iters: int, trials: int = 5) -> float:
    """Milliseconds per call of fn(x): the median over ``trials`` of back-to-back runs of
    ``iters // trials`` calls between two CUDA events (a ~20 us kernel timed one call at a time
    would count the event overhead too)."""
    for _ in range(warmup):
        fn(x)
    torch.cuda.synchronize()
    calls = max(1, iters // trials)
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def identical_fraction(torch, a, b) -> float:
    a, b = a.float(), b.float()
    same = (a.view(torch.int32) == b.view(torch.int32)) | (torch.isnan(a) & torch.isnan(b))
    return same.float().mean().item()


def implementations(torch, mode: str, rht: bool, rht_seed: int = 1, device: str = "cuda"):
    """name -> callable x -> y: the native op, the PyTorch math eager and compiled."""
    from parallax.quant import torch_ops  # noqa: F401  (registers torch.ops.parallax)
    from parallax.quant.torch_reference import hadamard_signs, nvfp4_qdq_reference

    signs = hadamard_signs(rht_seed, device) if rht else None

    def native(x):
        return torch.ops.parallax.nvfp4_qdq(x, mode, False, 0, rht, rht_seed)

    def eager(x):
        return nvfp4_qdq_reference(x, mode, signs)

    return {"native": native, "torch_eager": eager, "torch_compile": torch.compile(eager, fullgraph=True)}


def run(rows: int, cols: int, warmup: int, iters: int) -> list[dict]:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("quant_bench: needs a CUDA GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, generator=gen)
    nbytes = bytes_moved(x)
    rows_out = []
    for variant, kw in VARIANTS.items():
        impls = implementations(torch, kw["mode"], kw["rht"])
        ref = impls["native"](x)
        for name, fn in impls.items():
            ms = time_ms(torch, fn, x, warmup, iters)
            rows_out.append({
                "variant": variant, "impl": name, "ms": ms, "gb_s": nbytes / (ms * 1e-3) / 1e9,
                "pct_h200": 100.0 * nbytes / (ms * 1e-3) / H200_BANDWIDTH,
                "identical_to_native": identical_fraction(torch, fn(x), ref),
            })
    for r in rows_out:
        base = next(b for b in rows_out if b["variant"] == r["variant"] and b["impl"] == "torch_compile")
        r["speedup_vs_compile"] = base["ms"] / r["ms"]
    return rows_out


def render(rows: list[dict], shape: tuple[int, int]) -> str:
    lines = [f"NVFP4 quantize-dequantize, bf16 {shape[0]}x{shape[1]} (bytes: input read + output written once)",
             f"{'variant':<10} {'impl':<14} {'ms':>8} {'GB/s':>8} {'% 4.8TB/s':>10} {'x compile':>10} {'identical':>10}"]
    for r in rows:
        lines.append(f"{r['variant']:<10} {r['impl']:<14} {r['ms']:8.4f} {r['gb_s']:8.1f} {r['pct_h200']:9.1f}% "
                     f"{r['speedup_vs_compile']:9.2f}x {100 * r['identical_to_native']:9.4f}%")
    return "\n".join(lines)


def device_name() -> str:
    import torch

    return f"{torch.cuda.get_device_name()} (torch {torch.__version__})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=32768)
    p.add_argument("--cols", type=int, default=768)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=100)
    a = p.parse_args(argv)
    rows = run(a.rows, a.cols, a.warmup, a.iters)
    print(render(rows, (a.rows, a.cols)))
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "quant_bench.json"), "w") as f:
            json.dump({"shape": [a.rows, a.cols], "dtype": "bfloat16", "bandwidth_ref_bytes_s": H200_BANDWIDTH,
                       "device": device_name(), "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
