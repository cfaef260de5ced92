"""A comparison record as github-action-benchmark's custom JSON, for a CI that charts each cell
across commits and flags a regression (``parallax compare --format github-benchmark``).

The action reads one file per direction, each a JSON list of ``{name, unit, value, range,
extra}`` (its ``tool: customBiggerIsBetter`` and ``tool: customSmallerIsBetter``): tokens/s
(and MFU where the GPU has a known peak) are bigger-is-better, the median step time
smaller-is-better. A cell's ``name`` is the same on every commit (framework, recipe, GPUs, model
and machine), so the action draws one line per cell; ``range`` is the 95% interval of the
record (the block bootstrap over steps and runs; the step time's is the same replicates as
tokens/s, ``tokens × 1000 / tokens/s``), ``extra`` the runs it pools."""

from __future__ import annotations

from pathlib import Path

from parallax.analysis.report.format import gpus_text
from parallax.spec.flops import PRIMARY_ACCOUNTING as PRIMARY
from parallax.store.results import atomic_write_json

BIGGER, SMALLER = "customBiggerIsBetter", "customSmallerIsBetter"
FILES = {BIGGER: "github-benchmark-bigger.json", SMALLER: "github-benchmark-smaller.json"}
FIELDS = ("name", "unit", "value", "range", "extra")


def entries(record: dict) -> dict[str, list[dict]]:
    """{tool: [entry, ...]}: every cell with a measured speed, in the record's order."""
    model = (record.get("config") or {}).get("model") or "?"
    out: dict[str, list[dict]] = {BIGGER: [], SMALLER: []}
    for cell in record["cells"]:
        tps = cell.get("tokens_per_s")
        if not tps:
            continue  # no result, or a speed not measured (runs that shared the device)
        name = cell_name(cell, model)
        extra = f"{cell['n_ok']} of {cell['n_runs']} runs ok; {cell['step_ms']['count']} measured steps"
        low, high = tps["ci"]
        out[BIGGER].append(_entry(f"{name}: tokens/s", "tokens/s", tps["value"], low, high, extra))
        flops = (cell.get("flops") or {}).get(PRIMARY) or {}
        if flops.get("mfu_precision_peak") is not None:
            peak = flops["peak_precision_peak"]
            low_mfu, high_mfu = (100 * t / peak for t in flops["tflops_ci"])
            out[BIGGER].append(_entry(f"{name}: MFU", "%", 100 * flops["mfu_precision_peak"], low_mfu, high_mfu,
                                      extra + f"; {PRIMARY} FLOPs against the precision's dense peak"))
        tokens = cell["tokens_per_step"]
        out[SMALLER].append(_entry(f"{name}: step time", "ms", cell["step_ms"]["median"],
                                   tokens * 1e3 / high, tokens * 1e3 / low, extra))
    return out


def cell_name(cell: dict, model: str) -> str:
    """'torch te-fp8-current · llama-100m · NVIDIA H200': what stays the same across commits."""
    machine = cell.get("machine") or "unknown machine"
    stack = f"{cell['framework']} {cell.get('recipe') or cell['precision']}{gpus_text(cell.get('gpus'))}"
    return f"{stack} · {model} · {machine}"


def _entry(name: str, unit: str, value: float, low, high, extra: str) -> dict:
    interval = "" if low is None or high is None else f"95% CI {low:.6g} to {high:.6g}"
    return {"name": name, "unit": unit, "value": float(value), "range": interval, "extra": extra}


def write(record: dict, out_dir: Path) -> dict[str, Path]:
    """Both files into ``out_dir``; {tool: path}."""
    out_dir = Path(out_dir)
    found = entries(record)
    paths = {tool: out_dir / name for tool, name in FILES.items()}
    for tool, path in paths.items():
        atomic_write_json(path, found[tool], ensure_ascii=False)
    return paths
