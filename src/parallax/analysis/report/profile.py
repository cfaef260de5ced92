"""``parallax profile``'s files from its record (``analysis/profile.py``): profile.md (what ran,
then one table), profile.png (ms per class, the time at the limit marked), and for ``--compare``
profile_compare.md and profile_compare.png."""

from __future__ import annotations

from pathlib import Path

from parallax.analysis import comparability
from parallax.analysis.profile import HOST_GAPS, OVERLAP, OWN
from parallax.analysis.report.format import NA, num, pct
from parallax.analysis.report.plots import save_figure
from parallax.errors import require_module

TOP = 15  # kernels listed under the table


def markdown(record: dict) -> str:
    lines = [f"# Where the step goes: {record['title']}", "", *header(record), "", *table(record), ""]
    lines += _kernels(record)
    return "\n".join(lines) + "\n"


def header(record: dict) -> list[str]:
    config, fw, timing, busy = record["config"], record["framework"], record["timing"], record["busy"]
    tokens = config["batch_size"] * config["seq_len"]
    env = record.get("environment") or {}
    driver = comparability.machine(record)["driver"]
    lines = [f"- machine: {comparability.machine_label(record)}, host {env.get('hostname') or NA}"
             + (f", driver {driver}" if driver else ""),
             f"- ran: {config['model']}, batch {config['batch_size']} × seq {config['seq_len']} ({tokens:,} tokens a "
             f"step), recipe {record['recipe']['name']} ({record['recipe']['format']}) on {fw['name']} "
             f"{fw.get('version') or fw.get('maxtext') or ''}".rstrip(),
             f"- attention: {_attention(fw, record['on_gpu'])}; compiled: {_compiled(fw)}"
             + (f"; CUDA graphs: {fw.get('graph_scope') or 'on'}" if fw.get("cuda_graphs") else ""),
             f"- data: {fw.get('data') or ('synthetic tokens' if config.get('synthetic') else config.get('data'))}",
             f"- step: {timing['step_ms']:.3f} ms without the profiler ({timing['tokens_per_s']:,.0f} tokens/s; "
             f"{timing['timed_steps']} steps after {timing['warmup_steps']} warm-up, {timing['method']}); "
             f"profiled: the next {busy['profiled_steps']} steps, {busy['events_per_step']:,.0f} "
             f"{'kernels' if record['on_gpu'] else 'CPU operators'} a step",
             f"- busy: {busy['ms_per_step']:.3f} ms a step ({busy['method']}); host gaps = step − busy"]
    return lines + _limit_lines(record) + [f"- note: {n}" for n in record.get("notes") or []]


def _attention(fw: dict, on_gpu: bool) -> str:
    """The backend that ran, and on a GPU those the engine tried first that refused this shape."""
    refused = (fw.get("attention_refused") or {}) if on_gpu else {}
    return (fw.get("attention") or NA) + "".join(f" ({name} refused: {why})" for name, why in refused.items())


def _compiled(fw: dict) -> str:
    if not fw.get("compiled"):
        return "no (eager)"
    return fw.get("compile_scope") or fw.get("compiler") or fw.get("compile_mode") or "yes"


def _limit_lines(record: dict) -> list[str]:
    limits = record["limits"]
    if not record["on_gpu"]:
        return ["- limits: n/a on the CPU (no GPU: the CPU operators were profiled, and no class has a limit here)"]
    gemm = "; ".join(f"{fmt}: {_value(lim['value'], ' TFLOP/s')} ({lim['source']})" for fmt, lim in limits["gemm"].items())
    attention = limits["attention"]
    return [f"- GEMM limits: {gemm}",
            *(f"- attention {d} limit: {_value(attention[d]['value'], ' TFLOP/s')} ({attention[d]['source']})"
              for d in ("forward", "backward")),
            f"- memory-bound limit: HBM {_value(_tb(limits['hbm']['value']), ' TB/s')} ({limits['hbm']['source']}); "
            "bytes from the byte model of parallax.spec.step_work",
            *(f"- {row['class']} limit: {row['limit_source']}" for row in record["classes"]
              if str(row.get("limit_source") or "").startswith(OWN))]


def _tb(value):
    return None if value is None else value / 1e12


def _value(value, unit: str) -> str:
    return NA if value is None else num(value, unit)


def table(record: dict) -> list[str]:
    lines = ["| class | ms/step | share | work/step | achieved | limit | of limit | ms at limit | ms left |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in record["classes"]:
        if row["class"] not in (HOST_GAPS, OVERLAP) and not row["ms_per_step"] and not row["work"]:
            continue  # a class with neither time nor work: nothing to say
        lines.append("| " + " | ".join(_cells(row, record["on_gpu"])) + " |")
    step = record["timing"]["step_ms"]
    lines.append(f"| step (without the profiler) | {step:.3f} | 100.0% | | | | | | |")
    return lines


def _cells(row: dict, on_gpu: bool) -> list[str]:
    unit = row["unit"] or ""
    work = _work(row)
    limit = NA if row["limit"] is None else f"{num(row['limit'], ' ' + unit)} ({_kind(row['limit_source'])})"
    if row["work"] is not None and not on_gpu:
        limit = "n/a on the CPU"
    if row["work"] is None:
        work = limit = ""
    return [row["class"], f"{row['ms_per_step']:.3f}", pct(row["share"]), work,
            "" if row["work"] is None else _value(row["achieved"], " " + unit), limit,
            "" if row["work"] is None else pct(row["fraction"]),
            "" if row["work"] is None else _ms(row["ms_at_limit"]), "" if row["work"] is None else _ms(row["ms_left"])]


def _work(row: dict) -> str:
    """A class's work a step: TFLOP, or GB of the byte model."""
    if row["work"] is None:
        return NA
    return num(row["work"] / 1e12, " TFLOP") if row["unit"] == "TFLOP/s" else num(row["work"] / 1e9, " GB")


def _kind(source: str | None) -> str:
    """'measured', 'measured now', 'datasheet', 'unknown': a limit's source in one word or two."""
    return (source or NA).split(":", 1)[0]


def _ms(value) -> str:
    return NA if value is None else f"{value:.3f}"


def _kernels(record: dict) -> list[str]:
    kernels = record["top_kernels"][:TOP]
    if not kernels:
        return ["No kernel events in the profiled steps."]
    what = "kernels" if record["on_gpu"] else "CPU operators"
    lines = [f"Top {len(kernels)} {what} by time:", "", "| # | name | class | ms/step | share | calls/step |",
             "|---:|---|---|---:|---:|---:|"]
    for i, k in enumerate(kernels, 1):
        name = k["name"].replace("|", "\\|")
        lines.append(f"| {i} | `{name}` | {k['class']} | {k['ms_per_step']:.3f} | {pct(k['share'])} | "
                     f"{k['calls_per_step']:g} |")
    return lines


# ----------------------------------------------------------------------------- plots

def write_plot(record: dict, path: Path) -> Path:
    """Horizontal bars of ms per class (host gaps included), a black tick at each class's time
    at its limit."""
    rows = [r for r in record["classes"] if r["ms_per_step"] > 0 and r["class"] != OVERLAP]

    def draw(ax):
        names = [r["class"] for r in rows][::-1]
        ms = [r["ms_per_step"] for r in rows][::-1]
        ax.barh(names, ms, color=["#999999" if n == HOST_GAPS else "#4477aa" for n in names])
        for y, r in enumerate(rows[::-1]):
            if r["ms_at_limit"] is not None:
                ax.plot([r["ms_at_limit"]] * 2, [y - 0.4, y + 0.4], color="black", linewidth=2)
        ax.set_xlabel("ms per step (black: the time at the class's limit)")
        ax.set_title(f"{record['title']}: {record['timing']['step_ms']:.2f} ms a step", fontsize=10)
        ax.grid(axis="x", alpha=0.3)

    return _save(draw, path, len(rows))


def write_compare_plot(compared: dict, path: Path) -> Path:
    """Grouped horizontal bars: each class's ms per step (host gaps included) in every profile."""
    rows = [r for r in compared["rows"][2:] if r["class"] != OVERLAP and any(m > 0 for m in r["ms_per_step"])]
    titles = [p["title"] for p in compared["profiles"]]
    steps = compared["rows"][0]["ms_per_step"]  # the step without the profiler; then busy; then the classes

    def draw(ax):
        height = 0.8 / len(titles)
        for i, title in enumerate(titles):
            ys = [len(rows) - 1 - j + (len(titles) / 2 - i - 0.5) * height for j in range(len(rows))]
            ax.barh(ys, [r["ms_per_step"][i] for r in rows], height=height, label=title)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r["class"] for r in rows][::-1])
        ax.set_xlabel("ms per step")
        ax.set_title(" vs ".join(f"{t} {ms:.2f} ms" for t, ms in zip(titles, steps)), fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="x", alpha=0.3)

    return _save(draw, path, len(rows))


def _save(draw, path: Path, bars: int) -> Path:
    require_module("matplotlib", "report")
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    return save_figure(draw, path, (8, 1.5 + 0.4 * max(bars, 1)))


# ----------------------------------------------------------------------------- comparing

def compare_markdown(compared: dict) -> str:
    titles = [p["title"] for p in compared["profiles"]]
    head = ("| | " + " | ".join(titles) + " | " + " | ".join(f"{t} − {titles[0]}" for t in titles[1:])
            + " | " + " | ".join(f"of limit, {t}" for t in titles) + " |")
    rule = "|---|" + "---:|" * (3 * len(titles) - 1)
    lines = [f"# Where the step goes: {' vs '.join(titles)}", ""]
    lines += [f"- {p['title']}: {p['path']}, on {p['machine']}" for p in compared["profiles"]]
    lines += ["", "ms per step (share of that profile's step):", "", head, rule]
    for row in compared["rows"]:
        cells = [f"{m:.3f} ({pct(s)})" for m, s in zip(row["ms_per_step"], row["share"])]
        cells += [f"{d:+.3f}" for d in row["delta_ms"]] + [pct(f) if f is not None else "" for f in row["fraction"]]
        lines.append(f"| {row['class']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
