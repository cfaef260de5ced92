"""The crossover record (``parallax.analysis.crossover``) as Markdown, a PNG, HTML (the report with its
plot inlined) and JSON."""

from __future__ import annotations

from pathlib import Path

from parallax.errors import require_module
from parallax.analysis.report import format as f
from parallax.analysis.report import html
from parallax.analysis.report.markdown import table
from parallax.store.files import folder_for_writing, replacing
from parallax.store.results import atomic_write_json, atomic_write_text


def write(record: dict, out_dir: Path) -> dict[str, Path]:
    with folder_for_writing(out_dir, "--output-dir") as out_dir:
        paths = {"plot": plot(record, out_dir / "crossover.png"), "report": out_dir / "crossover.md",
                 "json": out_dir / "crossover.json", "html": out_dir / "crossover.html"}
        text = markdown(record, "crossover.png")
        atomic_write_text(paths["report"], text)
        atomic_write_json(paths["json"], record)
        html.write_markdown_page(paths["html"], "Where low precision starts to pay", text)  # the plot inlined
    return paths


HEADER = ["Framework", "Recipe", "Over", "Model", "Parameters", "Speedup (CI)", "Reading", "Data", "Machine",
          "From"]


def rows(record: dict, marked: str = " **cross-machine**") -> list[list[str]]:
    """The crossover table's rows (HEADER's columns), for Markdown and for the terminal."""
    source = {d: i + 1 for i, d in enumerate(record["results_dirs"])}
    return [[r["framework"] + f.gpus_text(r.get("gpus")), r["recipe"], r["baseline"], r["model"], f"{r['parameters']:,}",
             f.value_ci(r["ratio"], r["ci"], f.ratio) + (marked if r.get("cross_machine") else ""),
             f.verdict(r), r.get("data") or f.NA, r.get("machine") or f.NA, str(source[r["results_dir"]])]
            for r in record["rows"]]


def terminal(record: dict, console) -> None:
    """The crossover table for the terminal (fitted to its width), the benchmarks it came from and
    the rows kept out: what the Markdown report says, without its prose."""
    from rich.table import Table
    from rich.text import Text

    from parallax.analysis.report.terminal import fit, paragraph

    table = Table(title="Speedup over bf16 against model size", title_justify="left")
    for name in HEADER:
        table.add_column(name, justify="right" if name in ("Parameters", "Speedup (CI)", "From") else "left")
    for row in rows(record, " (cross-machine)"):
        table.add_row(*(Text(c) for c in row))
    console.print(fit(table, console))
    for i, folder in enumerate(record["results_dirs"], start=1):
        paragraph(console, f"{i}. {folder}")
    for e in record.get("excluded") or []:
        paragraph(console, f"kept out: {e['cell']} in {e['results_dir']}: {e['reason']}")


def markdown(record: dict, plot_name: str | None = None) -> str:
    sizes = ", ".join(f"`{m['model']}` ({m['parameters']:,} parameters)" for m in record["models"])
    source = {d: i + 1 for i, d in enumerate(record["results_dirs"])}
    text = ["# Where low precision starts to pay", "",
            f"Tokens/s of each recipe over its framework's bf16 recipe, per model size: {sizes}. "
            f"Intervals are each benchmark's own {round(100 * record['level'])}% bootstrap CIs. "
            "A recipe and its baseline always come from one benchmark (column 'From') and were checked to be "
            "alike in everything but the recipe (machine, software, data, attention backend), as "
            "`parallax compare` checks them; a row marked cross-machine was asked for with --cross-machine "
            "and its interval includes the spread measured between the machines. Different sizes may come "
            "from different machines (column 'Machine'). Data 'synthetic': random tokens, whose loss says "
            "nothing; speed does not depend on the token values in this model.", ""]
    text += [table(HEADER, rows(record))]
    text += ["", "Benchmarks, as named on the command line:", ""] + [f"{i}. `{d}`" for d, i in source.items()]
    excluded = record.get("excluded") or []
    if excluded:
        text += ["", "Kept out (attention fell back or input-bound, so the cell's speed measures that):", ""]
        text += [f"- {e['cell']} in `{e['results_dir']}`: {e['reason']}" for e in excluded]
    if plot_name:
        text += ["", f"![Speedup against model size]({plot_name})"]
    text += [f"\n- Problem: {p}" for p in record["problems"]]
    return "\n".join(text) + "\n"


def _line_key(row: dict) -> tuple:
    """One line per recipe and baseline: over bf16 and over te-bf16 are two curves, not one."""
    return row["framework"], row["recipe"], row["baseline"], row.get("gpus", 1)


def _line_label(framework: str, recipe: str, baseline: str, gpus: int) -> str:
    over = "" if baseline == "bf16" else f" / {baseline}"
    return f"{framework} {recipe}{over}{f.gpus_text(gpus)}"


def plot(record: dict, path: Path) -> Path:
    require_module("matplotlib", "report")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    try:
        stacks = sorted({(r["framework"], r["recipe"], r.get("gpus", 1)) for r in record["rows"]})
        palette = plt.get_cmap("tab10" if len(stacks) <= 10 else "tab20")
        colour = {stack: palette(i % palette.N) for i, stack in enumerate(stacks)}  # a recipe's lines share one
        for key in sorted({_line_key(r) for r in record["rows"]}):
            framework, recipe, baseline, gpus = key
            line = sorted((r for r in record["rows"] if _line_key(r) == key), key=lambda r: r["parameters"])
            x = [r["parameters"] / 1e6 for r in line]
            y = [r["ratio"] for r in line]
            ci = [r["ci"] or [r["ratio"], r["ratio"]] for r in line]  # a cross-machine row may have none
            err = [[r["ratio"] - c[0] for r, c in zip(line, ci)], [c[1] - r["ratio"] for r, c in zip(line, ci)]]
            ax.errorbar(x, y, yerr=err, marker="o" if framework == "jax" else "s", capsize=3,
                        color=colour[framework, recipe, gpus], label=_line_label(*key),
                        linestyle="-" if baseline == "bf16" else ":")
        ax.axhline(1.0, color="grey", linewidth=1, linestyle="--")
        ax.set_xscale("log")
        sizes = [m["parameters"] / 1e6 for m in record["models"]]
        ax.set_xticks(sizes, [f"{s:,.0f}M" for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("parameters")
        ax.set_ylabel("tokens/s over the baseline (bf16; dotted: te-bf16)")
        ax.set_title("Low-precision speedup against model size")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        with replacing(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    return path
