"""The comparison record as rich tables in the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from parallax.spec.flops import PRIMARY_ACCOUNTING as PRIMARY
from parallax.analysis.report import format as f


def console_for_output() -> Console:
    """stdout; wide enough for the tables when it is a file or a pipe (not a terminal)."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def render(record: dict, console: Console | None = None) -> None:
    """The tables and the failed runs. The record's problems are not printed here: the command
    says them on stderr, one warning line each (``parallax.cli.compare.warn_problems``)."""
    console = console or console_for_output()
    console.print(_cells(record))
    if record.get("scaling"):
        console.print(_scaling(record))
        for g in record["scaling"]:
            if g["note"]:
                console.print(f"note: {escape(g['note'])}", highlight=False, soft_wrap=True)
    if record["speedups"]:
        console.print(_speedups(record))
    if record.get("eval_deltas"):
        console.print(_penalties(record))
    cross = record.get("cross_machine") or {}
    if cross.get("speedups"):
        console.print(_cross_machine(cross))
    if record.get("baseline"):
        console.print(_baseline(record["baseline"]))
        for line in _baseline_notes(record["baseline"]):
            console.print(line, highlight=False, soft_wrap=True)
    for line in _notes(record):
        console.print(line, highlight=False, soft_wrap=True)


def _cells(record: dict) -> Table:
    deltas = {f.cell_id(d): d for d in record["loss_deltas"]}
    several = f.several_gpus(record)
    machines = record.get("machines") or []
    several_machines = len(machines) > 1
    title = "Benchmark" + (f" on {machines[0]['machine']}" if len(machines) == 1 else "")
    t = Table(title=title, title_justify="left")
    # MFU: the primary FLOPs accounting against the dense datasheet peak of the cell's precision.
    for col in ("framework", "precision · recipe", *(("GPUs",) if several else ()),
                *(("machine",) if several_machines else ()), "runs", "step ms (p10–p90)",
                "tokens/s (95% CI)", f"MFU ({PRIMARY}, dense peak)", "final loss", "Δloss vs bf16 (95% CI)" + ("" if record.get("mode") == "convergence" else ", early")):
        t.add_column(col, justify="left" if col in ("framework", "precision · recipe", "machine", "runs") else "right")
    for c in record["cells"]:
        step, tps = c["step_ms"], c["tokens_per_s"] or {}
        d = deltas.get(f.cell_id(c))
        t.add_row(
            c["framework"], f.precision_label(c), *((str(c.get("gpus") or 1),) if several else ()),
            *((c.get("machine") or "–",) if several_machines else ()), c["status"],
            f"{f.num(step['median'])} ({f.num(step['p10'])}–{f.num(step['p90'])})" if step else f.NA,
            f.value_ci(tps.get("value"), tps.get("ci")) + (" (input-bound)" if c.get("input_bound") else ""),
            f.pct(((c["flops"] or {}).get(PRIMARY) or {}).get("mfu_precision_peak")),
            f.loss((c["final_loss"] or {}).get("value")),
            f.value_ci(d["delta"], d["ci"], f.delta) if d else "–",
        )
    return t


def _scaling(record: dict) -> Table:
    t = Table(title="Scaling (efficiency = tokens/s(N) ÷ (N × tokens/s(1)))", title_justify="left")
    for col in ("framework · recipe", "GPUs", "tokens/s (95% CI)", "per GPU", f"MFU per GPU ({PRIMARY})",
                "peak alloc per GPU", "step ms (slowest rank)", "efficiency (95% CI)"):
        t.add_column(col, justify="left" if col == "framework · recipe" else "right")
    for g in record["scaling"]:
        for r in g["rows"]:
            tps, per_gpu = r["tokens_per_s"] or {}, r["tokens_per_s_per_gpu"] or {}
            t.add_row(f"{g['framework']} {g['recipe']}", str(r["gpus"]),
                      f.value_ci(tps.get("value"), tps.get("ci")) if tps else r["status"],
                      f.num(per_gpu.get("value")), f.pct(r["mfu_per_gpu"]), f.gib(r["peak_allocated_bytes_per_gpu"]),
                      f.num(r["step_ms_median"]),
                      "100% (baseline)" if r["gpus"] == g["baseline_gpus"] and r["efficiency"] else
                      f.efficiency(r["efficiency"]))
    return t


def _speedups(record: dict) -> Table:
    t = Table(title="Speedups (tokens/s ratio)", title_justify="left")
    for col in ("comparison", "speedup (95% CI)", "reading"):
        t.add_column(col)
    for s in record["speedups"]:
        t.add_row(s["label"], f.value_ci(s["ratio"], s["ci"], f.ratio), f.verdict(s))
    return t


def _penalties(record: dict) -> Table:
    title = ("Convergence penalty (validation Δloss vs bf16, paired by seed)" if record.get("mode") == "convergence"
             else "Validation Δloss vs bf16 (early training, not a convergence penalty)")
    t = Table(title=title, title_justify="left")
    for col in ("framework · recipe", "seeds", "at bf16's best step", "at the last evaluation"):
        t.add_column(col)
    for r in record["eval_deltas"]:
        t.add_row(f"{r['framework']} {r['recipe']}{f.gpus_text(r.get('gpus'))}", str(r["seeds"]),
                  f"{f.delta(r['delta_at_best'])} (step {f.step(r['best_step'])}; {f.penalty_interval(r, 'best')})",
                  f"{f.delta(r['delta_at_final'])} (step {f.step(r['final_step'])}; "
                  f"{f.penalty_interval(r, 'final')})")
    return t


def _cross_machine(cross: dict) -> Table:
    t = Table(title="Cross-machine speedups (not like-for-like; intervals include the machines' spread)",
              title_justify="left")
    for col in ("comparison", "machines", "speedup (95% CI)", "reading"):
        t.add_column(col)
    for s in cross["speedups"]:
        t.add_row(s["label"], " / ".join(s["machines"]), f.value_ci(s["ratio"], s["ci"], f.ratio),
                  f.verdict(s) if s["ci"] else s["note"])
    return t


def _baseline(base: dict) -> Table:
    t = Table(title="Against the baseline (this run ÷ baseline)", caption=f"baseline: {base['results_dir']}",
              caption_justify="left", title_justify="left")
    for col in ("framework", "precision", "tokens/s ratio (95% CI)", "step time ratio", "reserved memory ratio",
                "final loss − baseline (95% CI)"):
        t.add_column(col, justify="left" if col in ("framework", "precision") else "right")
    for r in base["rows"]:
        loss = r["loss_difference"]
        t.add_row(r["framework"] + f.gpus_text(r.get("gpus")), r["precision"],
                  f.value_ci(r["tokens_per_s"]["ratio"], r["tokens_per_s"]["ci"], f.ratio),
                  f.ratio(r["step_ms_ratio"]), f.ratio(r["memory_ratio"]),
                  f.value_ci(loss["delta"], loss["ci"], f.delta) if loss else f.NA)
    return t


def _baseline_notes(base: dict) -> list[str]:
    lines = [f"differs from the baseline: {d}" for d in base["config_differences"] + base["environment_differences"]]
    if not base["rows"]:
        lines.append("no cell has ok runs in both directories: no ratio to show")
    return lines + [f"note: {n}" for n in base.get("notes") or []]


def _notes(record: dict) -> list[str]:
    lines = []
    for c in record["cells"]:
        for run in c["runs"]:
            if run["status"] != "ok":
                lines.append(f"[red]{run['status']}:[/] {c['framework']} {f.precision_label(c)}"
                             f"{f.gpus_text(c.get('gpus'))} seed {run['seed']}"
                             f" — {escape(run['error'] or 'no reason recorded')}")
    shared = sorted({n for c in record["cells"] for n in c.get("notes") or [] if n.startswith("throughput not")})
    lines += [f"note: {escape(e['cell'])} is kept out of every speedup: {escape(e['reason'])}"
              for e in record.get("excluded") or []]
    return lines + [f"note: {escape(n)}" for n in shared]
