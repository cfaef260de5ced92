"""``parallax compare``: tables, report and plots from existing benchmark results."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from parallax import stats


@click.command()
@click.option("--results-dir", required=True, type=click.Path(file_okay=False),
              help="The --output-dir of a benchmark (or any folder of run.json files).")
@click.option("--baseline", type=click.Path(file_okay=False), default=None,
              help="Another results directory (another GPU or version) to show ratios against.")
@click.option("--output-report", type=click.Path(dir_okay=False), default=None,
              help="Write a Markdown report here, with plots and a CSV/JSON export beside it.")
@click.option("--plots-dir", type=click.Path(file_okay=False), default=None,
              help="Where the PNG plots go (default: plots/ beside the report).")
@click.option("--bootstraps", type=click.IntRange(min=100), default=stats.DEFAULT_BOOTSTRAPS,
              show_default=True, help="Bootstrap replicates behind every confidence interval.")
def command(results_dir, baseline, output_report, plots_dir, bootstraps):
    """Compare the cells of a benchmark: speedups, loss deltas, and ratios to a baseline."""
    from parallax.compare import build_comparison
    from parallax.report import terminal, write_report

    record = build_comparison(Path(results_dir), Path(baseline) if baseline else None, n_boot=bootstraps)
    terminal.render(record, Console())
    if output_report:
        written = write_report(record, Path(output_report), Path(plots_dir) if plots_dir else None)
        Console(stderr=True).print("wrote " + ", ".join(str(p) for p in written.values()), highlight=False)
    return 0
