"""scripts/device/quant_bench.py's bound of each implementation's own passes, on the H200's
2026-12-04 figures (no GPU): the default 1x16 reads x twice, so its bound is the copy's time
x 6/4, and it sits at 91% (x768) and 83% (x2048) of it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench():
    spec = importlib.util.spec_from_file_location("quant_bench", ROOT / "scripts/device/quant_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(variant, shape, impl, ms):
    return {"variant": variant, "shape": list(shape), "impl": impl, "ms": ms, "call_ms": ms + 0.004}


ROWS = [row("copy", (32768, 768), "torch_copy", 0.0285), row("copy", (32768, 2048), "torch_copy", 0.0651),
        row("1x16", (32768, 768), "native", 0.0470), row("1x16", (32768, 2048), "native", 0.1172),
        row("1x16", (32768, 768), "native_1r", 0.0466), row("1x16", (32768, 768), "torch_compile", 0.1176),
        row("parts-sr", (32768, 2304), "split_cat", 0.5264)]


def test_each_kernel_against_the_bound_of_its_own_passes():
    b = bench()
    copies = b.copy_bandwidths(ROWS)
    assert copies[(32768, 768)] == pytest.approx(4 * 32768 * 768 / 0.0285e-3)  # 3.532 TB/s
    found = {(r["impl"], r["shape"][1]): b.own_bound(r, copies) for r in ROWS}
    native = found[("native", 768)]  # 6 B an element at the copy's 4 B in 0.0285 ms: 0.04275 ms
    assert native["bytes_per_element"] == 6 and native["passes"].startswith("2 passes")
    assert native["bound_ms"] == pytest.approx(0.0285 * 6 / 4) and native["copy_at"] == "this shape"
    assert native["pct_of_bound"] == pytest.approx(100 * 0.04275 / 0.0470)  # 91.0%
    assert found[("native", 2048)]["pct_of_bound"] == pytest.approx(100 * 0.0651 * 1.5 / 0.1172)  # 83.3%
    assert found[("native_1r", 768)]["pct_of_bound"] == pytest.approx(100 * 0.0285 / 0.0466)  # one read: 61.2%
    assert found[("torch_compile", 768)]["bytes_per_element"] == 4  # not its own passes: at least one
    assert found[("torch_copy", 2048)]["pct_of_bound"] == pytest.approx(100.0)
    split = found[("split_cat", 2304)]  # no copy at 2304 columns: the fastest copy measured (x2048)
    assert split["copy_at"] == "the fastest copy measured" and split["bytes_per_element"] == 14
    assert split["bound_ms"] == pytest.approx(14 * 32768 * 2304 / (4 * 32768 * 2048 / 0.0651e-3) * 1e3)


def test_without_a_copy_row_there_is_no_bound():
    b = bench()
    assert b.own_bound(ROWS[2], {})["pct_of_bound"] is None


def test_the_table_shows_the_bound_and_each_impl_s_passes():
    b = bench()
    rows = b.annotate([{**r, "gb_s": 1.0, "pct_h200": 1.0, "identical_to_native": 1.0} for r in ROWS])
    text = b.render(rows)
    assert "   91.0%" in text and "   83.3%" in text
    assert "  native: 2 passes: amax reads x (2 B), quantize reads x and writes y (4 B)" in text
