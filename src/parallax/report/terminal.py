"""The comparison record as rich tables in the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from parallax.flops import PRIMARY_ACCOUNTING as PRIMARY
from parallax.report import format as f


def render(record: dict, console: Console | None = None) -> None:
    console = console or Console()
    console.print(_cells(record))
    if record["speedups"]:
        console.print(_speedups(record))
    for line in _notes(record):
        console.print(line, highlight=False, soft_wrap=True)


def _cells(record: dict) -> Table:
    deltas = {(d["framework"], d.get("recipe", d["precision"])): d for d in record["loss_deltas"]}
    t = Table(title="Benchmark", title_justify="left")
    # MFU: the primary FLOPs accounting against the dense datasheet peak of the cell's precision.
    for col in ("framework", "precision · recipe", "runs", "step ms (p10–p90)", "tokens/s (95% CI)",
                f"MFU ({PRIMARY}, dense peak)", "final loss", "Δloss vs bf16 (95% CI)"):
        t.add_column(col, justify="left" if col in ("framework", "precision · recipe", "runs") else "right")
    for c in record["cells"]:
        step, tps = c["step_ms"], c["tokens_per_s"] or {}
        d = deltas.get((c["framework"], c.get("recipe", c["precision"])))
        t.add_row(
            c["framework"], f.precision_label(c), c["status"],
            f"{f.num(step['median'])} ({f.num(step['p10'])}–{f.num(step['p90'])})" if step else f.NA,
            f.value_ci(tps.get("value"), tps.get("ci")),
            f.pct(((c["flops"] or {}).get(PRIMARY) or {}).get("mfu_precision_peak")),
            f.loss((c["final_loss"] or {}).get("value")),
            f.value_ci(d["delta"], d["ci"], f.delta) if d else "–",
        )
    return t


def _speedups(record: dict) -> Table:
    t = Table(title="Speedups (tokens/s ratio)", title_justify="left")
    for col in ("comparison", "speedup (95% CI)", "reading"):
        t.add_column(col)
    for s in record["speedups"]:
        t.add_row(s["label"], f.value_ci(s["ratio"], s["ci"], f.ratio), f.verdict(s))
    return t


def _notes(record: dict) -> list[str]:
    lines = [f"[yellow]problem:[/] {escape(p)}" for p in record["problems"]]
    for c in record["cells"]:
        for run in c["runs"]:
            if run["status"] != "ok":
                lines.append(f"[red]{run['status']}:[/] {c['framework']} {f.precision_label(c)} seed {run['seed']}"
                             f" — {escape(run['error'] or 'no reason recorded')}")
    return lines
