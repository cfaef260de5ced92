"""scripts/device/ceiling_crosscheck.py end to end on a real GPU, at a small size (run on the device)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device" / "ceiling_crosscheck.py"


def test_crosscheck_measures_every_way_and_writes_json(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    spec = importlib.util.spec_from_file_location("ceiling_crosscheck", SCRIPT)
    cc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cc)
    monkeypatch.setenv("OUT", str(tmp_path))
    assert cc.main(["--size", "1024", "--warmup", "2", "--iters", "20", "--long-iters", "60", "--rest-s", "0"]) == 0

    result = json.loads((tmp_path / "ceiling_crosscheck.json").read_text())
    rows = result["measurements"]
    assert [(r["name"], r["warmup"], r["iters"]) for r in rows] == [
        (name, w, i)
        for name in ("torch.matmul", "F.linear", "native tuned", "native heuristic-first")
        for w, i in ((3, 10), (2, 20))
    ] + [("torch.matmul long", 2, 60)]
    for row in rows:
        assert row.get("error") is None, row.get("error")
        assert 0 < row["tflops_median"] <= row["tflops_best"]
    assert all(len(r["times_ms"]) == r["iters"] for r in rows if not r["name"].startswith("native"))
    assert rows[4]["native"]["algos_tried"] == rows[4]["native"]["algo_count"] >= 1
    assert rows[6]["native"]["algo_index"] == 0 and rows[6]["native"]["algos_tried"] == 0
    assert result["verdict"]["native_median_tflops"] == rows[5]["tflops_median"]
    assert result["verdict"]["reference_tflops"] == rows[0]["tflops_mean"]
    assert capsys.readouterr().out.strip().splitlines()[-2].startswith("issue 2: native sustained median")
