#!/usr/bin/env python3
"""On a GPU machine: the speed of Parallax's CUDA NVFP4 quantize-dequantize (issue 11's kernel
target, issue 30 item 4) against the same math written in PyTorch (parallax.quant.torch_reference),
eager and torch.compile'd, and against the previous kernels, measured side by side in one run.

Variants: 1x16 (the target: its own bound, below, and >= 3x the compiled PyTorch), 16x16
2D blocks, 1x16 after the 16x16 RHT, and 16x1 after the RHT (the weight-gradient operands:
blocks down the columns, written in place of a transpose; PyTorch's side transposes), each RNE
on a bf16 tensor with bf16 output, native against PyTorch eager and compiled. The 1x16 variant
also times the native op's other schedules (csrc/quant/quant_cuda.h px_quant_cuda_set_schedule):
``native`` is the default, the amax kernel and the quantize kernel (x read twice); ``native_1r``
one read of x (the single-read kernel, keeping what shared memory holds between its passes);
``native_1r_l2`` the same relying on L2 alone. Native only: the stochastically rounded variants
the emulated recipe uses for gradients (``1x16-sr``: dgrad's dY, ``16x1+rht-sr``: wgrad's dY),
and ``parts-sr``: dY of a fused linear, three column parts quantized alone, by nvfp4_qdq_parts in
place (``native``) and by the copies the recipe made before it (``split_cat``: each part copied
out, quantized, the results concatenated). ``native_v1`` is the previous kernels
(px_quant_cuda_set_legacy: the amax kernel with one group a thread in flight, the 1x16 quantize
kernel without its next-group prefetch, stochastic rounding by the previous per-element path),
the old side of old-versus-new (``x old``: its time
over ``native``'s); 16x1's register cap and out-of-line generic path are in both sides, and 16x16
did not change, so its ``x old`` is the noise between two identical kernels. Its rows disappear
once that switch is removed. ``copy`` is torch's own clone
of the tensor: the bandwidth a read-and-write kernel reaches on this GPU. Bytes counted: the
input read once and the output written once (2 + 2 bytes per element), the least any
implementation must move.

Each row is also held against the bound of its own passes (``PASSES``, ``own_bound``): the bytes
an element its kernels move over DRAM, at the bandwidth torch's copy reached at the same shape in
the same run (``% bound``). The default schedule reads x twice (the amax kernel, then the quantize
kernel: 6 bytes an element against the copy's 4), so its bound is the copy's bandwidth x 4/6 of the
counted figure: 49% / 57% of 4.8 TB/s at x768 / x2048 on the H200, where the copy reached 74% / 86%
(docs/results/2026-12-04-h200). Issue 11's ">= 60% of 4.8 TB/s" assumed one read, which only the
single-read schedules (``native_1r``) can reach.

Shapes: ``--rows``/``--cols`` (default 32768 x 768) runs every variant at that one shape;
``--recipe`` runs each variant at the shapes the emulated recipe gives it on llama-100m at
32 x 1024 tokens (RECIPE: activations and gradients [32768, 768 or 2048], weights 16x16 [768,
768], [2048, 768], [768, 2048], [10000, 768]). torch.compile compiles once per shape (10-30 s
each); ``--quick`` compiles only at each variant's first shape and leaves out PyTorch eager
(its calls cannot be captured in a CUDA graph, so it has no device time anyway).

Two times per implementation, both over inputs that rotate among ``--buffers`` (4) copies, so that
a call never finds its input in the 50 MB L2 from the call before:
- ``ms``, the device time (the targets' figure): ``--iters``/5 calls captured in one CUDA graph
  and replayed, the median of 5 replays between CUDA events, per call. A graph has no host
  work between the kernels, so this is what the kernels cost on the GPU.
- ``call_ms``, per call when called from Python back to back (median of 5 trials of
  ``--iters``/5 calls): the host's cost per call where it exceeds the device's. A call time that does not grow with
  the work (the RHT variant no slower than the plain op) is a host-bound loop (torch.library
  custom-op dispatch and the Python around the launch), not the kernels
  (docs/results/2026-12-01-h200-d/).
The fraction of bit-identical outputs (NaN = NaN) between native and every other implementation
is reported too (native_v1 and split_cat must be 100%).

Prints a table; writes $OUT/quant_bench.json when OUT is set. ``--profile-only``: each native
implementation called 3 times on one input, nothing timed, for a profiler (``ncu -k
regex:'nvfp4|amax'``) to read the kernels' counters.
Usage: python3 -m pip install -q --no-build-isolation --no-deps -e . && python3 scripts/device/quant_bench.py
(the recipe's shapes in ~2-3 minutes on an H200, four torch.compile compiles included:
``OUT=DIR python3 scripts/device/quant_bench.py --recipe --quick``)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

H200_BANDWIDTH = 4.8e12  # bytes/s, NVIDIA H200 datasheet (REFERENCE.md §2)

VARIANTS = {
    "1x16": {"mode": "1x16", "rht": False},
    "16x16": {"mode": "16x16", "rht": False},
    "1x16+rht": {"mode": "1x16", "rht": True},
    "16x1+rht": {"mode": "16x1", "rht": True},  # the wgrad operands: blocks down the columns
}
# Native only (no PyTorch twin): what the emulated recipe runs besides.
NATIVE_ONLY = {
    "1x16-sr": {"mode": "1x16", "rht": False, "sr": True},  # dgrad's dY
    "16x1+rht-sr": {"mode": "16x1", "rht": True, "sr": True},  # wgrad's dY
    "parts-sr": {"mode": "1x16", "rht": False, "sr": True, "parts": 3},  # wqkv's dY, [rows, 3 * cols]
    "copy": {},
}
SCHEDULES = {"native": (-1, -1), "native_1r": (1, 1), "native_1r_l2": (1, 0)}  # (fused, hold); -1: the default
LEGACY = "native_v1"  # the previous kernels (px_quant_cuda_set_legacy), where the module still has them

# The emulated recipe's shapes, llama-100m at 32 x 1024 tokens (parallax/quant/torch_nvfp4_linear.py):
# X (1x16 forward, 16x1+RHT wgrad) and dY (1x16 SR dgrad, 16x1+RHT SR wgrad) are [tokens, 768 or
# 2048]; W is 16x16 per canonical part ([768, 768] wq/wk/wv/wo, [2048, 768] w_gate/w_up, [768, 2048]
# w_down; [10000, 768] the vocabulary's size); wqkv's dY is three parts of 768 (parts-sr). 16x16
# at [32768, 768] is the shape of the earlier results, kept so that the figures compare.
TOKENS = 32768
RECIPE = {
    "1x16": [(TOKENS, 768), (TOKENS, 2048)],
    "1x16-sr": [(TOKENS, 768), (TOKENS, 2048)],
    "16x1+rht-sr": [(TOKENS, 768), (TOKENS, 2048)],
    "16x1+rht": [(TOKENS, 768), (TOKENS, 2048)],
    "16x16": [(TOKENS, 768), (768, 768), (2048, 768), (768, 2048), (10000, 768)],
    "1x16+rht": [(TOKENS, 768)],
    "parts-sr": [(TOKENS, 768)],
    "copy": [(TOKENS, 768), (TOKENS, 2048)],
}


# Each implementation's own passes over DRAM, in bytes per element of a bf16 tensor: its bound is
# the time a copy (read 2 + write 2 bytes) at the measured copy bandwidth takes to move them.
TWO_PASSES = (6, "2 passes: amax reads x (2 B), quantize reads x and writes y (4 B)")
PASSES = {
    "native": TWO_PASSES,  # the default schedule of every variant: the amax kernel, then the quantize kernel
    LEGACY: TWO_PASSES,
    "native_1r": (4, "1 pass: x read once (kept on chip between its two passes), y written"),
    "native_1r_l2": (4, "1 pass from DRAM: x read once (its second read from L2), y written"),
    "split_cat": (14, "each part copied out (4 B), quantized in 2 passes (6 B), concatenated (4 B)"),
    "torch_copy": (4, "1 pass: x read, y written"),
}
AT_LEAST = (4, "at least 1 pass: x read, y written (its own passes not counted)")  # torch's implementations


def passes(impl: str) -> tuple[int, str]:
    """(bytes per element, which passes move them) of one implementation."""
    return PASSES.get(impl, AT_LEAST)


def copy_bandwidths(rows: list[dict]) -> dict[tuple, float]:
    """{shape: bytes/s} of the copy rows (torch's clone: read + write, 4 B an element of bf16)."""
    return {tuple(r["shape"]): 4 * r["shape"][0] * r["shape"][1] / (r["ms"] * 1e-3)
            for r in rows if r["variant"] == "copy" and r.get("ms")}


def own_bound(r: dict, copies: dict[tuple, float]) -> dict:
    """``r``'s bound from its own passes: its bytes (``passes``) at the copy bandwidth measured at
    its shape (else the fastest copy measured), the time that takes, and ``r``'s fraction of it."""
    per_element, which = passes(r["impl"])
    shape = tuple(r["shape"])
    bandwidth = copies.get(shape) or max(copies.values(), default=None)
    if bandwidth is None or not (r.get("ms") or r.get("call_ms")):
        return {"bytes_per_element": per_element, "passes": which, "bound_ms": None, "pct_of_bound": None}
    bound_ms = per_element * shape[0] * shape[1] / bandwidth * 1e3
    return {"bytes_per_element": per_element, "passes": which, "copy_bytes_s": bandwidth,
            "copy_at": "this shape" if shape in copies else "the fastest copy measured",
            "bound_ms": bound_ms, "pct_of_bound": 100.0 * bound_ms / (r["ms"] or r["call_ms"])}


def bytes_moved(x) -> int:
    """Input read once plus an output of the same dtype written once."""
    return 2 * x.numel() * x.element_size()


def rotating(xs: list):
    """An endless cycle over the input copies."""
    while True:
        yield from xs


def call_ms(torch, fn, xs: list, warmup: int, iters: int, trials: int = 5) -> float:
    """Milliseconds per call of fn, called from Python back to back: the median over ``trials``
    of ``iters // trials`` calls between two CUDA events."""
    feed = rotating(xs)
    for _ in range(warmup):
        fn(next(feed))
    torch.cuda.synchronize()
    calls = max(1, iters // trials)
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn(next(feed))
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def graph_ms(torch, fn, xs: list, warmup: int, iters: int, trials: int = 5) -> float:
    """Device milliseconds per call of fn: ``iters // trials`` calls captured in one CUDA graph
    (warmed up on a side stream first, as capture requires), the median over ``trials`` replays."""
    feed = rotating(xs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 3)):
            fn(next(feed))
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    calls = max(1, iters // trials)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn(next(feed))
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    del graph
    return statistics.median(times)


def identical_fraction(torch, a, b) -> float:
    a, b = a.float(), b.float()
    same = (a.view(torch.int32) == b.view(torch.int32)) | (torch.isnan(a) & torch.isnan(b))
    return same.float().mean().item()


def has_legacy(n) -> bool:
    """Whether the native module still has the previous kernels (px_quant_cuda_set_legacy)."""
    return hasattr(n, "quant_cuda_set_legacy")


def scheduled(n, op, schedule: tuple[int, int], legacy: bool = False):
    """op run under one 1x16 schedule and kernel generation (set before each call, so a
    CUDA-graph capture records them; CPU tensors have neither)."""
    def fn(x):
        if x.is_cuda:
            n.quant_cuda_set_schedule(*schedule)
            if has_legacy(n):
                n.quant_cuda_set_legacy(legacy)
        return op(x)
    return fn


def native_impls(n, op, mode: str) -> dict:
    """name -> op under each schedule (1x16) or the default, and the previous kernels."""
    schedules = SCHEDULES if mode == "1x16" else {"native": SCHEDULES["native"]}
    impls = {name: scheduled(n, op, sched) for name, sched in schedules.items()}
    if has_legacy(n):
        impls[LEGACY] = scheduled(n, op, SCHEDULES["native"], legacy=True)
    return impls


def implementations(torch, mode: str, rht: bool, rht_seed: int = 1, device: str = "cuda", eager: bool = True,
                    compiled: bool = True):
    """name -> callable x -> y: the native op (each schedule, for 1x16; the previous kernels),
    the PyTorch math eager and compiled (where asked for)."""
    from parallax import quant
    from parallax.quant import torch_ops  # noqa: F401  (registers torch.ops.parallax)
    from parallax.quant.torch_reference import hadamard_signs, nvfp4_qdq_reference

    signs = hadamard_signs(rht_seed, device) if rht else None

    def native(x):
        return torch.ops.parallax.nvfp4_qdq(x, mode, False, 0, rht, rht_seed)

    def reference(x):
        return nvfp4_qdq_reference(x, mode, signs)

    impls = native_impls(quant.native(), native, mode)
    if eager:
        impls["torch_eager"] = reference
    if compiled:
        impls["torch_compile"] = torch.compile(reference, fullgraph=True)
    return impls


def native_only(torch, kw: dict, rht_seed: int = 1, device: str = "cuda"):
    """name -> callable for the NATIVE_ONLY variant kw."""
    from parallax.quant import torch_ops  # noqa: F401

    from parallax import quant

    if not kw:
        return {"torch_copy": torch.clone}
    counter = torch.zeros(1, dtype=torch.int32, device=device)
    mode, rht = kw["mode"], kw["rht"]
    n = quant.native()
    if "parts" not in kw:
        return native_impls(n, lambda x: torch.ops.parallax.nvfp4_qdq_counter(x, counter, mode, True, 7, rht, rht_seed),
                            "sr")
    seeds = [7 + i for i in range(kw["parts"])]

    def split_cat(x):
        return torch.cat([torch.ops.parallax.nvfp4_qdq_counter(p.contiguous(), counter, mode, True, s, rht, rht_seed)
                          for p, s in zip(x.chunk(len(seeds), dim=1), seeds)], dim=1)

    def parts(x):
        return torch.ops.parallax.nvfp4_qdq_parts(x, counter, seeds, mode, True, rht, rht_seed)

    return {**native_impls(n, parts, "parts"), "split_cat": scheduled(n, split_cat, SCHEDULES["native"])}


def plan(shape: tuple[int, int] | None, quick: bool = False) -> list[tuple[str, tuple[int, int], bool, bool]]:
    """(variant, shape, with torch eager, with torch.compile) in the order run: every variant at
    ``shape``, or (None) at the recipe's shapes; quick: no eager, compile at the first shape only."""
    shapes = {v: [shape] for v in (*VARIANTS, *NATIVE_ONLY)} if shape else RECIPE
    out = []
    for variant, variant_shapes in shapes.items():
        for i, s in enumerate(variant_shapes):
            twin = variant in VARIANTS
            out.append((variant, tuple(s), twin and not quick, twin and (i == 0 or not quick)))
    return out


def impls_of(torch, variant: str, eager: bool, compiled: bool) -> dict:
    if variant in VARIANTS:
        kw = VARIANTS[variant]
        return implementations(torch, kw["mode"], kw["rht"], eager=eager, compiled=compiled)
    return native_only(torch, NATIVE_ONLY[variant])


def measure(torch, fn, xs: list, warmup: int, iters: int, nbytes: int) -> dict:
    """The row of one implementation: device time from the graph (None, with the reason, where
    capture failed), host-driven time per call, and the bandwidth of the device time."""
    row = {"call_ms": call_ms(torch, fn, xs, warmup, iters)}
    try:
        row["ms"] = graph_ms(torch, fn, xs, warmup, iters)
    except Exception as e:  # noqa: BLE001  (recorded: a capture failure is a finding, not a crash)
        row["ms"], row["graph_error"] = None, f"{type(e).__name__}: {e}".splitlines()[0][:200]
    ms = row["ms"] or row["call_ms"]
    row["gb_s"] = nbytes / (ms * 1e-3) / 1e9
    row["pct_h200"] = 100.0 * nbytes / (ms * 1e-3) / H200_BANDWIDTH
    return row


def ratio(base: dict | None, r: dict) -> tuple[float | None, str | None]:
    """base's time over r's: device times where both have one, else per-call times."""
    if not base:
        return None, None
    key = "ms" if r["ms"] and base["ms"] else "call_ms"
    return base[key] / r[key], ("device" if key == "ms" else "per call")


def annotate(rows: list[dict]) -> list[dict]:
    """Each row's speedup over torch.compile and, for the current native rows, over the previous
    kernels (native_v1) of its variant and shape, where those rows exist."""
    def find(r, impl):
        return next((b for b in rows if b["variant"] == r["variant"] and b["shape"] == r["shape"]
                     and b["impl"] == impl), None)

    for r in rows:
        r["speedup_vs_compile"], r["speedup_basis"] = ratio(find(r, "torch_compile"), r)
        old = find(r, LEGACY) if r["impl"].startswith("native") and r["impl"] != LEGACY else None
        r["speedup_vs_old"] = ratio(old, r)[0]
    copies = copy_bandwidths(rows)
    for r in rows:
        r.update(own_bound(r, copies))
    return rows


def run(rows: int | None, cols: int | None, warmup: int, iters: int, buffers: int = 4, quick: bool = False) -> list[dict]:
    """Every implementation of every (variant, shape) of plan(): rows x cols, or the recipe's
    shapes when rows is None."""
    import torch

    from parallax import quant

    if not torch.cuda.is_available():
        raise SystemExit("quant_bench: needs a CUDA GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows_out = []
    try:
        for variant, shape, eager, compiled in plan((rows, cols) if rows else None, quick):
            kw = {**VARIANTS, **NATIVE_ONLY}[variant]
            width = kw.get("parts", 1) * shape[1]
            ins = [torch.randn(shape[0], width, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for _ in range(buffers)]
            impls = impls_of(torch, variant, eager, compiled)
            ref = impls[next(iter(impls))](ins[0])
            for name, fn in impls.items():
                rows_out.append({"variant": variant, "shape": [shape[0], width], "impl": name,
                                 **measure(torch, fn, ins, warmup, iters, bytes_moved(ins[0])),
                                 "identical_to_native": identical_fraction(torch, fn(ins[0]), ref)})
                r = rows_out[-1]  # as it comes, on stderr: a run cut short still shows what it measured
                print(f"{variant} {shape[0]}x{width} {name}: {r['ms'] or r['call_ms']:.4f} ms, "
                      f"{r['pct_h200']:.1f}% of 4.8 TB/s, identical {100 * r['identical_to_native']:.4f}%",
                      file=sys.stderr, flush=True)
            del ins
    finally:
        n = quant.native()
        n.quant_cuda_set_schedule(-1, -1)
        if has_legacy(n):
            n.quant_cuda_set_legacy(False)
    return annotate(rows_out)


def profile_only(rows: int, cols: int, calls: int = 3) -> list[str]:
    """Each native implementation called ``calls`` times on one input (for a profiler); their names."""
    import torch

    from parallax import quant

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, generator=gen)
    wide = torch.randn(rows, 3 * cols, device="cuda", dtype=torch.bfloat16, generator=gen)
    names = []
    try:
        for variant, _, _, _ in plan((rows, cols)):
            for name, fn in impls_of(torch, variant, eager=False, compiled=False).items():
                if name.startswith("torch_"):
                    continue
                torch.cuda.nvtx.range_push(f"{variant}/{name}")
                for _ in range(calls):
                    fn(wide if NATIVE_ONLY.get(variant, {}).get("parts") else x)
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
                names.append(f"{variant}/{name}")
    finally:
        n = quant.native()
        n.quant_cuda_set_schedule(-1, -1)
        if has_legacy(n):
            n.quant_cuda_set_legacy(False)
    return names


def render(rows: list[dict]) -> str:
    passes_of = sorted({(r["impl"], r["passes"]) for r in rows if r.get("passes")})
    lines = ["NVFP4 quantize-dequantize, bf16 in and out (GB/s: input read + output written once)",
             "ms: device time per call (calls replayed from one CUDA graph); call ms: per call from Python; "
             "x old: native_v1's time over this one's",
             "B/el: the bytes an element its own passes move; % bound: of the time torch's clone (at the same "
             "shape, else the fastest clone measured) takes to move them",
             f"{'variant':<12} {'shape':<11} {'impl':<14} {'ms':>8} {'GB/s':>8} {'% 4.8TB/s':>10} {'B/el':>5} "
             f"{'% bound':>8} {'x compile':>10} {'x old':>7} {'call ms':>8} {'identical':>10}"]
    for r in rows:
        ms = f"{r['ms']:8.4f}" if r["ms"] else f"{'n/a':>8}"
        vs = f"{r['speedup_vs_compile']:9.2f}x" if r.get("speedup_vs_compile") else f"{'-':>10}"
        old = f"{r['speedup_vs_old']:6.2f}x" if r.get("speedup_vs_old") else f"{'-':>7}"
        shape = "x".join(str(d) for d in r["shape"])
        bound = f"{r['pct_of_bound']:7.1f}%" if r.get("pct_of_bound") is not None else f"{'n/a':>8}"
        lines.append(f"{r['variant']:<12} {shape:<11} {r['impl']:<14} {ms} {r['gb_s']:8.1f} {r['pct_h200']:9.1f}% "
                     f"{r.get('bytes_per_element', ''):>5} {bound} {vs} {old} {r['call_ms']:8.4f} "
                     f"{100 * r['identical_to_native']:9.4f}%")
        if r.get("graph_error"):
            lines.append(f"{'':<39} no graph ({r['graph_error']}): GB/s and x compile are per call")
    lines += ["passes:"] + [f"  {impl}: {which}" for impl, which in passes_of]
    return "\n".join(lines)


def device_name() -> str:
    import torch

    return f"{torch.cuda.get_device_name()} (torch {torch.__version__})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=32768)
    p.add_argument("--cols", type=int, default=768)
    p.add_argument("--recipe", action="store_true", help="each variant at the emulated recipe's shapes (RECIPE)")
    p.add_argument("--quick", action="store_true", help="no PyTorch eager; torch.compile at each variant's first shape")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--buffers", type=int, default=4, help="input copies the calls rotate among (L2 defeat)")
    p.add_argument("--profile-only", action="store_true", help="call each native implementation 3 times, time nothing")
    a = p.parse_args(argv)
    if a.profile_only:
        print("called, in order:", ", ".join(profile_only(a.rows, a.cols)))
        return 0
    shape = None if a.recipe else (a.rows, a.cols)
    rows = run(*(shape or (None, None)), a.warmup, a.iters, a.buffers, a.quick)
    print(render(rows))
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "quant_bench.json"), "w") as f:
            json.dump({"shapes": "recipe" if a.recipe else [a.rows, a.cols], "dtype": "bfloat16",
                       "bandwidth_ref_bytes_s": H200_BANDWIDTH, "buffers": a.buffers, "quick": a.quick,
                       "timing": "ms: CUDA-graph replay per call; call_ms: Python-driven per call",
                       "device": device_name(), "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
