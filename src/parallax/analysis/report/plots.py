"""PNG plots of a comparison record: loss curves, throughput with CI whiskers, memory, MFU, and
(when cells ran on several GPU counts) tokens/s against GPUs with the ideal line."""

from __future__ import annotations

from pathlib import Path

from parallax.errors import require_module
from parallax.store.files import folder_for_writing, replacing
from parallax.spec.flops import PRIMARY_ACCOUNTING as PRIMARY
from parallax.analysis.report.format import gpus_text, precision_label


def write_plots(record: dict, out_dir: Path) -> dict[str, Path]:
    """Write every plot that has something to show into ``out_dir``; return {name: path}. A plot
    with nothing to show (``skipped``: MFU and memory on the CPU) is not drawn, and an earlier
    file of it is removed. ``scaling`` only where the record has a scaling table (cells of more
    than one GPU count)."""
    require_module("matplotlib", "report")
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    paths, skip = {}, skipped(record)
    with folder_for_writing(out_dir) as out_dir:
        for name, draw in (("loss", _loss), ("throughput", _throughput), ("memory", _memory), ("mfu", _mfu)):
            if name in skip:
                (out_dir / f"{name}.png").unlink(missing_ok=True)
            else:
                paths[name] = _save(draw, record, out_dir / f"{name}.png")
        if record.get("scaling"):
            paths["scaling"] = _save(_scaling, record, out_dir / "scaling.png")
    return paths


def skipped(record: dict) -> dict[str, str]:
    """{plot name: why it is not drawn} for each plot that would be an empty frame."""
    reasons = {}
    if not _loss_cells(record):
        reasons["loss"] = "no finished runs"
    if not _throughput_cells(record):
        shared = any(n.startswith("throughput not measured") for c in record["cells"] for n in c.get("notes") or [])
        reasons["throughput"] = "throughput not measured: the runs shared the device" if shared else "no finished runs"
    if not _memory_cells(record):
        reasons["memory"] = "no peak memory recorded (CPU runs record none)"
    if not _mfu_cells(record):
        reasons["mfu"] = "MFU n/a: no known peak for this device (use --peak-tflops)"
    return reasons


def _loss_cells(record: dict) -> list[dict]:
    return [c for c in record["cells"] if c.get("loss_curve")]


def _throughput_cells(record: dict) -> list[dict]:
    return [c for c in record["cells"] if c.get("tokens_per_s")]


def _memory_cells(record: dict) -> list[dict]:
    return [c for c in record["cells"] if (c.get("memory") or {}).get("peak_reserved_bytes") is not None
            or (c.get("memory") or {}).get("peak_allocated_bytes") is not None]


def _mfu_cells(record: dict) -> list[dict]:
    return [c for c in record["cells"]
            if ((c.get("flops") or {}).get(PRIMARY) or {}).get("mfu_precision_peak") is not None]


def _save(draw, record: dict, path: Path) -> Path:
    return save_figure(lambda ax: draw(record, ax), path)


def save_figure(draw, path: Path, size: tuple[float, float] = (8, 4.5)) -> Path:
    """One axes of ``size`` inches drawn by ``draw(ax)`` into the file ``path`` (matplotlib's Agg
    backend chosen by the caller) through the one writer (never a 0-byte PNG), its figure closed
    even when drawing fails."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=size, dpi=120)
    try:
        draw(ax)
        fig.tight_layout()
        with replacing(path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    return path


def _label(cell: dict) -> str:
    return f"{cell['framework']} {precision_label(cell)}{gpus_text(cell.get('gpus'))}"


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _loss(record: dict, ax) -> None:
    for cell in _loss_cells(record):
        curve = cell["loss_curve"]
        line, = ax.plot(curve["step"], [float("nan") if v is None else v for v in curve["loss"]],
                        label=_label(cell), linewidth=1.2)
        ev = cell.get("eval_curve")
        if ev:
            ax.plot(ev["step"], ev["loss"], "o", color=line.get_color(), markersize=4)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean over runs; dots: validation)")
    ax.set_title("Loss curves")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _bars(ax, cells: list[dict], values: list[float], title: str, ylabel: str, errors=None) -> None:
    labels = [_label(c) for c in cells]
    ax.bar(range(len(values)), values, yerr=errors, capsize=4, color="#4c72b0")
    ax.set_xticks(range(len(values)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)


def _throughput(record: dict, ax) -> None:
    cells = _throughput_cells(record)
    values = [c["tokens_per_s"]["value"] for c in cells]
    lower = [v - c["tokens_per_s"]["ci"][0] for v, c in zip(values, cells)]
    upper = [c["tokens_per_s"]["ci"][1] - v for v, c in zip(values, cells)]
    _bars(ax, cells, values, "Throughput (whiskers: 95% block-bootstrap CI)", "tokens/s", [lower, upper])


def _memory(record: dict, ax) -> None:
    cells = _memory_cells(record)
    x = range(len(cells))
    for offset, key, name in ((-0.2, "peak_allocated_bytes", "allocated"), (0.2, "peak_reserved_bytes", "reserved")):
        ax.bar([i + offset for i in x], [(c["memory"][key] or 0) / 2**30 for c in cells], width=0.4, label=name)
    ax.set_xticks(list(x), [_label(c) for c in cells], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("GiB")
    ax.set_title("Peak GPU memory")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def _mfu(record: dict, ax) -> None:
    cells = _mfu_cells(record)
    values = [100 * c["flops"][PRIMARY]["mfu_precision_peak"] for c in cells]
    _bars(ax, cells, values, f"MFU ({PRIMARY} FLOPs, against the precision's dense peak)", "MFU %")


def _scaling(record: dict, ax) -> None:
    """Tokens/s against GPUs per framework × recipe (whiskers: 95% CI), each with its ideal line
    (N × its 1-GPU tokens/s, dashed) where it has a 1-GPU cell."""
    drawn = False
    counts = set()
    for group in record["scaling"]:
        rows = [r for r in group["rows"] if r.get("tokens_per_s")]
        if not rows:
            continue
        gpus = [r["gpus"] for r in rows]
        values = [r["tokens_per_s"]["value"] for r in rows]
        lower = [v - r["tokens_per_s"]["ci"][0] for v, r in zip(values, rows)]
        upper = [r["tokens_per_s"]["ci"][1] - v for v, r in zip(values, rows)]
        label = f"{group['framework']} {group['recipe']}"
        bars = ax.errorbar(gpus, values, yerr=[lower, upper], marker="o", capsize=4, label=label)
        one = next((r for r in rows if r["gpus"] == 1), None)
        if one is not None and group.get("baseline_gpus") == 1:
            top = max(gpus)
            ax.plot([1, top], [one["tokens_per_s"]["value"], top * one["tokens_per_s"]["value"]], "--",
                    color=bars[0].get_color(), alpha=0.6, linewidth=1, label=f"{label}, ideal")
        counts.update(gpus)
        drawn = True
    if not drawn:
        return _empty(ax, "no cell of several GPUs has a result")
    ax.set_xticks(sorted(counts))
    ax.set_xlabel("GPUs")
    ax.set_ylabel("tokens/s (global)")
    ax.set_title("Throughput against GPUs (dashed: linear scaling from 1 GPU)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
