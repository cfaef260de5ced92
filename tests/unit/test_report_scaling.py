"""Cells of several GPU counts in one matrix: the scaling table, and speedups and ΔLoss that
compare like with like, against run files written by the real result writer with known numbers."""

from __future__ import annotations

import csv
import io
import json

import pytest
from rich.console import Console

from fixtures.fake_runs import tiny_config
from fixtures.parallel_runs import write_parallel_run, write_single_run

from parallax.analysis.compare import CELL_DIR, build_comparison, environment_summary
from parallax.errors import ParallaxError
from parallax.spec.flops import flops_per_token
from parallax.spec.config import get_preset
from parallax.analysis.report import export, markdown, terminal, write_report
from parallax.store.results import atomic_write_json, write_run

TOKENS = 4 * 32  # per GPU per step: tiny_config's batch 4 × seq 32
WARMUP = [500.0, 300.0]
GIB = 2**30
PEAKS = (0.02, 0.02, None)  # TFLOP/s of one (imaginary) GPU, so that the tiny model's MFU is about 50%
SPEC = flops_per_token(get_preset("tiny"), 32)["spec"]


def losses(tail: float) -> list[float]:
    return [9.0, 8.0] + [tail] * 10


def config(framework, recipe, precision, seed=0):
    return tiny_config(framework=framework, precision=precision, recipe=recipe, seed=seed)


def write_cell(root, framework, recipe, precision, gpus, rank_ms, tail, peaks=PEAKS, **kw):
    """A matrix run folder of one cell; ``rank_ms`` each rank's measured step time."""
    run = config(framework, recipe, precision)
    name = f"{framework}-{recipe}" + (f"-g{gpus}" if gpus > 1 else "") + "-seed0-rep0"
    if gpus == 1:
        return write_single_run(root / "runs" / name, run, WARMUP + [rank_ms[0]] * 10, losses(tail),
                                GIB, peaks=peaks)
    return write_parallel_run(root / "runs" / name, run, gpus, [WARMUP + [ms] * 10 for ms in rank_ms],
                              losses(tail), kw.pop("peak_allocated", [GIB] * gpus), peaks=peaks, **kw)


@pytest.fixture
def matrix(tmp_path):
    """torch bf16 on 1 and 2 GPUs, torch fp8 on 1 and 2, jax bf16 on 2 only.

    Per-GPU batch 4: the 2-GPU cells train on a global batch of 8. Ranks differ: the slowest
    one sets each step's time."""
    write_cell(tmp_path, "torch", "bf16", "bf16", 1, [100.0], 3.0)
    write_cell(tmp_path, "torch", "bf16", "bf16", 2, [100.0, 110.0], 2.9, peak_allocated=[GIB, GIB + GIB // 4])
    write_cell(tmp_path, "torch", "te-fp8-delayed", "fp8", 1, [80.0], 3.1)
    write_cell(tmp_path, "torch", "te-fp8-delayed", "fp8", 2, [96.0, 90.0], 2.95)
    write_cell(tmp_path, "jax", "bf16", "bf16", 2, [105.0, 100.0], 2.92)
    return tmp_path


def cell(record, framework, recipe, gpus):
    return next(c for c in record["cells"] if (c["framework"], c["recipe"], c["gpus"]) == (framework, recipe, gpus))


def group(record, framework, recipe):
    return next(g for g in record["scaling"] if (g["framework"], g["recipe"]) == (framework, recipe))


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table under ``heading`` (a whole Markdown heading line)."""
    section = text.split(f"{heading}\n", 1)[1].split("\n#", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")][2:]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]


# ----------------------------------------------------------------------------- the record

def test_cells_are_keyed_by_gpu_count_with_global_and_per_gpu_figures(matrix):
    r = build_comparison(matrix, n_boot=300)
    assert [(c["framework"], c["recipe"], c["gpus"]) for c in r["cells"]] == [
        ("torch", "bf16", 1), ("torch", "bf16", 2), ("jax", "bf16", 2),
        ("torch", "te-fp8-delayed", 1), ("torch", "te-fp8-delayed", 2)]
    one, two = cell(r, "torch", "bf16", 1), cell(r, "torch", "bf16", 2)
    assert one["tokens_per_step"] == TOKENS and two["tokens_per_step"] == 2 * TOKENS
    assert one["tokens_per_s"] == {"value": 1280.0, "ci": [1280.0, 1280.0]}
    assert one["tokens_per_s_per_gpu"]["value"] == 1280.0
    assert two["step_ms"]["median"] == 110.0  # the slower rank
    assert two["tokens_per_s"]["value"] == pytest.approx(256_000 / 110)
    assert two["tokens_per_s_per_gpu"]["value"] == pytest.approx(128_000 / 110)
    assert two["memory"] == {"peak_allocated_bytes": GIB + GIB // 4, "peak_reserved_bytes": 2 * (GIB + GIB // 4)}
    spec = two["flops"]["spec"]
    assert spec["tflops"] == pytest.approx(128_000 / 110 * SPEC / 1e12)  # per GPU
    assert spec["tflops_all_gpus"] == pytest.approx(256_000 / 110 * SPEC / 1e12)
    assert spec["mfu_precision_peak"] == pytest.approx(128_000 / 110 * SPEC / 1e12 / 0.02)
    assert two["parallel"] == {
        "gpus": 2, "processes": 2, "hosts": 1, "sharding": "ddp", "per_gpu_batch": 4, "global_batch": 8,
        "launcher": "torch.distributed.run", "backend": "nccl",
        "per_rank": [{"rank": 0, "host": "node0", "device": "cuda:0", "step_ms_median": 100.0,
                      "peak_allocated_bytes": GIB},
                     {"rank": 1, "host": "node0", "device": "cuda:1", "step_ms_median": 110.0,
                      "peak_allocated_bytes": GIB + GIB // 4}],
        "rank_step_ms_spread": pytest.approx(1.1)}
    assert one["parallel"]["launcher"] == "single" and one["parallel"]["per_rank"][0]["step_ms_median"] == 100.0
    assert r["config"]["batch_size"] == 4 and r["config"]["sharding"] == "ddp" and "gpus" not in r["config"]


def test_scaling_efficiency_against_the_one_gpu_cell(matrix):
    r = build_comparison(matrix, n_boot=300)
    bf16 = group(r, "torch", "bf16")
    assert (bf16["precision"], bf16["baseline_gpus"], bf16["note"]) == ("bf16", 1, None)
    one, two = bf16["rows"]
    assert (one["gpus"], one["global_batch"], one["per_gpu_batch"]) == (1, 4, 4)
    assert one["efficiency"]["value"] == 1.0
    assert (two["gpus"], two["global_batch"], two["sharding"], two["launcher"]) == (2, 8, "ddp",
                                                                                   "torch.distributed.run")
    # tokens/s(2) / (2 × tokens/s(1)) = (256/110) / (2 · 128/100) = 100/110
    assert two["efficiency"]["value"] == pytest.approx(100 / 110)
    assert two["efficiency"]["ci"] == pytest.approx([100 / 110, 100 / 110])
    assert two["efficiency"]["below_ideal"] is True
    assert two["tokens_per_s_per_gpu"]["value"] == pytest.approx(128_000 / 110)
    assert two["peak_allocated_bytes_per_gpu"] == GIB + GIB // 4
    assert two["step_ms_median"] == 110.0 and two["rank_step_ms_spread"] == pytest.approx(1.1)
    assert two["mfu_per_gpu"] == pytest.approx(128_000 / 110 * SPEC / 1e12 / 0.02)
    fp8 = group(r, "torch", "te-fp8-delayed")
    assert fp8["rows"][1]["efficiency"]["value"] == pytest.approx(80 / 96)


def test_no_one_gpu_cell_means_no_efficiency_and_says_so(matrix):
    r = build_comparison(matrix, n_boot=300)
    jax = group(r, "jax", "bf16")
    assert jax["baseline_gpus"] is None
    assert jax["note"] == "no 1-GPU cell of jax bf16 in this matrix: no scaling efficiency (add 1 to --gpus)"
    (row,) = jax["rows"]
    assert row["gpus"] == 2 and row["efficiency"] is None
    assert row["tokens_per_s"]["value"] == pytest.approx(256_000 / 105)


def test_a_one_gpu_cell_without_a_result_gives_no_efficiency(matrix):
    failed = config("jax", "bf16", "bf16")
    write_run(matrix / "runs" / "jax-bf16-seed0-rep0",
              {"status": "oom", "error": "CUDA out of memory", "config": failed.to_dict()})
    jax = group(build_comparison(matrix, n_boot=300), "jax", "bf16")
    assert jax["note"] == "the 1-GPU cell of jax bf16 has no throughput (oom): no scaling efficiency"
    assert [(row["gpus"], row["status"], row["efficiency"]) for row in jax["rows"]] == [(1, "oom", None),
                                                                                       (2, "ok", None)]


def test_speedups_and_loss_deltas_never_mix_gpu_counts(matrix):
    r = build_comparison(matrix, n_boot=300)
    by_label = {s["label"]: s for s in r["speedups"]}
    assert set(by_label) == {"torch: te-fp8-delayed over bf16", "torch ×2 GPUs: te-fp8-delayed over bf16",
                             "bf16 ×2 GPUs: jax over torch"}
    assert by_label["torch: te-fp8-delayed over bf16"]["ratio"] == pytest.approx(100 / 80)
    assert by_label["torch ×2 GPUs: te-fp8-delayed over bf16"]["ratio"] == pytest.approx(110 / 96)
    assert by_label["torch ×2 GPUs: te-fp8-delayed over bf16"]["gpus"] == 2
    assert by_label["bf16 ×2 GPUs: jax over torch"]["ratio"] == pytest.approx(110 / 105)
    deltas = {d["gpus"]: d for d in r["loss_deltas"]}
    assert set(deltas) == {1, 2}
    assert deltas[1]["delta"] == pytest.approx(0.1)    # 3.1 − 3.0
    assert deltas[2]["delta"] == pytest.approx(0.05)   # 2.95 − 2.9: the 2-GPU bf16 cell, not the 1-GPU one
    fastest = {(e["precision"], e["gpus"]): e for e in r["conclusions"]["fastest"]}
    assert set(fastest) == {("bf16", 1), ("bf16", 2), ("fp8", 1), ("fp8", 2)}
    assert (fastest[("bf16", 2)]["framework"], fastest[("bf16", 2)]["runner_up"]) == ("jax", "torch bf16")


def test_results_without_a_parallel_record_read_as_one_gpu(tmp_path):
    from fixtures.fake_runs import steps_from, write_ok_run

    run = config("torch", "bf16", "bf16")
    write_ok_run(tmp_path / "runs" / "torch-bf16-seed0-rep0", run,
                 steps_from(WARMUP + [100.0] * 10, losses(3.0), run.warmup))
    r = build_comparison(tmp_path, n_boot=300)
    (only,) = r["cells"]
    assert only["gpus"] == 1 and only["tokens_per_s"]["value"] == 1280.0
    assert only["parallel"]["launcher"] == "single" and only["parallel"]["processes"] == 1
    assert only["parallel"]["per_rank"] == [] and only["parallel"]["global_batch"] == 4
    assert r["scaling"] == []


def test_matrix_json_with_gpu_counts_lists_pending_cells_of_each(matrix):
    atomic_write_json(matrix / "matrix.json", {
        "schema": "parallax.matrix/2", "frameworks": ["torch", "jax"], "recipes": ["bf16"], "seeds": [0],
        "repeats": 1, "gpus": [1, 2], "cells": [["torch", "bf16", "bf16"], ["jax", "bf16", "bf16"]],
        "run": {}})
    r = build_comparison(matrix, n_boot=300)
    pending = cell(r, "jax", "bf16", 1)
    assert pending["status"] == "pending" and pending["counts"] == {"pending": 1}
    assert cell(r, "torch", "bf16", 2)["status"] == "ok"


def test_a_corrupt_run_of_several_gpus_shows_in_its_own_cell(matrix):
    (matrix / "runs" / "torch-bf16-g2-seed0-rep0" / "run.json").write_text("{not json")
    r = build_comparison(matrix, n_boot=300)
    assert cell(r, "torch", "bf16", 2)["status"] == "corrupt"
    assert cell(r, "torch", "bf16", 1)["status"] == "ok"
    assert group(r, "torch", "bf16")["rows"][1]["efficiency"] is None


def test_cell_dir_names_with_and_without_a_gpu_count():
    match = CELL_DIR.match("torch-te-fp8-delayed-g8-seed3-rep1")
    assert (match["framework"], match["recipe"], match["gpus"], match["seed"]) == ("torch", "te-fp8-delayed", "8", "3")
    match = CELL_DIR.match("jax-flax-fp8-delayed-seed0-rep0")
    assert (match["recipe"], match["gpus"]) == ("flax-fp8-delayed", None)


def test_runs_of_different_sharding_on_several_gpus_are_refused(matrix):
    run = config("torch", "bf16", "bf16", seed=1)
    write_parallel_run(matrix / "runs" / "torch-bf16-g2-seed1-rep0", run, 2, [WARMUP + [100.0] * 10] * 2,
                       losses(2.9), [GIB, GIB], sharding="fsdp")
    with pytest.raises(ParallaxError, match="mixes --sharding ddp .* and fsdp"):
        build_comparison(matrix, n_boot=300)


def test_one_gpu_runs_need_not_agree_on_the_sharding(tmp_path):
    write_cell(tmp_path, "torch", "bf16", "bf16", 1, [100.0], 3.0)
    data = json.loads((tmp_path / "runs" / "torch-bf16-seed0-rep0" / "run.json").read_text())
    data["config"]["sharding"] = "fsdp"  # a 1-GPU cell of an fsdp matrix
    write_run(tmp_path / "runs" / "torch-bf16-seed0-rep0", {k: v for k, v in data.items() if k != "schema"})
    write_cell(tmp_path, "torch", "bf16", "bf16", 2, [100.0, 100.0], 2.9)
    r = build_comparison(tmp_path, n_boot=300)
    assert group(r, "torch", "bf16")["rows"][1]["efficiency"]["value"] == pytest.approx(1.0)


# ----------------------------------------------------------------------------- renderers

def test_markdown_scaling_tables_with_exact_rows(matrix):
    text = markdown.render(build_comparison(matrix, n_boot=300))
    assert "## Scaling" in text
    mfu_two = f"{100 * 128_000 / 110 * SPEC / 1e12 / 0.02:.1f}%"
    mfu_one = f"{100 * 1280 * SPEC / 1e12 / 0.02:.1f}%"
    assert table_rows(text, "### torch bf16 (bf16)") == [
        ["1", "4", "1,280 (1,280–1,280)", "1,280", mfu_one, "1.00 GiB / 2.00 GiB", "100.0", "100% (baseline)"],
        ["2", "8", "2,327 (2,327–2,327)", "1,164", mfu_two, "1.25 GiB / 2.50 GiB", "110.0",
         "90.9% (90.9%–90.9%)"],
    ]
    jax = text.split("### jax bf16 (bf16)\n", 1)[1].split("\n#", 1)[0]
    assert "| 2 | 8 | 2,438 (2,438–2,438) | 1,219 |" in jax and jax.rstrip().endswith(
        "Note: no 1-GPU cell of jax bf16 in this matrix: no scaling efficiency (add 1 to --gpus).")
    assert "weak scaling" in text and "slowest rank" in text
    # the other tables gain a GPUs column, and the speedups name their GPU count
    assert table_rows(text, "## Throughput")[1][:4] == ["torch", "bf16", "2", "ok"]
    assert ["torch", "fp8 te-fp8-delayed", "2"] == table_rows(text, "## Loss")[4][:3]
    assert "| torch ×2 GPUs: te-fp8-delayed over bf16 | 1.146× (1.146×–1.146×) | faster |" in text
    assert "- **Scaling of torch bf16 to 2 GPUs:** 90.9% (90.9%–90.9%) of ideal (2,327 tokens/s)" in text
    assert "- **Fastest at bf16 ×2 GPUs:** jax bf16" in text
    assert "GPUs 1, 2 (global batch = per-GPU batch × GPUs); sharding ddp on several GPUs" in text


def test_single_gpu_reports_have_no_gpus_column_or_scaling_section(tmp_path):
    write_cell(tmp_path, "torch", "bf16", "bf16", 1, [100.0], 3.0)
    text = markdown.render(build_comparison(tmp_path, n_boot=300))
    assert "## Scaling" not in text and "GPUs" not in text.split("## Throughput", 1)[1].split("\n\n")[1]


def test_terminal_shows_the_scaling_table(matrix):
    console = Console(width=250, record=True)
    terminal.render(build_comparison(matrix, n_boot=300), console)
    out = console.export_text()
    assert "Scaling (efficiency = tokens/s(N) ÷ (N × tokens/s(1)))" in out
    row = next(line for line in out.splitlines() if "torch bf16" in line and "90.9%" in line)
    assert "2,327" in row and "110.0" in row and "1.25 GiB" in row
    jax = next(line for line in out.splitlines() if "jax bf16" in line and "2,438" in line)
    assert jax.rstrip("│ ").endswith("n/a")
    assert "note: no 1-GPU cell of jax bf16 in this matrix: no scaling efficiency (add 1 to --gpus)" in out
    assert "100% (baseline)" in next(line for line in out.splitlines() if "torch bf16" in line and "1,280" in line)


def test_csv_and_json_carry_gpus_and_efficiency(matrix, tmp_path):
    record = build_comparison(matrix, n_boot=300)
    rows = {(row["framework"], row["recipe"], row["gpus"]): row
            for row in csv.DictReader(io.StringIO(export.to_csv(record)))}
    two = rows[("torch", "bf16", "2")]
    assert float(two["scaling_efficiency"]) == pytest.approx(100 / 110)
    assert float(two["scaling_efficiency_ci_low"]) == pytest.approx(100 / 110)
    assert (two["global_batch"], two["sharding"]) == ("8", "ddp")
    assert float(two["tokens_per_s_per_gpu"]) == pytest.approx(128_000 / 110)
    assert rows[("jax", "bf16", "2")]["scaling_efficiency"] == ""
    written = write_report(record, tmp_path / "out" / "report.md")
    assert written["plot_scaling"].exists() and written["plot_scaling"].stat().st_size > 5000
    assert "![Scaling with GPUs (95% CI)](plots/scaling.png)" in written["report"].read_text()
    saved = json.loads(written["json"].read_text())
    assert saved["scaling"][0]["rows"][1]["efficiency"]["value"] == pytest.approx(100 / 110)


def test_environment_summary_counts_identical_gpus_and_names_the_interconnect():
    gpu = {"name": "NVIDIA H200", "compute_capability": "9.0", "memory_total_bytes": 150_754_820_096}
    topology = {"available": True, "error": None, "pairs": [
        {"a": 0, "b": 1, "connection": "NV18", "nvlinks": 18, "via_nvswitch": True, "pcie_path": "SYS",
         "p2p_nvlink": True}]}
    env = environment_summary({"gpus": [dict(gpu, index=0), dict(gpu, index=1)], "gpu_topology": topology})
    assert env["gpu"] == "2 × NVIDIA H200 (cc 9.0)"
    assert env["interconnect"] == "all 2 GPUs are joined by NVLink (at least 18 links per pair, through NVSwitch)"
    assert environment_summary({"gpus": [dict(gpu, index=0)]})["interconnect"] is None


def test_crossover_rows_keep_the_gpu_count_of_their_speedup(matrix):
    from parallax.analysis.crossover import speedup_rows

    rows = speedup_rows(build_comparison(matrix, n_boot=300), "tiny", str(matrix))
    assert sorted((r["recipe"], r["gpus"], round(r["ratio"], 4)) for r in rows) == [
        ("te-fp8-delayed", 1, 1.25), ("te-fp8-delayed", 2, round(110 / 96, 4))]
    assert {r["results_dir"] for r in rows} == {str(matrix)}


def test_a_one_gpu_cell_that_saw_fewer_gpus_is_still_one_benchmark(matrix):
    gpu = {"name": "NVIDIA H200", "compute_capability": "9.0"}
    for path in sorted((matrix / "runs").glob("*/run.json")):
        visible = 2 if "-g2-" in path.parent.name else 1  # e.g. CUDA_VISIBLE_DEVICES=0 for the 1-GPU cells
        data = json.loads(path.read_text())
        data["environment"]["gpus"] = [dict(gpu, index=i) for i in range(visible)]
        write_run(path.parent, {k: v for k, v in data.items() if k != "schema"})
    assert not [p for p in build_comparison(matrix, n_boot=300)["problems"] if "different GPUs" in p]


def test_the_efficiency_interval_is_the_ratio_of_the_cells_replicates_over_n(tmp_path):
    from parallax.analysis import stats
    from parallax.analysis.compare import analyse, scaling

    run = config("torch", "bf16", "bf16")
    write_single_run(tmp_path / "runs" / "torch-bf16-seed0-rep0", run, WARMUP + [95.0, 105.0] * 10,
                     [9.0, 8.0] + [3.0] * 20, GIB)
    write_parallel_run(tmp_path / "runs" / "torch-bf16-g2-seed0-rep0", run, 2,
                       [WARMUP + [100.0, 104.0] * 10, WARMUP + [108.0, 98.0] * 10], [9.0, 8.0] + [2.9] * 20,
                       [GIB, GIB])
    analysis = analyse(tmp_path, n_boot=400)
    (one, two) = analysis.cells.values()
    (row_one, row_two) = scaling(analysis.cells, 0.95)[0]["rows"]
    expected = [x / 2 for x in stats.percentile_ci(two.tps_reps / one.tps_reps, 0.95)]
    eff = row_two["efficiency"]
    assert eff["ci"] == pytest.approx(expected)
    # slowest rank per step: max(100, 108) = 108 and max(104, 98) = 104; medians 106 and 100
    assert eff["value"] == pytest.approx((256_000 / 106) / (2 * 128_000 / 100))
    assert eff["ci"][0] < eff["value"] < eff["ci"][1]
    assert row_one["efficiency"]["value"] == 1.0
