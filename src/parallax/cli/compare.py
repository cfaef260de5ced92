"""``parallax compare``: tables, report and plots from existing benchmark results."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

from parallax.analysis import stats
from parallax.errors import ParallaxError, say
from parallax.store import files
from parallax.store.results import writable_output_dir, writable_report

FORMATS = ("table", "json", "github-benchmark")


@click.command()
@click.option("--results-dir", required=True, type=click.Path(file_okay=False),
              help="The --output-dir of a benchmark (or any folder of run.json files).")
@click.option("--baseline", type=click.Path(file_okay=False), default=None,
              help="Another results directory (another GPU or version) to show ratios against.")
@click.option("--output-report", type=click.Path(dir_okay=False), default=None,
              help="Write a Markdown report here, with report.html, plots and a CSV/JSON export beside it.")
@click.option("--plots-dir", type=click.Path(file_okay=False), default=None,
              help="Where the PNG plots go (default: plots/ beside the report).")
@click.option("--bootstraps", type=click.IntRange(min=100), default=stats.DEFAULT_BOOTSTRAPS,
              show_default=True, help="Bootstrap replicates behind every confidence interval.")
@click.option("--cross-machine", is_flag=True,
              help="Instead of refusing a ratio between cells that differ only in their machine, show it in a "
                   "separate, labelled section whose interval includes the spread measured between the machines "
                   "(from cells run on both).")
@click.option("--format", "output_format", type=click.Choice(FORMATS), default="table", show_default=True,
              help="table: the tables on the terminal. json: the whole comparison record on stdout instead (as "
                   "report.json holds it). github-benchmark: also github-action-benchmark's JSON, "
                   "github-benchmark-bigger.json (customBiggerIsBetter: tokens/s, MFU) and "
                   "github-benchmark-smaller.json (customSmallerIsBetter: step time), with 95% intervals, into "
                   "--export-dir (docs/watching.md).")
@click.option("--export-dir", type=click.Path(file_okay=False), default=None,
              help="Where --format github-benchmark writes its files (default: --results-dir).")
def command(results_dir, baseline, output_report, plots_dir, bootstraps, cross_machine, output_format, export_dir):
    """Compare the cells of a benchmark: speedups, loss deltas, and ratios to a baseline."""
    from parallax.analysis.compare import build_comparison
    from parallax.analysis.report import github_benchmark, terminal, write_report

    if output_report:  # before the work, as `train` checks its --output-dir
        check_report_name(Path(output_report), [Path(results_dir), *([Path(baseline)] if baseline else [])])
        writable_report(Path(output_report), "--output-report")
        if plots_dir:
            writable_output_dir(plots_dir, "--plots-dir")
    if export_dir and output_format != "github-benchmark":
        raise ParallaxError("--export-dir goes with --format github-benchmark; drop it or add that")
    if output_format == "github-benchmark":
        export_dir = writable_output_dir(export_dir or results_dir, "--export-dir")
    record = build_comparison(Path(results_dir), Path(baseline) if baseline else None, n_boot=bootstraps,
                              cross_machine=cross_machine)
    if output_format == "json":
        click.echo(json.dumps(record, indent=2))
    else:
        terminal.render(record)
    corrupt = warn_problems(record)
    if output_report:
        written = write_report(record, Path(output_report), Path(plots_dir) if plots_dir else None)
        Console(stderr=True).print("wrote " + ", ".join(str(p) for p in written.values()), highlight=False,
                                   soft_wrap=True)
    if output_format == "github-benchmark":
        files.make_folder(export_dir, "--export-dir")
        written = github_benchmark.write(record, export_dir)
        Console(stderr=True).print("wrote " + ", ".join(str(p) for p in written.values()), highlight=False,
                                   soft_wrap=True)
    if corrupt:  # the report covers the readable files; the exit status tells scripts it is not whole
        raise ParallaxError(f"{corrupt} corrupt result file(s), named above, were left out of the report; "
                            "re-run those cells with 'parallax benchmark --resume' (or delete the files)")
    return 0


# What compare reads in a results folder: a report must not take one of these names there.
READ_NAMES = ("run.json", "steps.jsonl", "config.json", "index.json", "matrix.json", "environment.json",
              "records.tar.xz", "run.log")


def check_report_name(report: Path, folders: list[Path]) -> None:
    """One line when the report, or its CSV/JSON export beside it, would replace a file that
    compare reads, or when the report is named .csv/.json (its export would replace it)."""
    reads = [p for folder in folders for name in READ_NAMES for p in folder.rglob(name)]
    for path in (report, report.with_suffix(".csv"), report.with_suffix(".json")):
        files.refuse_input(path, reads, "--output-report")
    if report.suffix in (".csv", ".json"):
        raise ParallaxError(f"--output-report {report}: its {report.suffix} export would replace it; name the "
                            f"report {report.with_suffix('.md').name}")


def warn_problems(record: dict) -> int:
    """Each problem of the record as one ``parallax: warning:`` line on stderr; return how many
    were corrupt result files."""
    for problem in record["problems"]:
        say(f"parallax: warning: {problem}")
    return len(record.get("corrupt") or [])
