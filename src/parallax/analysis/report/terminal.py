"""The comparison record as rich tables in the terminal, and the one way any command prints a
table or a paragraph so that it fits the terminal it is on, 80 columns included (``fit``,
``paragraph``, ``console_for_output``).

A table keeps its columns while they fit, its cells wrapped at spaces (never cut with …); when
even the narrowest layout is wider than the console, it is printed stacked: one block per row,
each value under its column's name. Piped output takes $COLUMNS, else 80 columns (rich's rule).
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from parallax.spec.flops import PRIMARY_ACCOUNTING as PRIMARY
from parallax.analysis.report import format as f


def console_for_output(stderr: bool = False) -> Console:
    """stdout (or stderr): a terminal's width, else $COLUMNS, else 80 columns."""
    return Console(stderr=stderr)


def fit(table: Table, console: Console):
    """``table`` as wide as ``console`` allows, its cells wrapped, never cut; stacked (one block per
    row: 'column: value' lines) when its narrowest layout is still wider."""
    for column in table.columns:
        column.overflow = "fold"
    narrowest = Measurement.get(console, console.options.update_width(10**4), table).minimum
    return table if narrowest <= console.width else stacked(table)


def stacked(table: Table) -> Group:
    """Each row of ``table`` as its first cell, then a 'column: value' line for each other cell,
    the values wrapped under themselves."""
    heads = [Text.from_markup(c.header) if isinstance(c.header, str) else Text(str(c.header)) for c in table.columns]
    blocks = [Text.from_markup(table.title, style="italic")] if isinstance(table.title, str) else []
    for row in zip(*(column._cells for column in table.columns)):
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for head, value in zip(heads[1:], row[1:]):
            grid.add_row(Text("  ") + head + Text(":"), _cell_text(value))
        blocks += [_cell_text(row[0], "bold"), grid]
    if isinstance(table.caption, str):
        blocks.append(Text.from_markup(table.caption))
    return Group(*blocks)


def _cell_text(value, style: str = "") -> Text:
    if isinstance(value, Text):
        return value
    return Text.from_markup(str(value), style=style) if isinstance(value, str) else Text(str(value), style=style)


def paragraph(console: Console, text: str, markup: bool = False) -> None:
    """``text`` wrapped at spaces to the console's width (a summary or a note, never one line of 200
    columns); a word longer than the width (a path) stays whole, to be copied."""
    from parallax.errors import wrap

    plain = Text.from_markup(text).plain if markup else text
    lines = wrap(plain, console.width, indent="")
    if markup and len(lines) == 1:  # keeps its colours where it fits on one line
        console.print(text, highlight=False, soft_wrap=True)
        return
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def render(record: dict, console: Console | None = None) -> None:
    """The tables and the failed runs. The record's problems are not printed here: the command
    says them on stderr, one warning line each (``parallax.cli.compare.warn_problems``)."""
    console = console or console_for_output()
    console.print(fit(_cells(record), console))
    if record.get("scaling"):
        console.print(fit(_scaling(record), console))
        for g in record["scaling"]:
            if g["note"]:
                paragraph(console, f"note: {g['note']}")
    if record["speedups"]:
        console.print(fit(_speedups(record), console))
    if record.get("eval_deltas"):
        console.print(fit(_penalties(record), console))
    cross = record.get("cross_machine") or {}
    if cross.get("speedups"):
        console.print(fit(_cross_machine(cross), console))
    if record.get("baseline"):
        console.print(fit(_baseline(record["baseline"]), console))
        for line in _baseline_notes(record["baseline"]):
            paragraph(console, line)
    for line in _notes(record):
        paragraph(console, line, markup=True)


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
