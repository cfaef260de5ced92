"""``parallax crossover``: each low-precision recipe's speedup over bf16 against model size."""

from __future__ import annotations

from pathlib import Path

import click
from parallax.analysis import stats
from parallax.errors import say
from parallax.store.results import writable_output_dir


@click.command()
@click.argument("results_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--output-dir", required=True, type=click.Path(file_okay=False),
              help="Where crossover.md, crossover.png and crossover.json go.")
@click.option("--bootstraps", type=click.IntRange(min=100), default=stats.DEFAULT_BOOTSTRAPS,
              show_default=True, help="Bootstrap replicates behind every confidence interval.")
@click.option("--cross-machine", is_flag=True,
              help="Keep a folder's speedups between cells of different machines, marked, with intervals that "
                   "include the spread measured between the machines, instead of refusing them.")
def command(results_dirs, output_dir, bootstraps, cross_machine):
    """Line up benchmarks of several model presets (a results folder each, or several that share no
    speedup): where fp8 pays."""
    from parallax.analysis.crossover import crossover
    from parallax.analysis.report import crossover as render

    out = writable_output_dir(output_dir, "--output-dir")  # checked, not created: render.write makes it
    record = crossover([Path(d) for d in results_dirs], bootstraps, stats.DEFAULT_LEVEL, cross_machine)
    for problem in record["problems"]:
        say(f"parallax: warning: {problem}")
    from parallax.analysis.report.terminal import console_for_output

    paths = render.write(record, out)
    render.terminal(record, console_for_output())  # the Markdown goes to crossover.md, not to the terminal
    for path in paths.values():  # whole, to be copied: a path is never wrapped
        click.echo(f"wrote {path}", err=True)
    return 0
