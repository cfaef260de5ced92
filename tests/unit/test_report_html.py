"""report.html, profile.html and crossover.html opened in headless Chromium: what the browser built
from them (its DOM, its decoded images, its SVG layout), checked against the Markdown report and
the PNG files: every table cell, every plot, the hover texts, and no request beyond the file."""

from __future__ import annotations

import math
import re
import struct

import pytest

from fixtures.chromium import Page, executable, file_url
from fixtures.fake_runs import steps_from, tiny_config, write_ok_run

from parallax.analysis import profile as profile_table
from parallax.analysis.compare import build_comparison
from parallax.analysis.crossover import crossover
from parallax.analysis.report import crossover as crossover_report
from parallax.analysis.report import write_report
from parallax.engines.profiling import Kernel, summarize
from parallax.run import profile as profile_driver
from parallax.spec import registry, step_work
from parallax.spec.config import PRESETS, RunConfig

pytestmark = pytest.mark.skipif(executable() is None,
                                reason="chromium is not installed (scripts/ensure_system_deps.sh --tests installs it)")
pytest.importorskip("matplotlib")

TABLES = "[...document.querySelectorAll('table')].map(t => [...t.rows].map(r => [...r.cells].map(c => c.textContent)))"
IMAGES = "[...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight, i.src.slice(0, 21)])"
FETCHED = "performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('data:'))"
BARS = ("[...document.querySelectorAll('svg.chart g.cell-bar')].map(g => [g.querySelector('title').textContent, "
        "g.querySelector('rect').getBBox().width])")


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Each pipe table of ``text`` as rows of cell texts, as a reader sees them (no Markdown)."""
    tables, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
            if not all(re.fullmatch(r"\s*:?-{3,}:?\s*", c) for c in cells):
                rows.append([re.sub(r"\*\*|`", "", c.strip()).replace("\\|", "|") for c in cells])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def png_size(path) -> list[int]:
    return list(struct.unpack(">II", path.read_bytes()[16:24]))


def check_page(page_path, markdown_text: str, pngs: list) -> Page:
    """Every table cell of the Markdown and every PNG, as the browser rendered them; nothing fetched."""
    with Page(file_url(page_path)) as page:
        assert page.evaluate(TABLES) == markdown_tables(markdown_text)
        images = page.evaluate(IMAGES)
        assert [i[:3] for i in images] == [[True, *png_size(p)] for p in pngs]
        assert {i[3] for i in images} <= {"data:image/png;base64"}
        assert page.evaluate(FETCHED) == []
        return page.evaluate(BARS), page.evaluate("[...document.querySelectorAll('tr[title]')].map(r => r.title)")


def write(root, framework, precision, seed, measured_ms, **kw):
    recipe = registry.default(framework, precision).name
    run = tiny_config(framework=framework, precision=precision, recipe=recipe, seed=seed)
    steps = steps_from([500.0, 300.0] + measured_ms, [9.0, 8.0] + [3.0] * len(measured_ms), run.warmup)
    return write_ok_run(root / "runs" / f"{framework}-{recipe}-seed{seed}-rep0", run, steps, **kw)


def test_the_benchmark_report_renders_every_cell_and_plot(tmp_path):
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, peaks=(0.1, 0.1, 0.05), memory=(2**30, 2**31),
          evals=[{"step": 11, "loss": 3.2, "perplexity": math.exp(3.2)}])
    write(tmp_path, "torch", "bf16", 1, [104.0] * 10, peaks=(0.1, 0.1, 0.05), memory=(2**30, 2**31))
    write(tmp_path, "torch", "fp8", 0, [80.0] * 10, peaks=(0.2, 0.1, None))
    write(tmp_path, "jax", "bf16", 0, [90.0, 110.0] * 5)
    record = build_comparison(tmp_path, n_boot=200)
    written = write_report(record, tmp_path / "out" / "report.md")
    assert written["html"] == tmp_path / "out" / "report.html"
    pngs = [p for k, p in written.items() if k.startswith("plot_")]
    assert len(pngs) == 4  # loss, throughput, memory, MFU
    bars, row_titles = check_page(written["html"], written["report"].read_text(), pngs)
    cells = [c for c in record["cells"] if c["tokens_per_s"]]
    assert len(bars) == len(cells) == 3 and all(width > 0 for _, width in bars)
    for cell, (tooltip, _) in zip(cells, bars):
        low, high = cell["tokens_per_s"]["ci"]
        assert f"{cell['n_ok']} of {cell['n_runs']} runs ok" in tooltip
        assert f"tokens/s {cell['tokens_per_s']['value']:,.0f} (95% CI {low:,.0f}–{high:,.0f})" in tooltip
    assert "2 of 2 runs ok" in bars[0][0]  # torch bf16: two seeds
    # each table row of a cell (throughput, loss, stacks, FLOPs) tells its interval and runs on hover
    assert row_titles.count(bars[0][0].split(": ", 1)[1]) == 6  # stacks, throughput, loss, 3 FLOPs accountings


def profile_record() -> dict:
    model, recipe = PRESETS["llama-100m"], registry.get("torch", "te-fp8-delayed")
    kernels, t = [], 0.0
    for name, us in (("nvjet_sm90_qqtst_256x128_128x4_1x2_h_bz_coopA_TNT", 20_000.0),
                     ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64", 4_000.0),
                     ("triton_poi_fused__to_copy_add_mul_neg_slice_unbind_unsqueeze_view_0", 10_000.0)):
        kernels.append(Kernel(name, us, None, t, t + us))
        t += us
    limit = {"value": 1000.0, "source": "measured now: cuBLASLt"}
    return profile_table.build_record(
        title="torch te-fp8-delayed", config=RunConfig(recipe="te-fp8-delayed", precision=None).to_dict(),
        recipe=recipe.to_dict(),
        framework={"name": "torch", "device": "cuda:0", "attention": "cudnn", "compiled": False},
        environment={"hostname": "h200-a", "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-aaaa1111"}]},
        timing={"step_ms": 40.0, "tokens_per_s": 32768 / 40.0 * 1e3, "warmup_steps": 15, "timed_steps": 5,
                "profiled_steps": 1, "method": "host clock"},
        on_gpu=True, summary=summarize(kernels, steps=1), work=step_work.step_work(model, 32, 1024, recipe),
        limits={"gemm": {"fp8": limit, "bf16": limit}, "hbm": {"value": 4.8e12, "source": "datasheet"},
                "attention": {"forward": limit, "backward": limit, "rates": []}}, notes=[])


def test_the_profile_page_renders_its_table_and_bars(tmp_path):
    paths = profile_driver.write(profile_record(), tmp_path)
    check_page(paths["html"], paths["md"].read_text(), [paths["png"]])


def test_the_crossover_page_renders_its_table_and_plot(tmp_path):
    for root, model, fp8_ms in ((tmp_path / "small", "tiny", 125.0), (tmp_path / "large", "llama-330m", 80.0)):
        for recipe, fmt, ms in (("bf16", "bf16", 100.0), ("torchao-fp8-tensorwise", "fp8", fp8_ms)):
            run = tiny_config(model=model, framework="torch", precision=fmt, recipe=recipe, seq_len=32)
            steps = steps_from([500.0, 300.0] + [ms] * 10, [9.0, 8.0] + [3.0] * 10, run.warmup)
            write_ok_run(root / "runs" / f"torch-{recipe}-seed0-rep0", run, steps)
    record = crossover([tmp_path / "small", tmp_path / "large"], 200, 0.95)
    paths = crossover_report.write(record, tmp_path / "out")
    check_page(paths["html"], paths["report"].read_text(), [paths["plot"]])
