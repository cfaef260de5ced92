"""Reports as one HTML file that opens in any browser with no network: ``report.html`` beside
``report.md`` (``parallax benchmark --report``, ``parallax compare --output-report``),
``profile.html`` (``parallax profile``) and ``crossover.html`` (``parallax crossover``).

The page is the Markdown report itself, turned into HTML here (the renderers write one
GitHub-flavoured subset: headings, pipe tables, lists, paragraphs, bold, code and images), so
the two never disagree: every table is there, and every plot, its PNG inlined as base64.
Nothing is fetched: the CSS is inline, there is no script. Where it helps, hovering shows more:
a benchmark's table rows name their cell's interval and run count (``title``), and an inline SVG
chart of tokens/s has one bar per cell whose tooltip (SVG ``<title>``) gives the same."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from parallax.analysis.report.format import gpus_text, precision_label, several_gpus
from parallax.store.results import atomic_write_text

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } tr[title]:hover td { background: #eef4ff; cursor: help; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { background: #f5f5f5; padding: 0 3px; border-radius: 3px; font-size: 12px; }
img.plot { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
svg.chart rect.bar:hover { fill: #2a4d8a; } svg.chart text { font: 11px system-ui, sans-serif; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: 12px; }
"""

TABLE_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")
IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")
NUMBERED = re.compile(r"^\d+\. ")
CELL_SPLIT = re.compile(r"(?<!\\)\|")
NUMBER = re.compile(r"^[-+−]?[\d,.]+(\s?[%×x]|\s?ms|\s?GiB)?(\s.*)?$")


def page(title: str, body: str) -> str:
    """A whole self-contained HTML document."""
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def from_markdown(text: str, base_dir: Path, row_titles: dict[tuple[str, ...], str] | None = None) -> str:
    """The HTML body of Markdown ``text``; images are read relative to ``base_dir`` and inlined.
    A table row whose first cells are a key of ``row_titles`` gets that text as its tooltip."""
    out, block = [], []
    for line in text.splitlines() + [""]:
        if line.strip():
            block.append(line)
            continue
        if block:
            out.append(_block(block, Path(base_dir), row_titles or {}))
            block = []
    return "\n".join(out)


def _block(lines: list[str], base_dir: Path, row_titles: dict) -> str:
    if len(lines) >= 2 and lines[0].startswith("|") and TABLE_SEPARATOR.match(lines[1].strip()):
        return table(lines, row_titles)
    parts, paragraph = [], []
    for line in lines:
        heading = re.match(r"^(#{1,6}) (.*)$", line)
        image = IMAGE.match(line.strip())
        if heading or image or line.startswith("- ") or NUMBERED.match(line):
            parts.append(_paragraph(paragraph))
            paragraph = []
        if heading:
            level = len(heading[1])
            parts.append(f"<h{level}>{inline(heading[2])}</h{level}>")
        elif image:
            parts.append(image_html(base_dir / image[2], image[1]))
        elif line.startswith("- "):
            parts.append(("<ul>", line[2:]))
        elif NUMBERED.match(line):
            parts.append(("<ol>", NUMBERED.sub("", line)))
        else:
            paragraph.append(line)
    parts.append(_paragraph(paragraph))
    return _lists([p for p in parts if p])


def _paragraph(lines: list[str]) -> str:
    return f"<p>{inline(' '.join(l.strip() for l in lines))}</p>" if lines else ""


def _lists(parts: list) -> str:
    """Consecutive list items ('<ul>' or '<ol>', text) as one list; everything else as it is."""
    out, kind = [], None
    for part in parts:
        item = isinstance(part, tuple)
        if kind and (not item or part[0] != kind):
            out.append(f"</{kind[1:]}")
            kind = None
        if item:
            if kind is None:
                kind = part[0]
                out.append(kind)
            out.append(f"<li>{inline(part[1])}</li>")
        else:
            out.append(part)
    if kind:
        out.append(f"</{kind[1:]}")
    return "\n".join(out)


def inline(text: str) -> str:
    """Escaped text with the Markdown of our reports: ``code``, **bold**, \\| for a bar."""
    pieces = re.split(r"(`[^`]*`)", text.replace("\\|", "|"))
    out = []
    for piece in pieces:
        if len(piece) >= 2 and piece.startswith("`") and piece.endswith("`"):
            out.append(f"<code>{html.escape(piece[1:-1])}</code>")
        else:
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(piece)))
    return "".join(out)


def cells_of(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.strip() for c in CELL_SPLIT.split(line)]


def table(lines: list[str], row_titles: dict) -> str:
    header = cells_of(lines[0])
    rows = ["<tr>" + "".join(f"<th>{inline(c)}</th>" for c in header) + "</tr>"]
    for line in lines[2:]:
        cells = cells_of(line)
        title = next((t for key, t in row_titles.items() if tuple(cells[:len(key)]) == key), None)
        attr = f' title="{html.escape(title)}"' if title else ""
        rows.append(f"<tr{attr}>" + "".join(_td(c) for c in cells) + "</tr>")
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _td(cell: str) -> str:
    return f'<td class="num">{inline(cell)}</td>' if NUMBER.match(cell) else f"<td>{inline(cell)}</td>"


def image_html(path: Path, caption: str) -> str:
    """The PNG at ``path`` inlined, with its caption; a line saying so where it is missing."""
    try:
        data = base64.b64encode(Path(path).read_bytes()).decode()
    except OSError:
        return f"<p><em>{html.escape(caption)}: plot {html.escape(str(path))} not found</em></p>"
    return (f'<figure><img class="plot" alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def bar_chart(bars: list[dict], title: str, unit: str) -> str:
    """An inline SVG bar chart: one bar per ``{label, value, low, high, tooltip}`` with its
    interval as a whisker; hovering a bar shows its ``tooltip``."""
    if not bars:
        return ""
    width, row, left, right = 900, 26, 260, 90
    top = max(b["high"] if b.get("high") is not None else b["value"] for b in bars) or 1.0
    scale = (width - left - right) / top
    height = row * len(bars) + 30
    parts = [f'<svg class="chart" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{html.escape(title)}</title>']
    for i, b in enumerate(bars):
        y = 10 + i * row
        parts.append(f'<g class="cell-bar"><title>{html.escape(b["tooltip"])}</title>'
                     f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{html.escape(b["label"])}</text>'
                     f'<rect class="bar" x="{left}" y="{y + 3}" width="{max(b["value"] * scale, 1):.1f}" '
                     f'height="{row - 8}" fill="#4c72b0"></rect>')
        if b.get("low") is not None and b.get("high") is not None:
            x0, x1, mid = left + b["low"] * scale, left + b["high"] * scale, y + 3 + (row - 8) / 2
            parts.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{mid:.1f}" y2="{mid:.1f}" stroke="#000"></line>')
        parts.append(f'<text x="{left + max(b["value"] * scale, 1) + 6:.1f}" y="{y + 15}">'
                     f'{b["value"]:,.0f} {html.escape(unit)}</text></g>')
    parts.append("</svg>")
    return f"<figure>{''.join(parts)}<figcaption>{html.escape(title)}</figcaption></figure>"


def write(path: Path, title: str, body: str) -> Path:
    atomic_write_text(Path(path), page(title, body))
    return Path(path)


def write_markdown_page(path: Path, title: str, markdown_text: str, plots: dict[str, Path] | None = None) -> Path:
    """``path``: the Markdown page as HTML, then each of ``plots`` ({caption: PNG}) that the
    Markdown does not show itself."""
    path = Path(path)
    body = from_markdown(markdown_text, path.parent)
    extra = [image_html(p, caption) for caption, p in (plots or {}).items()]
    return write(path, title, body + ("\n<h2>Plots</h2>\n" + "\n".join(extra) if extra else ""))


# ----------------------------------------------------------------------------- a benchmark's report

def comparison_page(record: dict, markdown_text: str, path: Path) -> Path:
    """``report.html`` of a comparison record: its Markdown report with a tooltip on each cell's
    table rows, and the chart of tokens/s per cell before the plots."""
    path = Path(path)
    body = from_markdown(markdown_text, path.parent, cell_titles(record))
    chart = bar_chart(throughput_bars(record), "Tokens/s per cell (whiskers: 95% CI; hover a bar for its interval "
                      "and runs)", "tokens/s")
    if chart:
        section = "<h2>Throughput per cell</h2>\n" + chart
        at = body.find("<h2>Plots</h2>")
        body = body[:at] + section + "\n" + body[at:] if at >= 0 else body + "\n" + section
    return write(path, "Parallax benchmark report", body)


def cell_tooltip(cell: dict) -> str:
    """'2 of 2 runs ok · tokens/s 1,234 (95% CI 1,200–1,260) · step 103.1 ms median'."""
    parts = [f"{cell['n_ok']} of {cell['n_runs']} runs ok"]
    tps = cell.get("tokens_per_s")
    if tps:
        low, high = tps["ci"]
        parts.append(f"tokens/s {tps['value']:,.0f} (95% CI {low:,.0f}–{high:,.0f})")
    if cell.get("step_ms"):
        step = cell["step_ms"]
        parts.append(f"step {step['median']:.4g} ms median (p10–p90 {step['p10']:.4g}–{step['p90']:.4g})")
    final = cell.get("final_loss") or {}
    if final.get("value") is not None and final.get("ci"):
        parts.append(f"final loss {final['value']:.4f} (95% CI {final['ci'][0]:.4f}–{final['ci'][1]:.4f})")
    return " · ".join(parts)


def cell_titles(record: dict) -> dict[tuple[str, ...], str]:
    """{(framework, precision label[, GPUs]): tooltip}: the first cells of a cell's table rows."""
    several = several_gpus(record)
    return {(c["framework"], precision_label(c), *([str(c.get("gpus") or 1)] if several else [])): cell_tooltip(c)
            for c in record["cells"]}


def throughput_bars(record: dict) -> list[dict]:
    bars = []
    for c in record["cells"]:
        tps = c.get("tokens_per_s")
        if tps:
            label = f"{c['framework']} {precision_label(c)}{gpus_text(c.get('gpus'))}"
            bars.append({"label": label, "value": tps["value"], "low": tps["ci"][0], "high": tps["ci"][1],
                         "tooltip": f"{label}: {cell_tooltip(c)}"})
    return bars
