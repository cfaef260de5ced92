#!/usr/bin/env python3
"""The bf16 square-GEMM ceiling measured the PyTorch way and parallax's way, in one process.

Issue 2 asks the measured bf16 ceiling to be within 5% of what PyTorch shows on the same GPU
(torch.matmul, bf16 8192³ on random normal data, mean of 10 timed products after 3 warm-ups),
and to say why if not. This script gathers the evidence for either answer:

  torch.matmul        A[m,k] @ B[k,n] (NN)        3 warm-up / 10 timed and 10 / 50
  F.linear            X[m,k] · W[n,k]ᵀ (TN)       the same two ways; the layout parallax times
  parallax native     cuBLASLt TN, autotuned      the same two ways
  parallax native     the heuristic's first algo  the same two ways (what parallax did before tuning)
  torch.matmul long   --long-iters calls          first 10 against last 50: does the rate drift?

Every torch call sits between its own pair of CUDA events (as the native code times), so mean,
median and best come from the same calls. Before each measurement the GPU rests (--rest-s), so
each starts from the same idle state; nvidia-smi reads the SM clock, power, temperature and the
clock event reasons before and after it, and a background nvidia-smi samples them during it
(every --sample-ms; a 10-call burst of ~15 ms may fall between two samples, the long run will not).

Run on the GPU machine from the repository root:
    pip install -q --no-build-isolation --no-deps -e . && python3 scripts/device/ceiling_crosscheck.py
Prints a table last; writes $OUT/ceiling_crosscheck.json when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

SCHEMA = "parallax.ceiling_crosscheck/1"
SMI_FIELDS = ["clocks.sm", "clocks.max.sm", "power.draw", "power.limit", "temperature.gpu"]
# The clock-reasons field was renamed; newer drivers know both, older ones only the second.
REASON_FIELDS = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]
# nvmlClocksEventReason* bits (nvml.h).
REASON_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}


# ---- nvidia-smi --------------------------------------------------------------------------------

def decode_reasons(text: str) -> list[str] | None:
    """'0x0000000000000004' -> ['sw_power_cap']; None when nvidia-smi gave no number."""
    try:
        mask = int(text, 16)
    except ValueError:
        return None
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    unknown = mask & ~sum(REASON_BITS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


def parse_timestamp(text: str) -> float | None:
    """nvidia-smi's local '2026/11/29 12:34:56.789' -> seconds since the epoch, as time.time()."""
    try:
        return datetime.strptime(text, "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        return None


def parse_smi_line(line: str, fields: list[str]) -> dict:
    """One csv,noheader,nounits line of ``fields`` -> {field: number or text or None}."""
    values = [v.strip() for v in line.strip().split(",")]
    if len(values) != len(fields):
        raise ValueError(f"nvidia-smi gave {len(values)} values for {len(fields)} fields: {line!r}")
    out = {}
    for field, value in zip(fields, values):
        if field in REASON_FIELDS:
            out["reasons"] = decode_reasons(value)
        elif field == "timestamp":
            out["t"] = parse_timestamp(value)
        else:
            try:
                out[field] = float(value)
            except ValueError:
                out[field] = None  # "[N/A]", "[Not Supported]"
    return out


class Smi:
    """nvidia-smi queries of one GPU, by UUID (CUDA and nvidia-smi may number GPUs differently)."""

    def __init__(self, uuid: str):
        self.uuid = uuid
        self.fields = None
        self.error = None
        for reasons in REASON_FIELDS + [None]:
            fields = SMI_FIELDS + ([reasons] if reasons else [])
            proc = self._run(fields)
            if proc is not None and proc.returncode == 0:
                self.fields, self.error = fields, None
                return
        self.error = self.error or "nvidia-smi refused every field list"

    def _command(self, fields: list[str]) -> list[str]:
        return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", self.uuid]

    def _run(self, fields):
        try:
            proc = subprocess.run(self._command(fields), capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.error = f"nvidia-smi: {exc}"
            return None
        if proc.returncode != 0:
            self.error = f"nvidia-smi exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[:200]}"
        return proc

    def read(self) -> dict | None:
        """One reading now; None when nvidia-smi is unusable here."""
        if self.fields is None:
            return None
        proc = self._run(self.fields)
        if proc is None or proc.returncode != 0:
            return None
        return {"t": time.time(), **parse_smi_line(proc.stdout.strip().splitlines()[0], self.fields)}

    def sampler(self, every_ms: int) -> "Sampler | None":
        if self.fields is None:
            return None
        fields = ["timestamp"] + self.fields
        return Sampler(self._command(fields) + ["-lms", str(every_ms)], fields)


class Sampler:
    """A background ``nvidia-smi -lms`` whose lines are collected until stop().

    Its stdout is a pseudo-terminal, so nvidia-smi writes each line as it samples (into a pipe
    its C library would hold lines back in a buffer); each sample is stamped with nvidia-smi's
    own timestamp.
    """

    def __init__(self, command: list[str], fields: list[str]):
        self.fields = fields
        self.samples: list[dict] = []
        self._first = threading.Event()
        master, slave = pty.openpty()
        self._proc = subprocess.Popen(command, stdout=slave, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        os.close(slave)
        self._out = os.fdopen(master, "r", errors="replace")
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self):
        try:
            for line in self._out:
                try:
                    sample = parse_smi_line(line, self.fields)
                except ValueError:
                    continue
                if sample.get("t") is None:
                    sample["t"] = time.time()
                self.samples.append(sample)
                self._first.set()
        except OSError:  # the pseudo-terminal closes with EIO when nvidia-smi exits
            pass

    def wait_first(self, timeout_s: float = 5.0) -> bool:
        """True once the first sample arrived: sampling is live before the GPU work starts."""
        return self._first.wait(timeout_s)

    def stop(self) -> list[dict]:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._thread.join(timeout=5)
        self._out.close()
        return self.samples


def during(samples: list[dict], start: float, stop: float) -> dict:
    """SM clock and power over the samples taken between ``start`` and ``stop`` (time.time())."""
    inside = [s for s in samples if start <= s["t"] <= stop]
    clocks = [s["clocks.sm"] for s in inside if s.get("clocks.sm") is not None]
    power = [s["power.draw"] for s in inside if s.get("power.draw") is not None]
    reasons = sorted({r for s in inside for r in (s.get("reasons") or [])})
    return {
        "samples": len(inside),
        "sm_mhz_min": min(clocks, default=None), "sm_mhz_max": max(clocks, default=None),
        "sm_mhz_median": statistics.median(clocks) if clocks else None,
        "power_w_max": max(power, default=None), "reasons": reasons,
    }


# ---- timing ------------------------------------------------------------------------------------

def summarize(times_ms: list[float], flops: float) -> dict:
    """Mean, median, min and max of per-call times, and the TFLOP/s of each of the first three."""
    mean, median, best = statistics.fmean(times_ms), statistics.median(times_ms), min(times_ms)

    def rate(ms):
        return flops / (ms * 1e-3) / 1e12

    return {"mean_ms": mean, "median_ms": median, "min_ms": best, "max_ms": max(times_ms),
            "tflops_mean": rate(mean), "tflops_median": rate(median), "tflops_best": rate(best)}


def time_torch(torch, fn, warmup: int, iters: int) -> tuple[list[float], float]:
    """Per-call CUDA-event times of ``iters`` calls after ``warmup``, and the whole loop's mean."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, stop in zip(starts, stops):
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in zip(starts, stops)], starts[0].elapsed_time(stops[-1]) / iters


def torch_row(torch, name, layout, fn, warmup, iters, flops) -> dict:
    times, loop_mean = time_torch(torch, fn, warmup, iters)
    row = {"name": name, "layout": layout, "warmup": warmup, "iters": iters, **summarize(times, flops),
           "loop_mean_ms": loop_mean, "times_ms": times}
    if iters >= 60:  # enough calls to compare the start of the run with its end
        first, last = statistics.fmean(times[:10]), statistics.median(times[-50:])
        row.update(first10_mean_ms=first, last50_median_ms=last,
                   tflops_first10=flops / (first * 1e-3) / 1e12, tflops_last50=flops / (last * 1e-3) / 1e12)
    return row


def native_row(gpu, device, name, size, warmup, iters, tune_iters) -> dict:
    r = gpu.measure_gemm(device, "bf16", size, size, size, warmup=warmup, iters=iters, tune_iters=tune_iters)
    if r["error"] is not None:
        return {"name": name, "layout": "TN", "warmup": warmup, "iters": iters, "error": r["error"], "native": r}
    return {"name": name, "layout": "TN", "warmup": warmup, "iters": iters, "mean_ms": None,
            "median_ms": r["median_ms"], "min_ms": r["min_ms"], "max_ms": r["max_ms"], "tflops_mean": None,
            "tflops_median": r["tflops"], "tflops_best": r["tflops_best"], "native": r}


def measured(smi: Smi, rest_s: float, sample_ms: int, work) -> dict:
    """``work()`` after a rest, with nvidia-smi readings before, during and after it."""
    time.sleep(rest_s)
    before = smi.read()
    sampler = smi.sampler(sample_ms)
    live = sampler.wait_first() if sampler else False
    start = time.time()
    row = work()
    stop = time.time()
    samples = sampler.stop() if sampler else []
    row.update(seconds=stop - start, smi_before=before, smi_after=smi.read(), smi_sampling_live=live,
               smi_during=during(samples, start, stop))
    return row


# ---- the run -----------------------------------------------------------------------------------

def environment(torch, probe: dict, device: int) -> dict:
    matmul = torch.backends.cuda.matmul
    blas = getattr(torch.backends.cuda, "preferred_blas_library", None)
    return {
        "python": sys.version.split()[0], "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "driver": probe["driver"].get("version_str"), "nvml_driver": probe["nvml"].get("driver_version"),
        "torch_preferred_blas": str(blas()) if blas else None,
        "torch_allow_bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction,
        "device_name": torch.cuda.get_device_name(device),
    }


def run(args) -> dict:
    import torch
    import torch.nn.functional as F

    from parallax.native import gpu

    if not torch.cuda.is_available():
        raise SystemExit("ceiling_crosscheck: torch sees no CUDA GPU; run this on the GPU machine")
    probe = gpu.probe()
    device_info = next((d for d in probe["devices"] if d["index"] == args.device), None)
    if device_info is None:
        raise SystemExit(f"ceiling_crosscheck: parallax's probe finds no GPU {args.device}")
    torch.cuda.set_device(args.device)
    smi = Smi(device_info["uuid"])
    n = args.size
    flops = 2.0 * n * n * n
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)

    def matmul():
        return torch.matmul(a, b)

    def linear():
        return F.linear(a, b)  # a[m,k] · b[n,k]ᵀ: parallax's TN layout

    burst, sustained = (3, 10), (args.warmup, args.iters)
    plan = [
        ("torch.matmul", lambda w, i: torch_row(torch, "torch.matmul", "NN", matmul, w, i, flops)),
        ("F.linear", lambda w, i: torch_row(torch, "F.linear", "TN", linear, w, i, flops)),
        ("native tuned", lambda w, i: native_row(gpu, args.device, "native tuned", n, w, i, 5)),
        ("native heuristic-first", lambda w, i: native_row(gpu, args.device, "native heuristic-first", n, w, i, 0)),
    ]
    rows = []
    for _, measure in plan:
        for warmup, iters in (burst, sustained):
            rows.append(measured(smi, args.rest_s, args.sample_ms, lambda: measure(warmup, iters)))
    rows.append(measured(smi, args.rest_s, args.sample_ms, lambda: torch_row(
        torch, "torch.matmul long", "NN", matmul, args.warmup, args.long_iters, flops)))
    return {
        "schema": SCHEMA,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "device": device_info,
        "environment": environment(torch, probe, args.device),
        "settings": {"m": n, "n": n, "k": n, "flops": flops, "data": "torch.randn bf16 (native: its own random "
                     "non-zero operands)", "burst": list(burst), "sustained": list(sustained),
                     "long_iters": args.long_iters, "rest_s": args.rest_s, "sample_ms": args.sample_ms},
        "smi_error": smi.error if smi.fields is None else None,
        "measurements": rows,
        "verdict": verdict(rows, sustained),
    }


def find(rows, name, warmup, iters):
    return next((r for r in rows if r["name"] == name and (r["warmup"], r["iters"]) == (warmup, iters)), None)


def verdict(rows: list[dict], settings: tuple[int, int]) -> dict:
    """Parallax's ceiling (the tuned native median at ``settings``, warm-up and timed calls)
    against issue 2's reference: torch.matmul, mean of 10 after 3 warm-ups."""
    reference = find(rows, "torch.matmul", 3, 10)
    sustained = find(rows, "native tuned", *settings)
    if reference is None or sustained is None or sustained.get("error"):
        return {"reference_tflops": None, "native_median_tflops": None, "native_best_tflops": None,
                "median_vs_reference": None, "best_vs_reference": None, "within_5_percent": None}
    ref = reference["tflops_mean"]
    median, best = sustained["tflops_median"], sustained["tflops_best"]
    return {
        "reference_tflops": ref, "native_median_tflops": median, "native_best_tflops": best,
        "median_vs_reference": median / ref, "best_vs_reference": best / ref,
        "within_5_percent": abs(median / ref - 1) <= 0.05,
    }


# ---- output ------------------------------------------------------------------------------------

def fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def clock_cell(row: dict) -> str:
    before, after, dur = row.get("smi_before") or {}, row.get("smi_after") or {}, row["smi_during"]
    return (f"{fmt(before.get('clocks.sm'), '.0f')}/{fmt(dur['sm_mhz_min'], '.0f')}-{fmt(dur['sm_mhz_max'], '.0f')}"
            f"/{fmt(after.get('clocks.sm'), '.0f')}")


def table(result: dict) -> str:
    lines = [f"{'':32} {'TFLOP/s':^23}  {'SM MHz':^19}",
             f"{'measurement':24} {'w/i':>7} {'mean':>7} {'median':>7} {'best':>7}  "
             f"{'before/during/after':>19} {'W max':>6} {'n':>3}  clock reasons during"]
    for row in result["measurements"]:
        settings = f"{row['warmup']}/{row['iters']}"
        if row.get("error"):
            lines.append(f"{row['name']:24} {settings:>7} error: {row['error']}")
            continue
        dur = row["smi_during"]
        lines.append(
            f"{row['name']:24} {settings:>7} {fmt(row['tflops_mean']):>7} "
            f"{fmt(row['tflops_median']):>7} {fmt(row['tflops_best']):>7}  {clock_cell(row):>19} "
            f"{fmt(dur['power_w_max'], '.0f'):>6} {dur['samples']:>3}  {','.join(dur['reasons']) or '-'}")
    long = result["measurements"][-1]
    if "tflops_first10" in long:
        lines.append(f"torch.matmul long run: first 10 calls {long['tflops_first10']:.1f} TFLOP/s, "
                     f"last 50 {long['tflops_last50']:.1f} TFLOP/s over {long['iters']} calls "
                     f"({long['seconds']:.1f} s)")
    v = result["verdict"]
    if v["reference_tflops"] is not None:
        lines.append(
            f"issue 2: native sustained median {v['native_median_tflops']:.1f} = {100 * v['median_vs_reference']:.1f}% "
            f"and best call {v['native_best_tflops']:.1f} = {100 * v['best_vs_reference']:.1f}% of torch.matmul "
            f"3/10 mean {v['reference_tflops']:.1f} TFLOP/s; within 5%: {'yes' if v['within_5_percent'] else 'NO'}")
    dev = result["device"]
    lines.append(f"{dev['name']} ({dev['uuid']}), {dev.get('power_limit_w')} W limit, "
                 f"torch {result['environment']['torch']}, {result['measured_at']}"
                 + (f"; nvidia-smi unusable: {result['smi_error']}" if result["smi_error"] else ""))
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", type=int, default=0, help="CUDA index (default 0)")
    p.add_argument("--size", type=int, default=8192, help="m = n = k (default 8192)")
    p.add_argument("--warmup", type=int, default=10, help="sustained warm-up calls (default 10, parallax's)")
    p.add_argument("--iters", type=int, default=50, help="sustained timed calls (default 50, parallax's)")
    p.add_argument("--long-iters", type=int, default=2000, help="calls of the long torch.matmul run (default 2000)")
    p.add_argument("--rest-s", type=float, default=3.0, help="idle seconds before each measurement (default 3)")
    p.add_argument("--sample-ms", type=int, default=20, help="nvidia-smi sampling period (default 20)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    result = run(args)
    if os.environ.get("OUT"):
        path = os.path.join(os.environ["OUT"], "ceiling_crosscheck.json")
        with open(path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
