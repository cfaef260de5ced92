"""CSV and JSON export of a comparison record's cell table."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from parallax.spec.flops import ACCOUNTINGS
from parallax.spec.flops import PRIMARY_ACCOUNTING as PRIMARY
from parallax.analysis.report.format import cell_id
from parallax.store.results import atomic_write_json, atomic_write_text

COLUMNS = (
    "framework", "precision", "recipe", "gpus", "native", "status", "runs_ok", "runs_total",
    "step_ms_median", "step_ms_p10", "step_ms_p90",
    "tokens_per_s", "tokens_per_s_ci_low", "tokens_per_s_ci_high",
    *(f"tflops_{name}" for name in ACCOUNTINGS),
    "mfu_precision_peak", "mfu_bf16_peak", "mfu_measured_ceiling",
    "peak_allocated_bytes", "peak_reserved_bytes", "compile_s",
    "final_loss", "final_loss_ci_low", "final_loss_ci_high",
    "delta_loss_vs_bf16", "delta_loss_ci_low", "delta_loss_ci_high", "delta_loss_includes_zero",
    "eval_loss", "perplexity",
    "global_batch", "tokens_per_s_per_gpu", "sharding",
    "scaling_efficiency", "scaling_efficiency_ci_low", "scaling_efficiency_ci_high",
    "machine", "attention_fallback", "epochs",
)


def rows(record: dict) -> list[dict]:
    """One flat row per cell (the values of the Markdown tables, unformatted); on several GPUs
    tokens/s is the cell's, TFLOP/s and MFU per GPU, and the scaling efficiency is against the
    1-GPU cell of the same framework and recipe (empty where there is none)."""
    deltas = {cell_id(d): d for d in record["loss_deltas"]}
    efficiencies = {(g["framework"], g["recipe"], r["gpus"]): r["efficiency"]
                    for g in record.get("scaling") or [] for r in g["rows"]}
    out = []
    for c in record["cells"]:
        step, tps = c["step_ms"] or {}, c["tokens_per_s"] or {}
        flops, mem = c["flops"] or {}, c["memory"] or {}
        final, d = c["final_loss"] or {}, deltas.get(cell_id(c)) or {}
        primary = flops.get(PRIMARY, {})
        parallel, per_gpu = c.get("parallel") or {}, c.get("tokens_per_s_per_gpu") or {}
        eff = efficiencies.get(cell_id(c)) or {}
        out.append({
            "framework": c["framework"], "precision": c["precision"], "recipe": c.get("recipe"),
            "gpus": c.get("gpus") or 1,
            "native": (c["precision_info"] or {}).get("native"), "status": c["status"],
            "runs_ok": c["n_ok"], "runs_total": c["n_runs"],
            "step_ms_median": step.get("median"), "step_ms_p10": step.get("p10"), "step_ms_p90": step.get("p90"),
            "tokens_per_s": tps.get("value"),
            "tokens_per_s_ci_low": _at(tps.get("ci"), 0), "tokens_per_s_ci_high": _at(tps.get("ci"), 1),
            **{f"tflops_{name}": flops.get(name, {}).get("tflops") for name in ACCOUNTINGS},
            **{key: primary.get(key) for key in ("mfu_precision_peak", "mfu_bf16_peak", "mfu_measured_ceiling")},
            "peak_allocated_bytes": mem.get("peak_allocated_bytes"),
            "peak_reserved_bytes": mem.get("peak_reserved_bytes"), "compile_s": c["compile_s"],
            "final_loss": final.get("value"),
            "final_loss_ci_low": _at(final.get("ci"), 0), "final_loss_ci_high": _at(final.get("ci"), 1),
            "delta_loss_vs_bf16": d.get("delta"),
            "delta_loss_ci_low": _at(d.get("ci"), 0), "delta_loss_ci_high": _at(d.get("ci"), 1),
            "delta_loss_includes_zero": d.get("includes_zero"),
            "eval_loss": c["eval_loss"], "perplexity": c["perplexity"],
            "global_batch": parallel.get("global_batch"), "tokens_per_s_per_gpu": per_gpu.get("value"),
            "sharding": parallel.get("sharding"),
            "scaling_efficiency": eff.get("value"),
            "scaling_efficiency_ci_low": _at(eff.get("ci"), 0), "scaling_efficiency_ci_high": _at(eff.get("ci"), 1),
            "machine": c.get("machine"), "attention_fallback": c.get("attention_fallback"), "epochs": c.get("epochs"),
        })
    return out


def _at(pair, i):
    return pair[i] if pair else None


def to_csv(record: dict) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows(record):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


def write_csv(record: dict, path: Path) -> Path:
    atomic_write_text(Path(path), to_csv(record))
    return Path(path)


def write_json(record: dict, path: Path) -> Path:
    """The whole record (cells, speedups, deltas, conclusions, problems) as JSON."""
    atomic_write_json(Path(path), record)
    return Path(path)
