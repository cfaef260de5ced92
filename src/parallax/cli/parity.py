"""``parallax parity``: the torch and JAX engines on the same weights and batches, compared."""

from __future__ import annotations

from pathlib import Path

import click

from parallax.analysis.parity import DEVICES, DTYPES, ParityReport, run_parity
from parallax.errors import say


@click.command("parity")
@click.option("--model", default="tiny", show_default=True, help="Model preset.")
@click.option("--batch-size", default=2, show_default=True, type=int)
@click.option("--seq-len", default=32, show_default=True, type=int)
@click.option("--steps", default=3, show_default=True, type=int, help="Optimizer steps before comparing parameters.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the weights and batches.")
@click.option("--dtype", default="float32", show_default=True, type=click.Choice(DTYPES),
              help="Compute dtype of both models (parameters stay float32).")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(DEVICES))
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JSON here.")
def command(model, batch_size, seq_len, steps, seed, dtype, device, json_path):
    """Compare logits, loss, gradients and parameters after N steps between torch and JAX.

    Exits 1 when a gated (float32) quantity is out of tolerance; bfloat16 rows are report-only.
    """
    if device == "gpu":  # the engines' own advice names train's --device values, not parity's
        from parallax.errors import ParallaxError
        from parallax.plan import machine

        if not machine.devices():
            raise ParallaxError("--device gpu: no NVIDIA GPU found on this machine; use --device cpu")
    if json_path is not None:  # before the run, not after it
        from parallax.store.results import writable_report

        writable_report(json_path, "--json")
    from parallax.run import interrupt

    with interrupt.catching():  # Ctrl-C, SIGTERM: one line, exit 130/143, nothing written
        report = run_parity(model, batch_size, seq_len, steps, seed, dtype, device,
                            lambda text: say(f"parallax: {text}"))
    print_report(report)
    if json_path is not None:
        from parallax.store.results import atomic_write_json

        atomic_write_json(json_path, report.to_dict())
    return 0 if report.passed else 1


def print_report(report: ParityReport) -> None:
    from rich.console import Console
    from rich.table import Table

    s = report.settings
    title = (f"parity torch vs jax: {s['model']} B{s['batch_size']} S{s['seq_len']} {s['steps']} steps, "
             f"seed {s['seed']}, {s['dtype']} on {s['device']}")
    table = Table(title=title, caption=f"rel err = {s['relative_error']}")
    table.add_column("quantity")
    for name in ("max abs err", "max rel err", "tolerance"):
        table.add_column(name, justify="right")
    table.add_column("status")
    table.add_column("worst tensor", overflow="fold")
    for row in report.rows:
        table.add_row(row.quantity, f"{row.max_abs:.2e}", f"{row.max_rel:.2e}", f"{row.tolerance:.2g}",
                      _status(row.within, report.gate), row.worst)
    console = Console()
    if not console.is_terminal:  # logs and captured output: wide enough for one line a row
        console = Console(width=120)
    console.print(table)
    backends = ", ".join(f"{k} {v}" for k, v in report.backends.items() if v)
    if backends:
        console.print(f"attention: {backends}")
    if report.gate:
        console.print("PASS" if report.passed else "FAIL: a quantity is out of tolerance")
    else:
        console.print(f"report-only ({s['dtype']}): tolerances are shown for reading, not enforced")


def _status(within: bool, gate: bool) -> str:
    if gate:
        return "PASS" if within else "FAIL"
    return "within" if within else "over (report-only)"
