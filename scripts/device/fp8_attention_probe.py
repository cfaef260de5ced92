#!/usr/bin/env python3
"""Which library runs causal fp8 attention, forward and backward, at our head size on this GPU?

Issue 30, item 2. TransformerEngine's fp8 attention (``DelayedScaling(fp8_dpa=True)``) refused
llama-100m's shape on the H200: its cuDNN FP8 backend wants head_dim 128 for training on Hopper,
and the model has 12 heads of 64. This script asks every candidate we could find, on the GPU, at
batch 32 x 1024 tokens, causal, for each ``--shapes`` entry (heads x head_dim; the default
12x64 is llama-100m, 6x128 is the llama-100m-hd128 preset with the same d_model and the same
attention FLOPs, 12x128 the brief's literal ask):

  group  candidate                 what runs
  torch  torch-sdpa-bf16           F.scaled_dot_product_attention, cuDNN backend (the torch engine's attention)
  torch  te-dpa-bf16               te.DotProductAttention in bf16 (cuDNN FusedAttention; flash and unfused off)
  torch  te-dpa-fp8                te.DotProductAttention under DelayedScaling(fp8_dpa=True): FP8 fwd and bwd
  torch  te-dpa-fp8-fwd            the same with NVTE_FP8_DPA_BWD=0: FP8 forward, bf16 backward
  torch  te-dpa-fp8-emulated       fp8_dpa through TE's unfused attention, NVTE_UnfusedDPA_Emulate_FP8=1
                                   (FP8 numerics, no FP8 speed: TE's only path where its fused one refuses)
  torch  torchao-fa3-fp8           torchao's fp8_fa3_sdpa through torch's FA3 flash-attention impl (needs an
                                   FA3 build, flash_attn_interface; both say FP8 is forward-only)
  cudnn  cudnn-fe-bf16             cuDNN's graph API from Python (cudnn-frontend): sdpa + sdpa_backward
  cudnn  cudnn-fe-fp8              sdpa_fp8 + sdpa_fp8_backward, E4M3 tensors, per-tensor scales
  cudnn  cudnn-fe-fp8fwd-bf16bwd   sdpa_fp8 forward (softmax stats kept), O dequantized, bf16 sdpa_backward
  jax    jax-cudnn-bf16            jax.nn.dot_product_attention(implementation="cudnn")
  jax    jax-cudnn-fp8             jax._src.cudnn.fused_attention_stablehlo.dot_product_attention(use_fp8=True)
  jax    te-jax-fp8-query          TE-JAX's is_fused_attn_kernel_available for FP8 and bf16 Q/K/V (TE's C++
                                   backend rule, asked from JAX; TE-JAX itself has no FP8 attention to run)

For each candidate and shape: whether the forward ran, whether the backward ran, else the
library's own error (one line); the time of the forward and of forward+backward (CUDA events
for torch and cuDNN, the host clock around a blocked loop for JAX; ``--warmup`` then ``--iters``
calls); and the largest absolute difference of its output and gradients from the bf16 attention
of the same library (its ``baseline``), absolute and relative to the baseline's largest value.
The fp8 candidates of cuDNN and JAX take per-tensor scales from the amaxes a first, unit-scaled
call reports (current scaling as a real recipe would converge to); TE keeps its own amax history.

Each group runs in its own process (one library's crash costs only its own rows), in the order
above, with a share of ``--budget-s``: a candidate not started by its group's deadline is
recorded as skipped. TransformerEngine's backend choice is logged with NVTE_DEBUG=1
NVTE_DEBUG_LEVEL=2 (set for the torch group unless given) and kept per candidate, so a refusal
says which rule refused.

On the GPU machine, from the repository root (TE and cudnn-frontend carried in .carry/gpu; the
group processes import the pure-Python parts of parallax from src/, so no install of the project
is needed; torchao's FP8 SDPA is asked only if a torchao bundle was carried too):

    source .carry/gpu/install.sh && python3 scripts/device/fp8_attention_probe.py --out "$OUT/fp8-attention"

Writes OUT/probe.json (every record) and OUT/probe.md (the table), OUT/raw/GROUP.jsonl (what
each process wrote) and OUT/logs/GROUP.log (its stdout and stderr, TE's debug lines included).
``--dry-run`` lists the candidates and the environment it would log, importing no framework.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

SCHEMA = "parallax.fp8_attention_probe/1"
ROOT = Path(__file__).resolve().parents[2]
GROUPS = ("torch", "cudnn", "jax")
# Each group's share of the budget (the torch group imports TE and runs five candidates).
SHARES = {"torch": 0.4, "cudnn": 0.3, "jax": 0.3}
GRACE_S = 25  # past its deadline a group may finish the candidate in flight (a cuDNN build, an XLA compile)
E4M3_MAX = 448.0
# Environment variables that decide (or show) which attention backend a library takes: logged
# as they were, and the torch group's defaults below unless the caller set them.
LOGGED_ENV = ("NVTE_FUSED_ATTN", "NVTE_FLASH_ATTN", "NVTE_UNFUSED_ATTN", "NVTE_FP8_DPA_BWD",
              "NVTE_UnfusedDPA_Emulate_FP8", "NVTE_DEBUG", "NVTE_DEBUG_LEVEL", "NVTE_ALLOW_NONDETERMINISTIC_ALGO",
              "CUDNN_PATH", "CUDNN_HOME", "LD_LIBRARY_PATH", "XLA_FLAGS", "XLA_PYTHON_CLIENT_PREALLOCATE",
              "CUDNN_FRONTEND_ENABLE_FROST_ENGINES")
# TE's debug log says why each backend is refused; flash and unfused off make a bf16 DPA take
# cuDNN's fused attention, as the fp8 one must (TE's flash and unfused paths have no FP8).
GROUP_ENV = {
    "torch": {"NVTE_DEBUG": "1", "NVTE_DEBUG_LEVEL": "2", "NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1",
              "NVTE_UNFUSED_ATTN": "0"},
    "cudnn": {},
    "jax": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},  # the GPU's memory stays free for the arrays
}


@dataclass(frozen=True)
class Candidate:
    name: str
    group: str
    fmt: str  # bf16 | fp8 | fp8-emulated | query
    library: str
    what: str
    baseline: str | None = None  # the bf16 candidate of the same library its speed and error are against


CANDIDATES = (
    Candidate("torch-sdpa-bf16", "torch", "bf16", "torch SDPA (cuDNN backend)",
              "F.scaled_dot_product_attention(is_causal=True) under sdpa_kernel(CUDNN_ATTENTION)"),
    Candidate("te-dpa-bf16", "torch", "bf16", "TransformerEngine (torch)",
              "te.DotProductAttention(qkv_format='bshd', attn_mask_type='causal') in bf16", "torch-sdpa-bf16"),
    Candidate("te-dpa-fp8", "torch", "fp8", "TransformerEngine (torch)",
              "the same under te.autocast(DelayedScaling(HYBRID, fp8_dpa=True)): FP8 forward and backward",
              "te-dpa-bf16"),
    Candidate("te-dpa-fp8-fwd", "torch", "fp8", "TransformerEngine (torch)",
              "fp8_dpa=True with NVTE_FP8_DPA_BWD=0: FP8 forward, bf16 backward", "te-dpa-bf16"),
    Candidate("te-dpa-fp8-emulated", "torch", "fp8-emulated", "TransformerEngine (torch)",
              "fp8_dpa=True through UnfusedDotProductAttention, NVTE_UnfusedDPA_Emulate_FP8=1 (no FP8 speed)",
              "te-dpa-bf16"),
    Candidate("torchao-fa3-fp8", "torch", "fp8", "torchao low-precision attention (torch FA3 impl)",
              "activate_flash_attention_impl('FA3'), then torchao fp8_fa3_sdpa(is_causal=True)", "torch-sdpa-bf16"),
    Candidate("cudnn-fe-bf16", "cudnn", "bf16", "cuDNN graph API (cudnn-frontend)",
              "pygraph.sdpa(generate_stats=True, use_causal_mask=True) + sdpa_backward"),
    Candidate("cudnn-fe-fp8", "cudnn", "fp8", "cuDNN graph API (cudnn-frontend)",
              "pygraph.sdpa_fp8 + sdpa_fp8_backward, E4M3 in and out, per-tensor scales", "cudnn-fe-bf16"),
    Candidate("cudnn-fe-fp8fwd-bf16bwd", "cudnn", "fp8", "cuDNN graph API (cudnn-frontend)",
              "sdpa_fp8 forward with stats, O dequantized to bf16, then the bf16 sdpa_backward", "cudnn-fe-bf16"),
    Candidate("jax-cudnn-bf16", "jax", "bf16", "JAX cuDNN fused attention",
              "jax.nn.dot_product_attention(is_causal=True, implementation='cudnn')"),
    Candidate("jax-cudnn-fp8", "jax", "fp8", "JAX cuDNN fused attention",
              "fused_attention_stablehlo.dot_product_attention(use_fp8=True, mask_type=CAUSAL), E4M3",
              "jax-cudnn-bf16"),
    Candidate("te-jax-fp8-query", "jax", "query", "TransformerEngine (JAX)",
              "is_fused_attn_kernel_available(q_dtype=float8_e4m3fn | bfloat16, training and inference)"),
)
BY_NAME = {c.name: c for c in CANDIDATES}
# Statuses of a record, in the order the table explains them.
STATUSES = {
    "ran": "forward and backward ran",
    "fwd-only": "the forward ran, the backward was refused or failed",
    "refused": "the forward was refused or failed: nothing ran",
    "answered": "a query (no kernel), answered",
    "unavailable": "the library is not importable here",
    "skipped": "not started: past the group's share of --budget-s, or its process ended first",
    "crashed": "its process died while running it",
}


@dataclass(frozen=True)
class Shape:
    heads: int
    head_dim: int

    @property
    def label(self) -> str:
        return f"{self.heads}x{self.head_dim}"


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """'12x64,6x128' -> (Shape(12, 64), Shape(6, 128)); ValueError naming the bad entry."""
    shapes = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        heads, sep, dim = part.lower().partition("x")
        if not sep or not heads.isdigit() or not dim.isdigit() or int(heads) < 1 or int(dim) < 1:
            raise ValueError(f"shape '{part}' is not HEADSxHEAD_DIM (e.g. 12x64)")
        shapes.append(Shape(int(heads), int(dim)))
    if not shapes:
        raise ValueError("no shape given; e.g. --shapes 12x64,6x128")
    return tuple(dict.fromkeys(shapes))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for probe.json, probe.md, raw/ and logs/")
    parser.add_argument("--shapes", default="12x64,6x128,12x128",
                        help="HEADSxHEAD_DIM list; 12x64 is llama-100m, 6x128 llama-100m-hd128 (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default: %(default)s)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls (default: %(default)s)")
    parser.add_argument("--groups", default=",".join(GROUPS), help="which processes run (default: %(default)s)")
    parser.add_argument("--budget-s", type=float, default=130.0,
                        help="wall time for all groups; a group may overrun its share by one candidate "
                             f"(at most {GRACE_S} s) (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true", help="list the candidates and exit; imports no framework")
    parser.add_argument("--child", choices=GROUPS, help=argparse.SUPPRESS)  # internal: run one group
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # internal: the group's time.time()
    args = parser.parse_args(argv)
    try:
        args.shape_list = parse_shapes(args.shapes)
    except ValueError as exc:
        parser.error(str(exc))
    args.group_list = tuple(g.strip() for g in args.groups.split(",") if g.strip())
    unknown = [g for g in args.group_list if g not in GROUPS]
    if unknown or not args.group_list:
        parser.error(f"--groups takes some of {', '.join(GROUPS)}; got {args.groups!r}")
    for name in ("batch", "seq", "iters"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be positive")
    if args.warmup < 0 or args.budget_s <= 0:
        parser.error("--warmup must not be negative and --budget-s must be positive")
    if args.out is None and not args.dry_run:
        parser.error("--out is required (or --dry-run)")
    if args.out is not None:
        args.out = args.out.resolve()  # the group processes run from the repository root
    return args


# ---- records ---------------------------------------------------------------------------------

def record(candidate: Candidate, shape: Shape, status: str, **fields) -> dict:
    """One (candidate, shape) result; every key present, so the summary never guesses."""
    base = {"candidate": candidate.name, "group": candidate.group, "fmt": candidate.fmt,
            "library": candidate.library, "baseline": candidate.baseline, "shape": shape.label,
            "heads": shape.heads, "head_dim": shape.head_dim, "status": status, "fwd_ms": None,
            "fwd_bwd_ms": None, "fwd_error": None, "bwd_error": None, "accuracy": {}, "backend": None,
            "log": [], "details": {}}
    unknown = set(fields) - set(base)
    if unknown:
        raise KeyError(f"unknown record fields: {sorted(unknown)}")
    return {**base, **fields}


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception as '<Type>: <first non-empty line>' (libraries put the reason first)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:limit]


def group_order(group: str, shapes) -> list[tuple[Candidate, Shape]]:
    """What a group runs, shape-major (every candidate at the first shape first: 12x64 is the question)."""
    return [(c, s) for s in shapes for c in CANDIDATES if c.group == group]


def collect(group: str, shapes, lines: list[dict], rc: int | None, log_tail: str) -> list[dict]:
    """The records of a group from what its process wrote: a candidate it started and never
    finished crashed it; one it never started is skipped. ``rc`` None: killed at its deadline."""
    done = {(r["candidate"], r["shape"]): r for r in lines if r.get("event") == "result"}
    started = {(r["candidate"], r["shape"]) for r in lines if r.get("event") == "start"}
    how = "was killed past its deadline" if rc is None else f"exited with code {rc}"
    last = next((line.strip() for line in reversed(log_tail.splitlines()) if line.strip()), "")
    out = []
    for candidate, shape in group_order(group, shapes):
        key = (candidate.name, shape.label)
        if key in done:
            out.append({k: v for k, v in done[key].items() if k != "event"})
        elif key in started:
            out.append(record(candidate, shape, "crashed",
                              fwd_error=f"the {group} process {how} while running it; last log line: {last[:300]}"))
        else:
            out.append(record(candidate, shape, "skipped", fwd_error=f"not started: the {group} process {how} first"))
    return out


def speedups(records: list[dict]) -> None:
    """Each record with a baseline gets ``speedup``: baseline time / its time, forward and
    forward+backward, where both ran (> 1: faster than its bf16)."""
    index = {(r["candidate"], r["shape"]): r for r in records}
    for r in records:
        base = index.get((r["baseline"], r["shape"])) if r["baseline"] else None
        r["speedup"] = {key: (round(base[key] / r[key], 3) if base and base[key] and r[key] else None)
                        for key in ("fwd_ms", "fwd_bwd_ms")}


def verdicts(records: list[dict], shapes) -> list[dict]:
    """Per shape: the native fp8 candidates whose forward and backward both ran, those whose
    forward alone ran, and the rest with their status: the answer to the issue in one line each."""
    out = []
    for shape in shapes:
        fp8 = [r for r in records if r["shape"] == shape.label and r["fmt"] == "fp8"]
        out.append({"shape": shape.label, "head_dim": shape.head_dim,
                    "fwd_bwd": [r["candidate"] for r in fp8 if r["status"] == "ran"],
                    "fwd_only": [r["candidate"] for r in fp8 if r["status"] == "fwd-only"],
                    "not_run": {r["candidate"]: r["status"] for r in fp8 if r["status"] not in ("ran", "fwd-only")}})
    return out


def summarise(args, records: list[dict], environment: dict, started: str, wall_s: float) -> dict:
    speedups(records)
    return {"schema": SCHEMA, "started": started, "wall_s": round(wall_s, 1),
            "config": {"batch": args.batch, "seq": args.seq, "causal": True, "shapes": [s.label for s in args.shape_list],
                       "warmup": args.warmup, "iters": args.iters, "groups": list(args.group_list),
                       "budget_s": args.budget_s, "seed": args.seed},
            "environment": environment, "statuses": STATUSES,
            "candidates": [asdict(c) for c in CANDIDATES if c.group in args.group_list],
            "verdicts": verdicts(records, args.shape_list), "records": records}


# ---- the report ------------------------------------------------------------------------------

def _ms(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def _x(value) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _err(acc: dict, keys) -> str:
    found = [acc[k] for k in keys if acc.get(k)]
    if not found:
        return "—"
    worst = max(found, key=lambda e: math.inf if e["rel"] is None else e["rel"])  # None: the baseline is all 0
    share = "" if worst["rel"] is None else f" ({worst['rel']:.1%})"
    return f"{worst['max_abs']:.3g}{share}"


def _cell(text: str | None, limit: int = 160) -> str:
    text = " ".join((text or "").split()).replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def verdict_line(v: dict) -> str:
    both = ", ".join(v["fwd_bwd"]) or "none"
    fwd = ", ".join(v["fwd_only"]) or "none"
    rest = ", ".join(f"{name} ({status})" for name, status in v["not_run"].items())
    return (f"- **{v['shape']}** (head_dim {v['head_dim']}): fp8 forward and backward ran in: {both}; "
            f"fp8 forward only: {fwd}" + (f"; neither: {rest}." if rest else "."))


def render_markdown(summary: dict) -> str:
    cfg, env = summary["config"], summary["environment"]
    gpu = env.get("gpu") or "unknown GPU"
    lines = [f"# fp8 attention probe: {gpu}, batch {cfg['batch']} × {cfg['seq']}, causal", "",
             f"Written by `scripts/device/fp8_attention_probe.py` ({summary['started']}, {summary['wall_s']} s). "
             f"Times: {cfg['warmup']} warm-up then {cfg['iters']} timed calls; ×: the baseline's time over the "
             "candidate's (> 1: faster than its bf16); error: the largest |difference| from the baseline's "
             "output (O) and gradients (dQ, dK, dV, the worst of the three), with its share of the baseline's "
             "largest value.", "", "## Answer", ""]
    lines += [verdict_line(v) for v in summary["verdicts"]]
    lines += ["", "## Every candidate", "",
              "| shape | candidate | status | fwd ms | fwd+bwd ms | baseline | fwd × | fwd+bwd × | error O | "
              "error dQ/dK/dV | backend / why not |",
              "|---|---|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in summary["records"]:
        why = r["bwd_error"] if r["status"] == "fwd-only" else r["fwd_error"]
        note = _cell(why) if why else _cell(r["backend"])
        sp = r.get("speedup") or {}
        lines.append(f"| {r['shape']} | {r['candidate']} | {r['status']} | {_ms(r['fwd_ms'])} | "
                     f"{_ms(r['fwd_bwd_ms'])} | {r['baseline'] or '—'} | {_x(sp.get('fwd_ms'))} | "
                     f"{_x(sp.get('fwd_bwd_ms'))} | {_err(r['accuracy'], ('out',))} | "
                     f"{_err(r['accuracy'], ('dq', 'dk', 'dv'))} | {note} |")
    lines += ["", "Statuses: " + "; ".join(f"**{k}**: {v}" for k, v in summary["statuses"].items()) + ".", "",
              "## Candidates", ""]
    lines += [f"- `{c['name']}` ({c['library']}, {c['fmt']}): {c['what']}" for c in summary["candidates"]]
    lines += ["", "## Environment", ""]
    for key in sorted(k for k in env if k != "variables"):
        lines.append(f"- {key}: {env[key]}")
    lines += ["", "Variables as each group saw them:", ""]
    for group, variables in sorted((env.get("variables") or {}).items()):
        shown = ", ".join(f"{k}={v}" for k, v in variables.items()) or "none set"
        lines.append(f"- {group}: {shown}")
    logged = [r for r in summary["records"] if r["log"]]
    if logged:
        lines += ["", "## TransformerEngine's backend selection (NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2)", ""]
        for r in logged:
            lines += [f"`{r['candidate']}` at {r['shape']}:", "", "```text", *r["log"], "```", ""]
    details = [r for r in summary["records"] if r["details"]]
    if details:
        lines += ["", "## Details", ""]
        lines += [f"- `{r['candidate']}` at {r['shape']}: {json.dumps(r['details'], sort_keys=True)}" for r in details]
    return "\n".join(lines).rstrip() + "\n"


def write_outputs(out: Path, summary: dict) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "probe.json", out / "probe.md"
    json_path.write_text(json.dumps(summary, indent=1, sort_keys=False) + "\n")
    md_path.write_text(render_markdown(summary))
    return json_path, md_path


def dry_run(args) -> str:
    shapes = ", ".join(s.label for s in args.shape_list)
    lines = [f"fp8 attention probe (dry run): batch {args.batch} x seq {args.seq}, causal, shapes {shapes}",
             f"groups {', '.join(args.group_list)}, budget {args.budget_s:g} s, {args.warmup} warm-up + "
             f"{args.iters} timed calls", ""]
    for c in CANDIDATES:
        if c.group in args.group_list:
            against = f" (against {c.baseline})" if c.baseline else ""
            lines.append(f"  {c.group:<6} {c.name:<25} {c.fmt:<13} {c.what}{against}")
    lines += ["", "environment logged: " + ", ".join(LOGGED_ENV)]
    for group in args.group_list:
        if GROUP_ENV[group]:
            lines.append(f"{group} defaults (unless set): " + ", ".join(f"{k}={v}" for k, v in GROUP_ENV[group].items()))
    return "\n".join(lines)


# ---- the orchestrating process ---------------------------------------------------------------

def child_env(group: str, base: dict) -> dict:
    """The group process's environment: the caller's, with the group's defaults where unset."""
    env = dict(base)
    for key, value in GROUP_ENV[group].items():
        env.setdefault(key, value)
    return env


def launch(args, group: str, deadline: float, stop: float, raw: Path, log: Path) -> int | None:
    """Run one group as ``python3 THIS --child GROUP``, which starts no candidate after
    ``deadline``; its exit code, or None when it was killed at ``stop`` (its records so far are
    kept). Both are time.time() values."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", group, "--deadline", f"{deadline:.3f}",
            "--out", str(args.out), "--shapes", args.shapes, "--batch", str(args.batch), "--seq", str(args.seq),
            "--warmup", str(args.warmup), "--iters", str(args.iters), "--seed", str(args.seed)]
    with open(log, "w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=child_env(group, os.environ),
                                cwd=str(ROOT), start_new_session=True)
        try:
            return proc.wait(timeout=max(1.0, stop - time.time()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
            return None


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def tail(path: Path, lines: int = 20) -> str:
    with contextlib.suppress(FileNotFoundError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def orchestrate(args, run_group=launch) -> dict:
    """Every group in turn, each with its share of what is left of the budget; then one summary."""
    started, t0 = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.time()
    (args.out / "raw").mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(parents=True, exist_ok=True)
    records, environment = [], {"variables": {}}
    end = t0 + args.budget_s
    for i, group in enumerate(args.group_list):
        left = args.group_list[i:]
        share = SHARES[group] / sum(SHARES[g] for g in left)
        deadline = time.time() + max(0.0, end - time.time()) * share
        raw, log = args.out / "raw" / f"{group}.jsonl", args.out / "logs" / f"{group}.log"
        raw.unlink(missing_ok=True)
        print(f"fp8_attention_probe: {group} group until {max(0.0, deadline - time.time()):.0f} s from now", flush=True)
        rc = run_group(args, group, deadline, min(deadline, end) + GRACE_S, raw, log)
        lines = read_jsonl(raw)
        for line in lines:
            if line.get("event") == "env":
                environment["variables"][group] = line.pop("variables", {})
                environment.update({k: v for k, v in line.items() if k not in ("event", "group") and v is not None})
        records += collect(group, args.shape_list, lines, rc, tail(log))
    summary = summarise(args, records, environment, started, time.time() - t0)
    json_path, md_path = write_outputs(args.out, summary)
    print(f"fp8_attention_probe: wrote {json_path} and {md_path}", flush=True)
    for v in summary["verdicts"]:
        print(verdict_line(v).removeprefix("- ").replace("**", ""), flush=True)
    return summary


# ---- the group processes (on the GPU) --------------------------------------------------------

class Writer:
    """The group's JSONL: each line flushed, so a crash loses only the candidate in flight."""

    def __init__(self, path: Path):
        self.file = open(path, "a")

    def write(self, line: dict) -> None:
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())


def variables() -> dict:
    return {k: os.environ[k] for k in LOGGED_ENV if k in os.environ}


def pow2_scale(amax: float, fmax: float = E4M3_MAX) -> float:
    """The largest power of two s with amax·s <= fmax (cuDNN's advice: scale = fmax/amax,
    rounded down to a power of two); 1 when amax is zero or not finite."""
    if not amax or not math.isfinite(amax) or amax <= 0:
        return 1.0
    return 2.0 ** math.floor(math.log2(fmax / amax))


def inputs(shape: Shape, batch: int, seq: int, seed: int):
    """q, k, v, dO as float32 numpy [B, S, H, D], standard normal, the same in every group."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((batch, seq, shape.heads, shape.head_dim), dtype=np.float32) for _ in range(4))


def run_child(args) -> int:
    """One group's candidates, shape-major, each in try/except: a refusal is a result."""
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))  # parallax from the checkout when it is not installed
    writer = Writer(args.out / "raw" / f"{args.child}.jsonl")
    runner = {"torch": TorchGroup, "cudnn": CudnnGroup, "jax": JaxGroup}[args.child](args)
    writer.write({"event": "env", "group": args.child, "variables": variables(), **runner.environment()})
    for candidate, shape in group_order(args.child, args.shape_list):
        if args.deadline is not None and time.time() > args.deadline:
            writer.write({"event": "result", **record(candidate, shape, "skipped",
                                                      fwd_error="not started: past this group's share of --budget-s")})
            continue
        writer.write({"event": "start", "candidate": candidate.name, "shape": shape.label})
        try:
            result = runner.run(candidate, shape)
        except Exception as exc:  # a bug or an unforeseen failure is this candidate's result
            result = record(candidate, shape, "refused", fwd_error=one_line(exc))
        writer.write({"event": "result", **result})
        print(json.dumps({k: result[k] for k in ("candidate", "shape", "status", "fwd_ms", "fwd_bwd_ms",
                                                 "fwd_error", "bwd_error")}), flush=True)
    writer.write({"event": "done"})
    return 0


def attempt(fn):
    """(value, None) or (None, one-line error)."""
    try:
        return fn(), None
    except Exception as exc:
        return None, one_line(exc)


def outcome(candidate, shape, fwd_err, bwd_err, **fields) -> dict:
    status = "refused" if fwd_err else ("fwd-only" if bwd_err else "ran")
    return record(candidate, shape, status, fwd_error=fwd_err, bwd_error=bwd_err, **fields)


class TorchTimer:
    """Milliseconds a call, between two CUDA events around ``iters`` calls after ``warmup``."""

    def __init__(self, torch, warmup: int, iters: int):
        self.torch, self.warmup, self.iters = torch, warmup, iters

    def ms(self, fn) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.iters):
            fn()
        end.record()
        end.synchronize()
        return round(start.elapsed_time(end) / self.iters, 4)


def torch_error(got, want) -> dict:
    """Largest |got − want| and its share of max |want|, in float32."""
    got, want = got.float(), want.float()
    scale = want.abs().max().item()
    worst = (got - want).abs().max().item()
    return {"max_abs": worst, "rel": worst / scale if scale else None}


class CaptureLog:
    """TransformerEngine's attention log lines while a candidate runs (TE logs through the
    'DotProductAttention' logger and its utils module's logger; their level follows NVTE_DEBUG)."""

    NAMES = ("DotProductAttention", "transformer_engine.pytorch.attention.dot_product_attention.utils")
    KEEP = ("Disabling", "Running with", "Available backends", "Selected backend", "No dot product", "backend",
            "sub-backend", "FP8", "fp8")

    def __init__(self):
        import logging

        class Handler(logging.Handler):
            def __init__(self, sink):
                super().__init__(level=logging.DEBUG)
                self.sink = sink

            def emit(self, rec):
                self.sink.append(rec.getMessage())

        self.lines: list[str] = []
        self.handler = Handler(self.lines)
        self.loggers = [logging.getLogger(n) for n in self.NAMES]

    def __enter__(self):
        import logging

        self.levels = [logger.level for logger in self.loggers]
        for logger in self.loggers:
            logger.addHandler(self.handler)
            logger.setLevel(logging.DEBUG)  # TE sets it again from NVTE_DEBUG at each backend choice
        return self

    def __exit__(self, *exc):
        for logger, level in zip(self.loggers, self.levels):
            logger.removeHandler(self.handler)
            logger.setLevel(level)

    def kept(self, limit: int = 30) -> list[str]:
        out = []
        for line in self.lines:
            line = " ".join(line.split())
            if any(k in line for k in self.KEEP) and line not in out:
                out.append(line if len(line) <= 300 else line[:297] + "...")
        return out[:limit]


@contextlib.contextmanager
def environ(changes: dict):
    """os.environ with ``changes`` for the block, restored after (TE reads its attention
    variables with os.environ at each backend selection)."""
    before = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class TorchGroup:
    """torch SDPA and TransformerEngine's DotProductAttention in one process."""

    device = "cuda"

    TE_ENV = {"te-dpa-bf16": {}, "te-dpa-fp8": {}, "te-dpa-fp8-fwd": {"NVTE_FP8_DPA_BWD": "0"},
              "te-dpa-fp8-emulated": {"NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "1",
                                      "NVTE_UnfusedDPA_Emulate_FP8": "1"}}

    def __init__(self, args):
        import torch

        self.args, self.torch = args, torch
        self.timer = TorchTimer(torch, args.warmup, args.iters)
        self.te, self.te_error = None, None
        try:
            from parallax.engines.torch.recipes.te import import_te  # pip's cuDNN first, as the engine does

            self.te = import_te()
        except Exception as exc:
            self.te_error = one_line(exc)
        self.data, self.outputs = {}, {}

    def environment(self) -> dict:
        torch = self.torch
        env = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
               "torch_cudnn": torch.backends.cudnn.version(), "python": sys.version.split()[0]}
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["compute_capability"] = "{}.{}".format(*torch.cuda.get_device_capability(0))
        if self.te is not None:
            import transformer_engine

            env["transformer_engine"] = getattr(transformer_engine, "__version__", None)
            with contextlib.suppress(Exception):
                from transformer_engine.pytorch.utils import get_cudnn_version

                env["te_cudnn"] = ".".join(map(str, get_cudnn_version()))
        else:
            env["transformer_engine"] = f"not importable: {self.te_error}"
        return env

    def tensors(self, shape: Shape):
        """q, k, v, dO on the GPU, bf16 [B, S, H, D] (kept for the shape's other candidates)."""
        if shape not in self.data:
            self.data.clear()
            self.outputs.clear()
            torch = self.torch
            self.data[shape] = tuple(torch.from_numpy(a).to(self.device, torch.bfloat16)
                                     for a in inputs(shape, self.args.batch, self.args.seq, self.args.seed))
        return self.data[shape]

    def run(self, candidate: Candidate, shape: Shape) -> dict:
        if candidate.name == "torch-sdpa-bf16":
            return self.sdpa(candidate, shape)
        if candidate.name == "torchao-fa3-fp8":
            return self.fa3_fp8(candidate, shape)
        if self.te is None:
            return record(candidate, shape, "unavailable", fwd_error=f"TransformerEngine: {self.te_error}")
        return self.te_dpa(candidate, shape)

    def measure(self, candidate, shape, forward, grads_of, **fields) -> dict:
        """Run ``forward`` once, then forward+backward once (the library's refusals are
        results), then time what ran; keep the outputs for the candidates measured against it."""
        out, fwd_err = attempt(forward)
        grads, bwd_err = (None, None)
        if fwd_err is None:
            grads, bwd_err = attempt(lambda: grads_of(forward()))
        fields.setdefault("accuracy", {})
        if fwd_err is None:
            fields["fwd_ms"] = self.timer.ms(forward)
        if fwd_err is None and bwd_err is None:
            fields["fwd_bwd_ms"] = self.timer.ms(lambda: grads_of(forward()))
            out, grads = forward().detach(), grads_of(forward())  # after the warm-up: settled scales
        base = self.outputs.get((candidate.baseline, shape))
        if base is not None and out is not None:
            fields["accuracy"]["out"] = torch_error(out.reshape(base[0].shape), base[0])
            if grads is not None and base[1] is not None:
                for name, got, want in zip(("dq", "dk", "dv"), grads, base[1]):
                    fields["accuracy"][name] = torch_error(got, want)
        if out is not None:
            self.outputs[(candidate.name, shape)] = (out.detach(), grads)
        return outcome(candidate, shape, fwd_err, bwd_err, **fields)

    def sdpa(self, candidate, shape) -> dict:
        torch = self.torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v, do = self.tensors(shape)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]

        def forward():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in leaves), is_causal=True)
            return out.transpose(1, 2)  # back to [B, S, H, D]

        def grads_of(out):
            return torch.autograd.grad(out, leaves, do)

        return self.measure(candidate, shape, forward, grads_of, backend="cuDNN (torch SDPBackend.CUDNN_ATTENTION)")

    def fa3_fp8(self, candidate, shape) -> dict:
        """torchao's FP8 SDPA on torch's FA3 impl; FA3 is a separate build (flash_attn_interface)."""
        torch = self.torch
        try:
            from torch.nn.attention import activate_flash_attention_impl, restore_flash_attention_impl
            from torchao.prototype.attention.fp8_fa3.attention import fp8_fa3_sdpa
        except Exception as exc:
            return record(candidate, shape, "unavailable", fwd_error=one_line(exc))
        _, err = attempt(lambda: activate_flash_attention_impl("FA3"))
        if err:
            return record(candidate, shape, "unavailable", fwd_error=f"activate_flash_attention_impl('FA3'): {err}")
        try:
            q, k, v, do = self.tensors(shape)
            leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]

            def forward():
                return fp8_fa3_sdpa(*(t.transpose(1, 2) for t in leaves), is_causal=True).transpose(1, 2)

            return self.measure(candidate, shape, forward, lambda out: torch.autograd.grad(out, leaves, do),
                                backend="FA3 (torch.nn.attention impl), FP8 E4M3 inputs")
        finally:
            restore_flash_attention_impl()

    def te_dpa(self, candidate, shape) -> dict:
        torch, te = self.torch, self.te
        from transformer_engine.common.recipe import DelayedScaling, Format

        q, k, v, do = self.tensors(shape)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        grad_out = do.reshape(do.shape[0], do.shape[1], -1)
        recipe = None if candidate.fmt == "bf16" else DelayedScaling(
            fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max", fp8_dpa=True)
        with environ(self.TE_ENV[candidate.name]), CaptureLog() as log:
            reset_te_backend_choice()
            dpa = te.DotProductAttention(shape.heads, shape.head_dim, qkv_format="bshd", attn_mask_type="causal",
                                         attention_dropout=0.0).cuda()

            def forward():
                context = (te.autocast(enabled=True, recipe=recipe) if recipe is not None
                           else contextlib.nullcontext())
                with context:
                    return dpa(*leaves)

            def grads_of(out):
                return torch.autograd.grad(out, leaves, grad_out)

            result = self.measure(candidate, shape, forward, grads_of)
            result["backend"] = te_backend_choice()
        result["log"] = log.kept()
        result["details"] = {"env": self.TE_ENV[candidate.name]} if self.TE_ENV[candidate.name] else {}
        return result


def reset_te_backend_choice() -> None:
    """Make TE choose its attention backend again (it caches the choice per set of attention
    parameters, and the environment variables this group changes are not among them)."""
    with contextlib.suppress(Exception):
        from transformer_engine.pytorch.attention.dot_product_attention import dot_product_attention as dpa

        dpa._attention_backends["attention_params"] = None
        dpa._attention_backends["backend_selection_requires_update"] = True


def te_backend_choice() -> str | None:
    """The backend TE last chose: 'FusedAttention sub-backend 2 (FP8)' and the like."""
    try:
        from transformer_engine.pytorch.attention.dot_product_attention import dot_product_attention as dpa

        chosen = dict(dpa._attention_backends)
    except Exception as exc:
        return f"unknown ({one_line(exc)})"
    if chosen.get("use_fused_attention"):
        sub = chosen.get("fused_attention_backend")
        name = {0: "F16_max512_seqlen", 1: "F16_arbitrary_seqlen", 2: "FP8"}.get(int(sub) if sub is not None else -1)
        return f"FusedAttention sub-backend {int(sub) if sub is not None else '?'} ({name or 'unknown'})"
    if chosen.get("use_flash_attention"):
        return f"FlashAttention {chosen.get('flash_attention_backend')}"
    if chosen.get("use_unfused_attention"):
        return "UnfusedDotProductAttention"
    return "none"


class CudnnGroup:
    """cuDNN's SDPA through the cudnn-frontend Python graph API, bf16 and FP8."""

    device = "cuda"

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def __init__(self, args):
        import torch

        self.args, self.torch = args, torch
        self.timer = TorchTimer(torch, args.warmup, args.iters)
        self.cudnn, self.error, self.handle = None, None, None
        self.state: dict = {}
        try:
            self.cudnn = import_cudnn_frontend()
            self.handle = self.cudnn.create_handle()
            with contextlib.suppress(Exception):
                self.cudnn.set_stream(self.handle, torch.cuda.current_stream().cuda_stream)
        except Exception as exc:
            self.error = one_line(exc)

    def environment(self) -> dict:
        env = {"cudnn_frontend": None, "cudnn_frontend_backend": None}
        if self.cudnn is not None:
            env["cudnn_frontend"] = getattr(self.cudnn, "__version__", None)
            with contextlib.suppress(Exception):
                env["cudnn_frontend_backend"] = self.cudnn.backend_version_string()
        else:
            env["cudnn_frontend"] = f"not importable: {self.error}"
        return env

    def run(self, candidate: Candidate, shape: Shape) -> dict:
        if self.cudnn is None:
            return record(candidate, shape, "unavailable", fwd_error=f"cudnn-frontend: {self.error}")
        if self.state.get("shape") != shape:
            self.state = {"shape": shape, **self.prepare(shape)}
        return {"cudnn-fe-bf16": self.bf16, "cudnn-fe-fp8": self.fp8,
                "cudnn-fe-fp8fwd-bf16bwd": self.hybrid}[candidate.name](candidate, shape)

    # -- tensors and graphs
    def prepare(self, shape: Shape) -> dict:
        """The shape's tensors: bf16 q, k, v, dO as [B, H, S, D] views of [B, S, H, D] memory
        (cuDNN's BSHD layout), their E4M3 copies at their own power-of-two scales, outputs."""
        torch = self.torch
        b, s, h, d = self.args.batch, self.args.seq, shape.heads, shape.head_dim
        bshd = [torch.from_numpy(a).to(self.device, torch.bfloat16) for a in inputs(shape, b, s, self.args.seed)]
        bhsd = [t.transpose(1, 2) for t in bshd]
        scales = {n: pow2_scale(t.abs().max().item()) for n, t in zip(("q", "k", "v", "do"), bhsd)}
        fp8 = [(t.float() * scales[n]).to(torch.float8_e4m3fn) for n, t in zip(("q", "k", "v", "do"), bshd)]

        def like(dtype):
            return torch.empty(b, s, h, d, device=self.device, dtype=dtype).transpose(1, 2)

        return {"bf16": dict(zip(("q", "k", "v", "do"), bhsd)), "fp8": dict(zip(("q", "k", "v", "do"), (t.transpose(1, 2) for t in fp8))),
                "in_scales": scales, "like": like, "stats_shape": (b, h, s, 1), "attn_scale": 1.0 / math.sqrt(d)}

    def build(self, graph) -> None:
        cudnn = self.cudnn
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()

    def workspace(self, *graphs):
        size = max(g.get_workspace_size() for g in graphs)
        return self.torch.empty(max(size, 1), device=self.device, dtype=self.torch.uint8)

    def scalar(self, value: float = 1.0):
        return self.torch.full((1, 1, 1, 1), value, device=self.device, dtype=self.torch.float32)

    def bf16_graphs(self):
        """The bf16 forward (with stats) and backward graphs, built once per shape."""
        if "bf16_graphs" in self.state:
            return self.state["bf16_graphs"]
        cudnn, st, torch = self.cudnn, self.state, self.torch
        t = st["bf16"]
        o, stats = st["like"](torch.bfloat16), torch.empty(st["stats_shape"], device=self.device, dtype=torch.float32)
        dq, dk, dv = (st["like"](torch.bfloat16) for _ in range(3))
        dtypes = dict(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
        fwd = cudnn.pygraph(**dtypes)
        q_, k_, v_ = (fwd.tensor_like(t[n]) for n in ("q", "k", "v"))
        o_, stats_ = fwd.sdpa(name="sdpa", q=q_, k=k_, v=v_, generate_stats=True, attn_scale=st["attn_scale"],
                              use_causal_mask=True)
        o_.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride()))
        stats_.set_output(True).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
        stats_.set_data_type(cudnn.data_type.FLOAT)
        self.build(fwd)
        bwd = cudnn.pygraph(**dtypes)
        bq, bk, bv, bo, bdo, bstats = (bwd.tensor_like(x) for x in (t["q"], t["k"], t["v"], o, t["do"], stats))
        dq_, dk_, dv_ = bwd.sdpa_backward(name="sdpa_backward", q=bq, k=bk, v=bv, o=bo, dO=bdo, stats=bstats,
                                          attn_scale=st["attn_scale"], use_causal_mask=True)
        for tensor, like in ((dq_, dq), (dk_, dk), (dv_, dv)):
            tensor.set_output(True).set_dim(list(like.shape)).set_stride(list(like.stride()))
        self.build(bwd)
        ws = self.workspace(fwd, bwd)
        fwd_pack = {q_: t["q"], k_: t["k"], v_: t["v"], o_: o, stats_: stats}
        bwd_pack = {bq: t["q"], bk: t["k"], bv: t["v"], bo: o, bdo: t["do"], bstats: stats, dq_: dq, dk_: dk, dv_: dv}
        st["bf16_graphs"] = {"fwd": lambda: fwd.execute(fwd_pack, ws, handle=self.handle),
                             "bwd": lambda: bwd.execute(bwd_pack, ws, handle=self.handle),
                             "o": o, "stats": stats, "grads": (dq, dk, dv), "bwd_graph": bwd, "bwd_pack": bwd_pack,
                             "bwd_tensors": {"o": bo, "stats": bstats}, "ws": ws}
        return st["bf16_graphs"]

    def bf16(self, candidate, shape) -> dict:
        graphs, fwd_err = attempt(self.bf16_graphs)
        if fwd_err:
            return outcome(candidate, shape, fwd_err, None)
        _, fwd_err = attempt(lambda: (graphs["fwd"](), self.sync()))
        _, bwd_err = (None, None) if fwd_err else attempt(lambda: (graphs["bwd"](), self.sync()))
        fields = {"backend": "cuDNN graph (sdpa, sdpa_backward)"}
        if not fwd_err:
            fields["fwd_ms"] = self.timer.ms(graphs["fwd"])
        if not fwd_err and not bwd_err:
            fields["fwd_bwd_ms"] = self.timer.ms(lambda: (graphs["fwd"](), graphs["bwd"]()))
        return outcome(candidate, shape, fwd_err, bwd_err, **fields)

    def fp8_forward(self):
        """The FP8 forward graph (E4M3 Q/K/V/O, softmax stats kept for a backward), built once."""
        if "fp8_fwd" in self.state:
            return self.state["fp8_fwd"]
        cudnn, st, torch = self.cudnn, self.state, self.torch
        t = st["fp8"]
        scales = {n: self.scalar() for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}
        for n in ("q", "k", "v"):
            scales[f"descale_{n}"].fill_(1.0 / st["in_scales"][n])
        o, stats = st["like"](torch.float8_e4m3fn), torch.empty(st["stats_shape"], device=self.device, dtype=torch.float32)
        amax_s, amax_o = self.scalar(0.0), self.scalar(0.0)
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
        q_, k_, v_ = (g.tensor_like(t[n]) for n in ("q", "k", "v"))
        sc = {n: g.tensor_like(x) for n, x in scales.items()}
        o_, stats_, amax_s_, amax_o_ = g.sdpa_fp8(q=q_, k=k_, v=v_, **sc, generate_stats=True,
                                                  attn_scale=st["attn_scale"], use_causal_mask=True)
        o_.set_output(True).set_dim(list(o.shape)).set_stride(list(o.stride())).set_data_type(cudnn.data_type.FP8_E4M3)
        stats_.set_output(True).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
        stats_.set_data_type(cudnn.data_type.FLOAT)
        for tensor in (amax_s_, amax_o_):
            tensor.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
        self.build(g)
        ws = self.workspace(g)
        pack = {q_: t["q"], k_: t["k"], v_: t["v"], o_: o, stats_: stats, amax_s_: amax_s, amax_o_: amax_o,
                **{sc[n]: scales[n] for n in scales}}
        run = lambda: g.execute(pack, ws, handle=self.handle)  # noqa: E731
        run()  # unit scales for S and O: their amaxes set the scales of every later call
        self.sync()
        for name, amax in (("s", amax_s), ("o", amax_o)):
            scale = pow2_scale(amax.item())
            scales[f"scale_{name}"].fill_(scale)
            if name == "s":
                scales["descale_s"].fill_(1.0 / scale)
        st["fp8_fwd"] = {"run": run, "o": o, "stats": stats, "scales": scales, "amax": {"s": amax_s, "o": amax_o}}
        return st["fp8_fwd"]

    def fp8_backward(self):
        """The FP8 backward graph (E4M3 in and out), its output scales from a unit-scaled call."""
        if "fp8_bwd" in self.state:
            return self.state["fp8_bwd"]
        cudnn, st, torch = self.cudnn, self.state, self.torch
        fwd, t = self.fp8_forward(), st["fp8"]
        names = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP",
                 "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP")
        scales = {n: self.scalar() for n in names}
        for n in ("q", "k", "v"):
            scales[f"descale_{n}"].fill_(1.0 / st["in_scales"][n])
        scales["descale_dO"].fill_(1.0 / st["in_scales"]["do"])
        scales["descale_o"].copy_(1.0 / fwd["scales"]["scale_o"])
        scales["descale_s"].copy_(fwd["scales"]["descale_s"])
        scales["scale_s"].copy_(fwd["scales"]["scale_s"])
        grads = tuple(st["like"](torch.float8_e4m3fn) for _ in range(3))
        amaxes = {n: self.scalar(0.0) for n in ("dQ", "dK", "dV", "dP")}
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT)
        q_, k_, v_, o_, do_ = (g.tensor_like(x) for x in (t["q"], t["k"], t["v"], fwd["o"], t["do"]))
        stats_ = g.tensor_like(fwd["stats"])
        sc = {n: g.tensor_like(x) for n, x in scales.items()}
        dq_, dk_, dv_, *amax_ = g.sdpa_fp8_backward(q=q_, k=k_, v=v_, o=o_, dO=do_, stats=stats_, **sc,
                                                    attn_scale=st["attn_scale"], use_causal_mask=True)
        for tensor, like in zip((dq_, dk_, dv_), grads):
            tensor.set_output(True).set_dim(list(like.shape)).set_stride(list(like.stride()))
            tensor.set_data_type(cudnn.data_type.FP8_E4M3)
        for tensor in amax_:
            tensor.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(cudnn.data_type.FLOAT)
        self.build(g)
        ws = self.workspace(g)
        pack = {q_: t["q"], k_: t["k"], v_: t["v"], o_: fwd["o"], do_: t["do"], stats_: fwd["stats"],
                **{sc[n]: scales[n] for n in scales}, dq_: grads[0], dk_: grads[1], dv_: grads[2],
                **dict(zip(amax_, amaxes.values()))}
        run = lambda: g.execute(pack, ws, handle=self.handle)  # noqa: E731
        fwd["run"]()
        run()  # unit output scales: the amaxes it reports set them
        self.sync()
        for name, amax in amaxes.items():
            scales[f"scale_{name}"].fill_(pow2_scale(amax.item()))
            if name == "dP":
                scales["descale_dP"].fill_(1.0 / pow2_scale(amax.item()))
        st["fp8_bwd"] = {"run": run, "grads": grads, "scales": scales}
        return st["fp8_bwd"]

    def dequantized(self, fp8_tensor, scale) -> object:
        return fp8_tensor.float() / scale.reshape(())

    def accuracy(self, o_fp8, o_scale, grads=None) -> dict:
        """Error against the bf16 graphs' outputs (run once more here, on the same inputs)."""
        ref = self.state.get("bf16_graphs")
        if ref is None:
            return {}
        ref["fwd"]()
        ref["bwd"]()
        self.sync()
        acc = {"out": torch_error(self.dequantized(o_fp8, o_scale), ref["o"])}
        for name, got, want in zip(("dq", "dk", "dv"), grads or (), ref["grads"]):
            acc[name] = torch_error(got, want)
        return acc

    def fp8(self, candidate, shape) -> dict:
        fwd, fwd_err = attempt(self.fp8_forward)
        if fwd_err:
            return outcome(candidate, shape, fwd_err, None)
        bwd, bwd_err = attempt(self.fp8_backward)
        fields = {"backend": "cuDNN graph (sdpa_fp8, sdpa_fp8_backward)",
                  "fwd_ms": self.timer.ms(fwd["run"]),
                  "details": {"scales": {n: round(x.item(), 6) for n, x in fwd["scales"].items()}}}
        grads = None
        if not bwd_err:
            fields["fwd_bwd_ms"] = self.timer.ms(lambda: (fwd["run"](), bwd["run"]()))
            fields["details"]["bwd_scales"] = {n: round(x.item(), 6) for n, x in bwd["scales"].items()}
            grads = [self.dequantized(gq, bwd["scales"][f"scale_{n}"]) for gq, n in zip(bwd["grads"], ("dQ", "dK", "dV"))]
        fwd["run"]()
        if not bwd_err:
            bwd["run"]()
        fields["accuracy"] = self.accuracy(fwd["o"], fwd["scales"]["scale_o"], grads)
        return outcome(candidate, shape, None, bwd_err, **fields)

    def hybrid(self, candidate, shape) -> dict:
        """FP8 forward, bf16 backward: the forward's O dequantized into the bf16 backward's O."""
        fwd, fwd_err = attempt(self.fp8_forward)
        if fwd_err:
            return outcome(candidate, shape, fwd_err, None)
        bf16, bwd_err = attempt(self.bf16_graphs)
        fields = {"backend": "cuDNN graph (sdpa_fp8 forward, bf16 sdpa_backward)", "fwd_ms": self.timer.ms(fwd["run"])}
        if bwd_err:
            return outcome(candidate, shape, None, f"the bf16 backward graph: {bwd_err}", **fields)
        torch = self.torch
        o_bf16 = bf16["o"]
        stats = bf16["stats"]
        inv_o = 1.0 / fwd["scales"]["scale_o"].reshape(())

        def step():
            fwd["run"]()
            o_bf16.copy_(fwd["o"].float() * inv_o)  # O for the backward's rowsum(dO·O)
            stats.copy_(fwd["stats"])
            bf16["bwd"]()

        _, bwd_err = attempt(lambda: (step(), self.sync()))
        if not bwd_err:
            fields["fwd_bwd_ms"] = self.timer.ms(step)
            step()
            self.sync()
            grads = [g.clone() for g in bf16["grads"]]
            fields["accuracy"] = self.accuracy(fwd["o"], fwd["scales"]["scale_o"], grads)
        return outcome(candidate, shape, None, bwd_err, **fields)


def import_cudnn_frontend():
    """cudnn-frontend's Python module with pip's cuDNN, the one torch runs: the module dlopens
    libcudnn from LD_LIBRARY_PATH before pip's, so folders holding another libcudnn.so.9 (a
    system cuDNN) are dropped from it for this process first."""
    from parallax.native.gpu import pip_cudnn_folder
    from parallax.engines.torch.recipes.te import prefer_torch_cudnn

    prefer_torch_cudnn()
    pip = pip_cudnn_folder()
    kept = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
            if d and (not os.path.exists(os.path.join(d, "libcudnn.so.9")) or
                      (pip and os.path.realpath(d) == os.path.realpath(pip)))]
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(kept)
    import cudnn

    return cudnn


class JaxGroup:
    """JAX's cuDNN fused attention (bf16 and FP8) and TE-JAX's backend rule."""

    def __init__(self, args):
        with contextlib.suppress(Exception):
            from parallax.engines.torch.recipes.te import prefer_torch_cudnn

            prefer_torch_cudnn()  # before JAX starts: one cuDNN for JAX and TE-JAX, as the engine does
        import jax

        self.args, self.jax = args, jax
        self.data, self.outputs = {}, {}

    def environment(self) -> dict:
        jax = self.jax
        env = {"jax": jax.__version__}
        with contextlib.suppress(Exception):
            from jax._src.lib import cuda_versions

            env["jax_cudnn"] = cuda_versions.cudnn_get_version()
        with contextlib.suppress(Exception):
            env["jax_device"] = jax.devices()[0].device_kind
        return env

    def tensors(self, shape: Shape):
        import jax.numpy as jnp

        if shape not in self.data:
            self.data.clear()
            self.outputs.clear()
            arrays = inputs(shape, self.args.batch, self.args.seq, self.args.seed)
            self.data[shape] = {"f32": arrays, "bf16": tuple(jnp.asarray(a, jnp.bfloat16) for a in arrays)}
        return self.data[shape]

    def ms(self, fn, *args) -> float:
        jax = self.jax
        for _ in range(self.args.warmup):
            out = fn(*args)
        jax.block_until_ready(out if self.args.warmup else fn(*args))
        t0 = time.perf_counter()
        for _ in range(self.args.iters):
            out = fn(*args)
        jax.block_until_ready(out)
        return round((time.perf_counter() - t0) / self.args.iters * 1e3, 4)

    def run(self, candidate: Candidate, shape: Shape) -> dict:
        return {"jax-cudnn-bf16": self.bf16, "jax-cudnn-fp8": self.fp8,
                "te-jax-fp8-query": self.te_query}[candidate.name](candidate, shape)

    def bf16(self, candidate, shape) -> dict:
        jax = self.jax
        q, k, v, do = self.tensors(shape)["bf16"]
        scale = 1.0 / math.sqrt(shape.head_dim)

        def attention(q, k, v):
            return jax.nn.dot_product_attention(q, k, v, is_causal=True, scale=scale, implementation="cudnn")

        fwd = jax.jit(attention)
        fwd_bwd = jax.jit(lambda q, k, v, do: jax.vjp(attention, q, k, v)[1](do))
        out, fwd_err = attempt(lambda: jax.block_until_ready(fwd(q, k, v)))
        grads, bwd_err = (None, None) if fwd_err else attempt(lambda: jax.block_until_ready(fwd_bwd(q, k, v, do)))
        fields = {"backend": "cuDNN (XLA custom call __cudnn$fmha*)"}
        if not fwd_err:
            fields["fwd_ms"] = self.ms(fwd, q, k, v)
            self.outputs[(candidate.name, shape)] = (out, grads)
        if not fwd_err and not bwd_err:
            fields["fwd_bwd_ms"] = self.ms(fwd_bwd, q, k, v, do)
        return outcome(candidate, shape, fwd_err, bwd_err, **fields)

    def fp8(self, candidate, shape) -> dict:
        """FP8 Q/K/V/dO at their own power-of-two scales; S, O, dP and the gradients scaled from
        the amaxes a unit-scaled call reports. The forward alone is JAX's inference kernel (no
        softmax stats), as the bf16 forward above."""
        jax = self.jax
        import jax.numpy as jnp
        from jax._src.cudnn import fused_attention_stablehlo as fa

        data = self.tensors(shape)
        in_scale = [pow2_scale(float(abs(a).max())) for a in data["f32"]]
        q8, k8, v8, do8 = (jnp.asarray(a * s).astype(jnp.float8_e4m3fn) for a, s in zip(data["f32"], in_scale))
        one = lambda x=1.0: jnp.full((1, 1, 1, 1), x, jnp.float32)  # noqa: E731
        params = {name: one() for name in fa.fp8_params_keys}
        for name, s in zip(("descale_q", "descale_k", "descale_v", "descale_dO"), in_scale):
            params[name] = one(1.0 / s)
        scale = 1.0 / math.sqrt(shape.head_dim)

        def attention(q, k, v, p):
            return fa.dot_product_attention(q, k, v, fp8_params=p, scale=scale, mask_type=fa.MaskType.CAUSAL,
                                            qkv_layout="BTNH", use_fp8=True)

        def train(q, k, v, do, p):
            outs, pullback = jax.vjp(attention, q, k, v, p)
            dq, dk, dv, dp = pullback((do, one(), one()))
            return outs, (dq, dk, dv), {n: dp[n] for n in ("amax_dQ", "amax_dK", "amax_dV", "amax_dP")}

        fwd, fwd_bwd = jax.jit(attention), jax.jit(train)
        outs, fwd_err = attempt(lambda: jax.block_until_ready(fwd(q8, k8, v8, params)))
        if fwd_err:
            return outcome(candidate, shape, fwd_err, None)
        for name, amax in (("s", outs[1]), ("o", outs[2])):
            params[f"scale_{name}"] = one(pow2_scale(float(amax.max())))
        params["descale_s"] = one(1.0 / float(params["scale_s"].max()))
        params["descale_o"] = one(1.0 / float(params["scale_o"].max()))
        fields = {"backend": "cuDNN FP8 (XLA custom call __cudnn$fmhaSoftmaxF8)", "fwd_ms": self.ms(fwd, q8, k8, v8, params)}
        first, bwd_err = attempt(lambda: jax.block_until_ready(fwd_bwd(q8, k8, v8, do8, params)))
        if bwd_err is None:
            for name in ("dQ", "dK", "dV", "dP"):
                params[f"scale_{name}"] = one(pow2_scale(float(first[2][f"amax_{name}"].max())))
            params["descale_dP"] = one(1.0 / float(params["scale_dP"].max()))
            fields["fwd_bwd_ms"] = self.ms(fwd_bwd, q8, k8, v8, do8, params)
        fields["details"] = {"scales": {n: float(params[n].max()) for n in sorted(params) if n.startswith("scale")}}
        base = self.outputs.get(("jax-cudnn-bf16", shape))
        if base is not None:
            outs = fwd(q8, k8, v8, params)
            acc = {"out": jax_error(outs[0].astype(jnp.float32) / float(params["scale_o"].max()), base[0])}
            if bwd_err is None and base[1] is not None:
                _, grads, _ = fwd_bwd(q8, k8, v8, do8, params)
                for name, got, want, key in zip(("dq", "dk", "dv"), grads, base[1], ("scale_dQ", "scale_dK", "scale_dV")):
                    # descale_dO tells the kernel dO's scale: its gradients are the bf16 run's, times scale_dX
                    acc[name] = jax_error(got.astype(jnp.float32) / float(params[key].max()), want)
            fields["accuracy"] = acc
        return outcome(candidate, shape, None, bwd_err, **fields)

    def te_query(self, candidate, shape) -> dict:
        """TE's C++ rule (nvte_get_fused_attn_backend) asked from JAX, for FP8 and bf16 Q/K/V,
        training and inference. A query: nothing runs."""
        import jax.numpy as jnp

        try:
            from transformer_engine.jax import attention as tea
        except Exception as exc:
            return record(candidate, shape, "unavailable", fwd_error=f"transformer_engine.jax: {one_line(exc)}")
        answers = {}
        for dtype_name, dtype in (("fp8_e4m3", jnp.float8_e4m3fn), ("bf16", jnp.bfloat16)):
            for training in (True, False):
                key = f"{dtype_name} {'training' if training else 'inference'}"
                answers[key], err = attempt(lambda: bool(tea.is_fused_attn_kernel_available(
                    is_training=training, batch_size=self.args.batch, q_dtype=dtype, kv_dtype=dtype,
                    qkv_layout=tea.QKVLayout.BSHD_BSHD_BSHD, attn_bias_type=tea.AttnBiasType.NO_BIAS,
                    attn_mask_type=tea.AttnMaskType.CAUSAL_MASK, softmax_type=tea.AttnSoftmaxType.VANILLA_SOFTMAX,
                    dropout_probability=0.0, q_num_heads=shape.heads, kv_num_heads=shape.heads,
                    q_max_seqlen=self.args.seq, kv_max_seqlen=self.args.seq, head_dim_qk=shape.head_dim,
                    head_dim_v=shape.head_dim)))
                if err:
                    answers[key] = f"error: {err}"
        text = "; ".join(f"{k}: {'yes' if v is True else 'no' if v is False else v}" for k, v in answers.items())
        return record(candidate, shape, "answered", backend=f"fused kernel available? {text}", details=answers)


def jax_error(got, want) -> dict:
    import jax.numpy as jnp

    got, want = jnp.asarray(got, jnp.float32), jnp.asarray(want, jnp.float32)
    scale = float(jnp.abs(want).max())
    worst = float(jnp.abs(got - want).max())
    return {"max_abs": worst, "rel": worst / scale if scale else None}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        print(dry_run(args))
        return 0
    if args.child:
        return run_child(args)
    orchestrate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
