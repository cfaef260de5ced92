"""Renderers of a comparison record (``parallax.analysis.compare.build_comparison``): Markdown, plots,
CSV/JSON and the terminal. They format; they never compute a statistic of their own."""

from __future__ import annotations

import os
from pathlib import Path

from parallax.store.results import atomic_write_text


def write_report(record: dict, report_path: Path, plots_dir: Path | None = None) -> dict[str, Path]:
    """Write the Markdown report, its HTML page, its plots and the CSV/JSON export; return every
    path written.

    Plots go to ``plots_dir`` (default: ``plots/`` beside the report); the HTML page (every plot
    inlined: it opens anywhere on its own) and the exports take the report's name with
    ``.html``, ``.csv`` and ``.json``.
    """
    from parallax.analysis.report import export, html, markdown, plots

    report_path = Path(report_path)
    plots_dir = Path(plots_dir) if plots_dir is not None else report_path.parent / "plots"
    pngs = plots.write_plots(record, plots_dir)
    relative = {name: Path(os.path.relpath(p, report_path.parent)).as_posix() for name, p in pngs.items()}
    text = markdown.render(record, relative)
    atomic_write_text(report_path, text)
    written = {"report": report_path, **{f"plot_{k}": v for k, v in pngs.items()}}
    written["html"] = html.comparison_page(record, text, report_path.with_suffix(".html"))
    written["csv"] = export.write_csv(record, report_path.with_suffix(".csv"))
    written["json"] = export.write_json(record, report_path.with_suffix(".json"))
    return written
