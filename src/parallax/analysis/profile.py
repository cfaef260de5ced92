"""Where a step goes, class by class, and how far each class is from its limit on this GPU:
``parallax profile``'s table, from a profile's kernel summary (``profiling.summarize``), the
step's work (``spec.step_work``) and the limits (``plan.limits``, attention rates measured by
the engines). Pure functions of those records; the renderers are in ``report/profile.py``.

Each class's row: ms per step, share of the step, the work it must do (FLOPs or bytes), the
achieved rate (work / time), the limit (value and source), the fraction of the limit, the time
at the limit (work / limit) and the ms left on the table (time − time at the limit).
- GEMMs (``gemm-<format>``): FLOPs of the linears in that format, against cuBLASLt's ceiling at
  those GEMM shapes (or the datasheet peak, labelled).
- attention forward and backward: attention's FLOPs, against the fastest backend measured at
  the run's B×S×H×D (``attention_limits``).
- quantize, elementwise, optimizer: the byte model's bytes, against the HBM bandwidth (measured
  by a copy kernel: ``plan.limits.hbm_limit``).
Each limit is the fastest measured for its class on this GPU, the step's own kernels included
(``held_limits``): where the step's ops, each at its fastest profiled call, beat the reference,
their rate is the limit, and the row's ``limit_source`` says so; no class runs above 100%.
- communication, memcpy, other: time only.
Then the time no kernel covers: ``host gaps`` = the step without the profiler − the device's
busy time a step (the union of the kernel intervals), and, where kernels overlapped,
``overlap`` (negative: the time counted in two classes), so that every share adds up to 1.
The profiled steps run a little slower than unprofiled ones (the profiler's own work), so the
host gaps are a lower bound.
"""

from __future__ import annotations

from parallax.analysis import comparability
from parallax.errors import ParallaxError
from parallax.spec.recipe import PEAK_COLUMN
from parallax.spec.step_work import StepWork

SCHEMA = "parallax.profile/1"
COMPARE_SCHEMA = "parallax.profile-compare/1"
ORDER = ("gemm-bf16", "gemm-fp8", "gemm-fp4", "attention-fwd", "attention-bwd", "quantize", "elementwise",
         "optimizer", "communication", "memcpy", "other")
HOST_GAPS, OVERLAP = "host gaps", "overlap"
FLOPS, BYTES = "FLOP", "B"
GEMM_CLASS = {fmt: f"gemm-{column}" for fmt, column in PEAK_COLUMN.items()}  # bf16, fp8, nvfp4 -> fp4


def class_work(work: StepWork) -> dict[str, tuple[float, str]]:
    """{class: (work a step, FLOP or B)} of the classes that have a limit."""
    out = {GEMM_CLASS[fmt]: (float(flops), FLOPS) for fmt, flops in work.gemm_flops.items()}
    out.update({"attention-fwd": (float(work.attention_forward_flops), FLOPS),
                "attention-bwd": (float(work.attention_backward_flops), FLOPS),
                "quantize": (float(work.quantize_bytes), BYTES), "elementwise": (float(work.elementwise_bytes), BYTES),
                "optimizer": (float(work.optimizer_bytes), BYTES)})
    return out


def class_limits(gemm: dict[str, dict], attention: dict[str, dict], hbm: dict) -> dict[str, dict]:
    """{class: {value, source}}: TFLOP/s for GEMMs and attention, bytes/s for the memory-bound
    classes; ``gemm`` by format, ``attention`` by direction (forward, backward)."""
    out = {GEMM_CLASS[fmt]: limit for fmt, limit in gemm.items()}
    out.update({"attention-fwd": attention["forward"], "attention-bwd": attention["backward"],
                "quantize": hbm, "elementwise": hbm, "optimizer": hbm})
    return out


OWN = "the step's own"


def held_limits(limits: dict[str, dict], best_ms: dict[str, float], work: dict[str, tuple[float, str]]) -> dict:
    """``limits`` where the step's own kernels beat them: a class's limit is the faster of its
    reference (cuBLASLt, the attention backends, the HBM bandwidth) and the class's work over its
    best time a step (``best_ms``: each op at its fastest profiled call, ``profiling.best_class_time``),
    so that no class runs faster than its limit. A class whose reference is unknown keeps it."""
    out = dict(limits)
    for name, (amount, unit) in work.items():
        ref, ms = limits.get(name) or {}, best_ms.get(name) or 0.0
        if ref.get("value") is None or ms <= 0 or amount <= 0:
            continue
        own = amount / (ms * 1e-3) / (1e12 if unit == FLOPS else 1.0)  # TFLOP/s, or B/s
        if own > ref["value"]:
            shown = f"{own:,.1f} TFLOP/s" if unit == FLOPS else f"{own / 1e12:.3f} TB/s"
            out[name] = {"value": own, "source": f"{OWN}: its {name} kernels, each op at its fastest profiled call "
                                                 f"({shown}), faster than the reference ({ref['source']})"}
    return out


def attention_limits(rates: list[dict], forward_flops: float, backward_flops: float, shape: str,
                     framework: str) -> dict[str, dict]:
    """{"forward", "backward": {value TFLOP/s, source}}: the fastest backend of ``rates`` (one
    call's forward_ms and backward_ms each, ``engines/*/attention_rate.py``) for one layer's
    ``forward_flops``/``backward_flops``."""
    out = {}
    for direction, flops in (("forward", forward_flops), ("backward", backward_flops)):
        timed = [r for r in rates if r.get(f"{direction}_ms")]
        if not timed:
            why = "; ".join(f"{r['backend']}: {r['error']}" for r in rates) or "none measured"
            out[direction] = {"value": None, "source": f"unknown: no attention backend ran at {shape} ({why})"}
            continue
        best = min(timed, key=lambda r: r[f"{direction}_ms"])
        names = ", ".join(r["backend"] for r in timed)
        out[direction] = {"value": flops / (best[f"{direction}_ms"] * 1e-3) / 1e12,
                          "source": f"measured now: {framework} {best['backend']} attention {direction} at {shape}, "
                                    f"the fastest of {names}"}
    return out


def class_rows(summary: dict, step_ms: float, work: dict[str, tuple[float, str]],
               limits: dict[str, dict]) -> list[dict]:
    """The table's rows: each class in ``ORDER``, then host gaps and (where kernels overlapped)
    the overlap; their shares of ``step_ms`` add up to 1."""
    rows = [_row(name, summary["classes"][name], step_ms, work.get(name), limits.get(name)) for name in ORDER]
    busy, summed = summary["busy_ms_per_step"], summary["kernel_ms_per_step"]
    rows.append(_plain(HOST_GAPS, step_ms - busy, step_ms))
    if abs(summed - busy) > 1e-9:
        rows.append(_plain(OVERLAP, busy - summed, step_ms))
    return rows


def _plain(name: str, ms: float, step_ms: float) -> dict:
    return {"class": name, "ms_per_step": ms, "share": ms / step_ms, "calls_per_step": None, "kernels": None,
            "work": None, "unit": None, "achieved": None, "limit": None, "limit_source": None, "fraction": None,
            "ms_at_limit": None, "ms_left": None}


def _row(name: str, found: dict, step_ms: float, work: tuple[float, str] | None, limit: dict | None) -> dict:
    row = {**_plain(name, found["ms_per_step"], step_ms), "calls_per_step": found["calls_per_step"],
           "kernels": found["kernels"]}
    if work is None:
        return row
    amount, unit = work
    ms, value = found["ms_per_step"], (limit or {}).get("value")
    scale = 1e12  # TFLOP/s and TB/s
    row.update(work=amount, unit=f"T{unit}/s", limit_source=(limit or {}).get("source"),
               limit=value / scale if value is not None and unit == BYTES else value)
    if ms > 0 and amount > 0:
        row["achieved"] = amount / (ms * 1e-3) / scale
    if value:
        at_limit = amount / (value * (scale if unit == FLOPS else 1.0)) * 1e3
        row.update(ms_at_limit=at_limit, ms_left=ms - at_limit,
                   fraction=row["achieved"] / row["limit"] if row["achieved"] is not None else None)
    return row


def top_kernels(summary: dict, step_ms: float) -> list[dict]:
    return [{**k, "share": k["ms_per_step"] / step_ms} for k in summary["top_kernels"]]


# ----------------------------------------------------------------------------- comparing

def check_one_machine(records: list[dict], names: list[str], cross_machine: bool) -> None:
    """A one-line ParallaxError where the profiles ran on different machines (GPU UUID, host,
    driver, clocks: ``comparability.machine``), unless ``cross_machine``."""
    if cross_machine:
        return
    first = comparability.machine(records[0])
    for record, name in zip(records[1:], names[1:]):
        if comparability.machine(record) != first:
            raise ParallaxError(f"refusing to compare profiles of two machines: {names[0]} ran on "
                                f"{comparability.machine_label(records[0])}, {name} on "
                                f"{comparability.machine_label(record)}; profile both on one machine, or pass "
                                "--cross-machine")


def comparison(records: list[dict], names: list[str]) -> dict:
    """The classes of several profiles side by side, each one's difference from the first."""
    if len(records) < 2:
        raise ParallaxError("--compare needs two or more profile.json files")
    labels = [r["title"] for r in records]
    steps = [r["timing"]["step_ms"] for r in records]
    rows = [_compare_row("step (without the profiler)", steps, steps)]
    rows.append(_compare_row("busy (kernels)", [r["busy"]["ms_per_step"] for r in records], steps))
    for name in [*ORDER, HOST_GAPS, OVERLAP]:
        found = [next((c for c in r["classes"] if c["class"] == name), None) for r in records]
        if all(f is None for f in found):
            continue
        rows.append(_compare_row(name, [f["ms_per_step"] if f else 0.0 for f in found], steps,
                                 [f.get("fraction") if f else None for f in found]))
    return {"schema": COMPARE_SCHEMA, "profiles": [{"title": t, "path": n, "machine": comparability.machine_label(r)}
                                                   for t, n, r in zip(labels, names, records)], "rows": rows}


def _compare_row(name: str, ms: list[float], steps: list[float], fractions: list | None = None) -> dict:
    return {"class": name, "ms_per_step": ms, "share": [m / s for m, s in zip(ms, steps)],
            "delta_ms": [m - ms[0] for m in ms[1:]], "fraction": fractions or [None] * len(ms)}


def build_record(*, title: str, config: dict, recipe: dict, framework: dict, environment: dict, timing: dict,
                 on_gpu: bool, summary: dict, work: StepWork, limits: dict, notes: list[str]) -> dict:
    """profile.json: what ran (``config``, ``recipe``, ``framework``: the engine's facts with its
    ``name`` and ``device``, ``environment``: the machine as run.json records it, so that
    ``comparability`` reads both alike), the step time (``timing``: step_ms, tokens_per_s, the
    step counts, the method), the busy time, the limits (gemm by format, hbm, attention), the
    class rows and the top kernels."""
    step_ms = timing["step_ms"]
    attention = limits["attention"]
    table = held_limits(class_limits(limits["gemm"], attention, limits["hbm"]), summary.get("best_ms_per_step") or {},
                        class_work(work))
    return {"schema": SCHEMA, "title": title, "config": config, "recipe": recipe, "framework": framework,
            "environment": environment, "timing": timing, "on_gpu": on_gpu,
            "busy": {"ms_per_step": summary["busy_ms_per_step"], "method": summary["busy_method"],
                     "kernel_ms_per_step": summary["kernel_ms_per_step"],
                     "events_per_step": summary["events"] / summary["steps"], "profiled_steps": summary["steps"]},
            "work": {name: {"amount": amount, "unit": unit} for name, (amount, unit) in class_work(work).items()},
            "limits": limits, "classes": class_rows(summary, step_ms, class_work(work), table),
            "top_kernels": top_kernels(summary, step_ms), "notes": notes}
