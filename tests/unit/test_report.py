"""The comparison record and its renderers against run files with hand-computed numbers."""

from __future__ import annotations

import csv
import io
import json
import math
import signal
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from fixtures.fake_runs import generated_steps, steps_from, tiny_config, write_ok_run

from parallax.analysis.compare import build_comparison
from parallax.engines.base import StepRecord
from parallax.run import interrupt, train
from parallax.spec.precision import PrecisionInfo
from parallax.errors import ParallaxError
from parallax.spec import registry
from parallax.analysis.report import export, markdown, terminal, write_report
from parallax.store.results import write_run
from parallax.run.runner import Matrix

TOKENS = 4 * 32  # tiny_config: batch 4 × seq 32
WARMUP_MS = [500.0, 300.0]


def losses(tail: list[float]) -> list[float]:
    return [9.0, 8.0] + tail


def write(root, framework, precision, seed, measured_ms, tail_losses, **kw):
    """An ok run of the framework's default recipe of ``precision``."""
    recipe = registry.default(framework, precision).name
    run = tiny_config(framework=framework, precision=precision, recipe=recipe, seed=seed)
    steps = steps_from(WARMUP_MS + measured_ms, losses(tail_losses), run.warmup)
    return write_ok_run(root / "runs" / f"{framework}-{recipe}-seed{seed}-rep0", run, steps, **kw)


@pytest.fixture
def hand(tmp_path):
    """torch bf16 100 ms, torch fp8 80 ms (+0.1 loss), jax bf16 90/110 ms, jax fp8 skipped."""
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, [3.0] * 10, peaks=(0.1, 0.1, 0.05),
          memory=(2**30, 2**31), evals=[{"step": 11, "loss": 3.2, "perplexity": math.exp(3.2)}])
    write(tmp_path, "torch", "fp8", 0, [80.0] * 10, [3.1] * 10, peaks=(0.2, 0.1, None), compile_s=2.25)
    write(tmp_path, "jax", "bf16", 0, [90.0, 110.0] * 5, [2.95, 3.05] * 5)
    skipped = tiny_config(framework="jax", precision="fp8", recipe="flax-fp8-delayed")
    write_run(tmp_path / "runs" / "jax-flax-fp8-delayed-seed0-rep0",
              {"status": "skipped", "error": "fp8 needs compute capability 8.9", "config": skipped.to_dict()})
    return tmp_path


def cell(record, framework, precision):
    return next(c for c in record["cells"] if (c["framework"], c["precision"]) == (framework, precision))


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table under ``## heading``."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")][2:]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]


# ----------------------------------------------------------------------------- the record

def test_cell_statistics_match_hand_computed_values(hand):
    r = build_comparison(hand, n_boot=500)
    tb = cell(r, "torch", "bf16")
    assert tb["step_ms"]["median"] == 100.0 and tb["step_ms"]["count"] == 10
    assert tb["tokens_per_s"] == {"value": TOKENS * 10.0, "ci": [1280.0, 1280.0]}
    assert tb["final_loss"]["value"] == pytest.approx(3.0) and tb["final_loss"]["ci"] is None  # one run
    assert tb["eval_loss"] == 3.2 and tb["perplexity"] == pytest.approx(math.exp(3.2))
    assert tb["memory"] == {"peak_allocated_bytes": 2**30, "peak_reserved_bytes": 2**31}
    spec = tb["flops"]["spec"]
    assert spec["flops_per_token"] == 8_222_592
    assert spec["tflops"] == pytest.approx(1280 * 8_222_592 / 1e12)
    assert spec["mfu_precision_peak"] == pytest.approx(1280 * 8_222_592 / 1e12 / 0.1)
    assert spec["mfu_measured_ceiling"] == pytest.approx(1280 * 8_222_592 / 1e12 / 0.05)
    assert cell(r, "torch", "fp8")["flops"]["spec"]["mfu_measured_ceiling"] is None
    assert cell(r, "torch", "fp8")["compile_s"] == 2.25

    jb = cell(r, "jax", "bf16")
    assert jb["step_ms"]["median"] == 100.0 and jb["step_ms"]["p10"] == 90.0 and jb["step_ms"]["p90"] == 110.0
    assert jb["tokens_per_s"]["value"] == 1280.0
    assert jb["memory"]["peak_reserved_bytes"] == 2_000_000

    jf = cell(r, "jax", "fp8")
    assert jf["status"] == "skipped" and jf["tokens_per_s"] is None
    assert jf["runs"] == [{"dir": "runs/jax-flax-fp8-delayed-seed0-rep0", "seed": 0, "status": "skipped",
                           "error": "fp8 needs compute capability 8.9"}]


def test_speedups_and_loss_deltas(hand):
    r = build_comparison(hand, n_boot=500)
    by_label = {s["label"]: s for s in r["speedups"]}
    fp8 = by_label["torch: te-fp8-delayed over bf16"]
    assert fp8["ratio"] == pytest.approx(1.25) and fp8["ci"] == pytest.approx([1.25, 1.25])
    assert fp8["distinguishable"]
    jax = by_label["bf16: jax over torch"]
    assert jax["ratio"] == 1.0 and jax["ci"][0] < 1.0 < jax["ci"][1] and not jax["distinguishable"]
    assert set(by_label) == {"torch: te-fp8-delayed over bf16", "bf16: jax over torch"}  # jax fp8 has no result

    (delta,) = r["loss_deltas"]
    assert (delta["framework"], delta["precision"]) == ("torch", "fp8")
    assert delta["delta"] == pytest.approx(0.1) and delta["ci"] == pytest.approx([0.1, 0.1])
    assert delta["paired_seeds"] == [0] and delta["includes_zero"] is False

    fastest = {e["precision"]: e for e in r["conclusions"]["fastest"]}
    assert fastest["fp8"]["framework"] == "torch" and fastest["fp8"]["runner_up"] is None
    assert not fastest["bf16"]["distinguishable"]
    assert r["conclusions"]["not_ok"] == [{"framework": "jax", "recipe": "flax-fp8-delayed", "precision": "fp8",
                                           "gpus": 1, "status": "skipped"}]


def test_a_loss_delta_whose_interval_includes_zero_says_so(tmp_path):
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, [3.0] * 10)
    write(tmp_path, "torch", "fp8", 0, [80.0] * 10, [2.98, 3.03] * 5)
    r = build_comparison(tmp_path, n_boot=500)
    (delta,) = r["loss_deltas"]
    assert delta["delta"] == pytest.approx(0.005)
    assert delta["ci"][0] < 0 < delta["ci"][1] and delta["includes_zero"]
    text = markdown.render(r)
    assert table_rows(text, "Loss")[1][3].endswith("(includes 0)")
    # a throughput benchmark's loss is early training: shown, labelled, and concluded from nowhere
    assert r["mode"] == "throughput" and r["conclusions"]["loss_cost"] == []
    assert "**Early training, not a convergence penalty:** the training loss at the end of throughput runs " \
           "(12 steps), one run per seed and repeat." in text
    assert "- Loss: these are throughput runs; their loss is early training" in text
    assert "lower loss" not in text and "higher loss" not in text


def test_repeats_and_seeds_pool_and_pair(tmp_path):
    for seed, shift in ((0, 0.0), (1, 0.2)):
        write(tmp_path, "torch", "bf16", seed, [100.0 + shift] * 10, [3.0 + shift] * 10)
        write(tmp_path, "torch", "fp8", seed, [80.0] * 10, [3.05 + shift] * 10)
    r = build_comparison(tmp_path, n_boot=500)
    tb = cell(r, "torch", "bf16")
    assert tb["n_ok"] == 2 and tb["step_ms"]["count"] == 20
    assert tb["step_ms"]["median"] == pytest.approx(100.1)
    assert tb["tokens_per_s_runs"] == pytest.approx([1280.0, TOKENS * 1000 / 100.2])
    assert tb["final_loss"]["value"] == pytest.approx(3.1)
    assert tb["final_loss"]["ci"] == pytest.approx([3.0, 3.2])  # resampling two runs
    (delta,) = r["loss_deltas"]
    # paired by seed the difference is 0.05 in both, so the interval has no width
    assert delta["paired_seeds"] == [0, 1] and delta["ci"] == pytest.approx([0.05, 0.05])


def test_unpaired_single_runs_give_no_interval(tmp_path):
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, [3.0] * 10)
    write(tmp_path, "torch", "fp8", 1, [80.0] * 10, [3.1] * 10)
    (delta,) = build_comparison(tmp_path, n_boot=200)["loss_deltas"]
    assert delta["delta"] == pytest.approx(0.1) and delta["ci"] is None and delta["paired_seeds"] == []


def test_a_diverged_run_has_no_final_loss(tmp_path):
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, [3.0] * 9 + [None])
    r = build_comparison(tmp_path, n_boot=200)
    assert cell(r, "torch", "bf16")["final_loss"]["diverged"]
    assert table_rows(markdown.render(r), "Loss")[0][2] == "diverged (NaN)"


def test_emulated_precision_is_labelled(tmp_path):
    write(tmp_path, "jax", "bf16", 0, [100.0] * 10, [3.0] * 10)
    write(tmp_path, "jax", "fp8", 0, [90.0] * 10, [3.0] * 10, native=False)
    r = build_comparison(tmp_path, n_boot=200)
    assert r["conclusions"]["emulated"] == [{"framework": "jax", "recipe": "flax-fp8-delayed", "precision": "fp8",
                                             "gpus": 1}]
    text = markdown.render(r)
    assert table_rows(text, "Throughput")[1][1] == "fp8 flax-fp8-delayed (emulated)"
    assert "flax-fp8-delayed on jax ran **emulated**" in text
    assert "Fastest at fp8 (emulated):** jax flax-fp8-delayed" in text


# ----------------------------------------------------------------------------- bad input

def test_corrupt_and_truncated_run_files_are_named_and_left_out(hand):
    write(hand, "torch", "bf16", 1, [50.0] * 10, [1.0] * 10)
    corrupt = hand / "runs" / "torch-bf16-seed1-rep0" / "run.json"
    corrupt.write_text(corrupt.read_text()[:200])  # truncated mid-object
    garbage = hand / "runs" / "torch-te-fp8-delayed-seed2-rep0" / "run.json"
    garbage.parent.mkdir()
    garbage.write_bytes(b"\x00\xff not json")
    no_steps = write(hand, "jax", "bf16", 3, [50.0] * 10, [1.0] * 10).parent / "steps.jsonl"
    no_steps.unlink()
    no_config = hand / "runs" / "odd" / "run.json"
    write_run(no_config.parent, {"status": "failed", "error": "x", "config": {"seed": 0}})
    r = build_comparison(hand, n_boot=200)
    assert len(r["problems"]) == 4
    assert any(str(no_config) in p and "config lacks ['framework', 'precision'" in p for p in r["problems"])
    assert any(str(corrupt) in p and "corrupt or truncated" in p for p in r["problems"])
    assert any(str(garbage) in p for p in r["problems"])
    assert any(str(no_steps) in p and "left out" in p for p in r["problems"])
    # never averaged in: the cells read as if those files were absent
    assert cell(r, "torch", "bf16")["n_ok"] == 1 and cell(r, "torch", "bf16")["step_ms"]["median"] == 100.0
    assert cell(r, "jax", "bf16")["step_ms"]["median"] == 100.0
    text = markdown.render(r)
    assert "## Problems" in text and f"`{corrupt}: corrupt or truncated JSON" in text


def test_runs_of_different_configurations_are_refused(tmp_path):
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, [3.0] * 10)
    other = tiny_config(framework="jax", batch_size=8)
    write_ok_run(tmp_path / "runs" / "jax", other, steps_from(WARMUP_MS + [1.0] * 10, losses([3.0] * 10), 2))
    with pytest.raises(ParallaxError, match="mixes runs of different configurations .* batch_size"):
        build_comparison(tmp_path)


def test_an_empty_or_missing_directory_is_an_error(tmp_path):
    with pytest.raises(ParallaxError, match="no such results directory"):
        build_comparison(tmp_path / "nope")
    with pytest.raises(ParallaxError, match="holds no readable run.json"):
        build_comparison(tmp_path)


def test_runs_of_one_cell_from_different_gpus_are_refused(tmp_path):
    h200 = {"gpus": [{"name": "NVIDIA H200", "uuid": "GPU-aaaa1111", "compute_capability": "9.0"}]}
    b200 = {"gpus": [{"name": "NVIDIA B200", "uuid": "GPU-bbbb2222", "compute_capability": "10.0"}]}
    for seed, env in ((0, h200), (1, b200)):
        path = write(tmp_path, "torch", "bf16", seed, [100.0] * 10, [3.0] * 10)
        run = json.loads(path.read_text())
        run["environment"] = env
        path.write_text(json.dumps(run))
    with pytest.raises(ParallaxError, match=r"^refusing to pool the runs of torch bf16 \(runs/torch-bf16-seed0-rep0 "
                       r"and runs/torch-bf16-seed1-rep0\): they differ in machine.gpus \(NVIDIA H200 GPU-aaaa1111 vs "
                       r"NVIDIA B200 GPU-bbbb2222\)"):
        build_comparison(tmp_path, n_boot=200)
    mixed = build_comparison(tmp_path, n_boot=200, cross_machine=True)
    assert cell(mixed, "torch", "bf16")["machines"] == {"NVIDIA H200 aaaa1111": 1, "NVIDIA B200 bbbb2222": 1}


def test_matrix_cells_without_runs_are_pending(hand):
    m = Matrix(("torch", "jax"), ("bf16", "fp8", "nvfp4"), (0,), 1, tiny_config())
    (hand / "matrix.json").write_text(json.dumps(m.to_dict()))
    r = build_comparison(hand, n_boot=200)
    # grouped by format, then framework
    assert [(c["framework"], c["recipe"]) for c in r["cells"]] == [
        ("torch", "bf16"), ("jax", "bf16"), ("torch", "te-fp8-delayed"), ("jax", "flax-fp8-delayed"),
        ("torch", "emulated-nvfp4"), ("jax", "emulated-nvfp4")]
    assert cell(r, "jax", "nvfp4")["status"] == "pending"
    rows = table_rows(markdown.render(r), "Runs without a result")
    assert ["–", "torch", "nvfp4 emulated-nvfp4", "–", "pending", "1 run(s) not run yet (resume the benchmark)"] in rows



def write_interrupted(root, framework, precision, seed, done_ms):
    """A run of the framework's default recipe of ``precision`` stopped by SIGTERM after
    ``len(done_ms)`` steps, as ``parallax train`` writes it."""
    recipe = registry.default(framework, precision).name
    run = tiny_config(framework=framework, precision=precision, recipe=recipe, seed=seed)
    run_dir = root / "runs" / f"{framework}-{recipe}-seed{seed}-rep0"
    done = [StepRecord(k, 9.0 - 0.1 * k, ms, 1e-3) for k, ms in enumerate(done_ms)]
    info = PrecisionInfo(precision, "fake", recipe, True)
    result = train.interrupted_result(run.replace(output_dir=str(run_dir)), info, {}, "t0",
                                      interrupt.Interrupted(signal.SIGTERM), done)
    return write_run(run_dir, result, train.step_rows(run, done))


def test_an_interrupted_run_is_labelled_and_in_no_speedup(tmp_path):
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, [3.0] * 10)
    write_interrupted(tmp_path, "torch", "fp8", 0, [500.0, 300.0, 80.0, 80.0, 80.0])
    r = build_comparison(tmp_path, n_boot=200)
    fp8 = cell(r, "torch", "fp8")
    assert (fp8["status"], fp8["n_ok"], fp8["tokens_per_s"]) == ("interrupted", 0, None)
    assert r["speedups"] == []
    rows = table_rows(markdown.render(r), "Runs without a result")
    assert rows == [["runs/torch-te-fp8-delayed-seed0-rep0", "torch", "fp8 te-fp8-delayed", "0", "interrupted",
                     "interrupted by SIGTERM after 5 of 12 steps"]]
    console = Console(record=True, width=200)
    terminal.render(r, console)
    assert "interrupted: torch fp8 te-fp8-delayed seed 0 — interrupted by SIGTERM after 5 of 12 steps" in \
        console.export_text()


# ----------------------------------------------------------------------------- renderers

def test_markdown_tables_show_the_record(hand):
    r = build_comparison(hand, n_boot=500)
    text = markdown.render(r, {"loss": "plots/loss.png"})
    rows = table_rows(text, "Throughput")
    assert rows[0] == ["torch", "bf16", "ok", "100.0 (100.0–100.0)", "1,280 (1,280–1,280)", "0.011", "10.5%",
                       "1.00 GiB / 2.00 GiB", "1.5 s"]
    assert rows[1][3] == "100.0 (90.00–110.0)"
    assert rows[2][:5] == ["torch", "fp8 te-fp8-delayed", "ok", "80.00 (80.00–80.00)", "1,600 (1,600–1,600)"]
    assert rows[3] == ["jax", "fp8 flax-fp8-delayed", "skipped", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"]
    speed = table_rows(text, "Speedups")
    assert speed[0] == ["torch: te-fp8-delayed over bf16", "1.250× (1.250×–1.250×)", "faster"]
    assert speed[1][2] == "no clear difference (CI includes 1)"
    loss = table_rows(text, "Loss")
    assert loss[0] == ["torch", "bf16", "3.0000", "–", "3.2000", "24.53"]
    assert loss[2][3] == "+0.1000 (+0.1000–+0.1000)"
    assert "**Fastest at fp8:** torch te-fp8-delayed, 1,600 tokens/s (the only stack with a result)" in text
    assert "Cost of" not in text and "higher loss" not in text  # early training concludes nothing
    assert "![Loss curves](plots/loss.png)" in text and "moving-block bootstrap" in text
    skipped = table_rows(text, "Runs without a result")
    assert skipped == [["runs/jax-flax-fp8-delayed-seed0-rep0", "jax", "fp8 flax-fp8-delayed", "0", "skipped",
                        "fp8 needs compute capability 8.9"]]


def test_tables_agree_with_the_run_files(tmp_path):
    """Numbers recomputed here straight from steps.jsonl equal the CSV and the Markdown."""
    for fw in ("torch", "jax"):
        for p in ("bf16", "fp8"):
            run = tiny_config(framework=fw, precision=p, steps=40, warmup=5)
            write_ok_run(tmp_path / fw / p, run, generated_steps(run))
    r = build_comparison(tmp_path, n_boot=300)
    rows = {(row["framework"], row["precision"]): row for row in csv.DictReader(io.StringIO(export.to_csv(r)))}
    md = {(row[0], row[1]): row for row in table_rows(markdown.render(r), "Throughput")}
    for fw in ("torch", "jax"):
        for p in ("bf16", "fp8"):
            steps = [json.loads(ln) for ln in (tmp_path / fw / p / "steps.jsonl").read_text().splitlines()]
            ms = np.median([s["step_ms"] for s in steps[5:]])
            final = np.mean([s["loss"] for s in steps[-10:]])
            row = rows[(fw, p)]
            assert float(row["step_ms_median"]) == pytest.approx(ms)
            assert float(row["tokens_per_s"]) == pytest.approx(TOKENS * 1000 / ms)
            assert float(row["tokens_per_s_ci_low"]) <= float(row["tokens_per_s"]) <= float(row["tokens_per_s_ci_high"])
            assert float(row["final_loss"]) == pytest.approx(final)
            assert md[(fw, p)][4].startswith(f"{TOKENS * 1000 / ms:,.0f} (")
        fp8 = rows[(fw, "fp8")]
        bf16 = rows[(fw, "bf16")]
        assert float(fp8["delta_loss_vs_bf16"]) == pytest.approx(float(fp8["final_loss"]) - float(bf16["final_loss"]))


def test_write_report_writes_markdown_plots_csv_and_json(hand):
    r = build_comparison(hand, n_boot=200)
    written = write_report(r, hand / "out" / "report.md")
    assert written["report"].read_text().count("![") == 4
    for name in ("loss", "throughput", "memory", "mfu"):
        png = written[f"plot_{name}"]
        assert png == hand / "out" / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    header = written["csv"].read_text().splitlines()[0].split(",")
    assert tuple(header) == export.COLUMNS
    assert len(written["csv"].read_text().splitlines()) == 1 + 4
    saved = json.loads(written["json"].read_text())
    assert saved["schema"] == "parallax.comparison/1" and len(saved["cells"]) == 4
    assert saved["speedups"][0]["ratio"] == pytest.approx(1.25)


def test_a_matrix_without_results_draws_no_empty_plots_and_says_why(tmp_path):
    skipped = tiny_config(framework="torch", precision="fp8")
    write_run(tmp_path / "a", {"status": "skipped", "error": "no", "config": skipped.to_dict()})
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "mfu.png").write_bytes(b"an earlier report's plot")
    written = write_report(build_comparison(tmp_path, n_boot=200), tmp_path / "report.md")
    assert not any(k.startswith("plot_") for k in written)
    assert not (tmp_path / "plots" / "mfu.png").exists()  # no stale plot beside the report
    text = written["report"].read_text()
    assert "No cell finished with a result." in text and "![" not in text
    assert text.split("## Plots\n\n")[1].split("\n\n")[0].splitlines() == [
        "- Loss curves: not plotted, no finished runs.",
        "- Throughput (95% CI): not plotted, no finished runs.",
        "- Peak memory: not plotted, no peak memory recorded (CPU runs record none).",
        "- MFU: not plotted, MFU n/a: no known peak for this device (use --peak-tflops).",
    ]


def test_a_cpu_report_leaves_out_memory_and_mfu_and_says_why(tmp_path):
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, [3.0] * 10)
    record = build_comparison(tmp_path, n_boot=200)
    for cell in record["cells"]:  # as a CPU run records them: no memory, no peak for MFU
        cell["memory"] = {"peak_allocated_bytes": None, "peak_reserved_bytes": None}
        for row in (cell.get("flops") or {}).values():
            row["mfu_precision_peak"] = None
    written = write_report(record, tmp_path / "out" / "report.md")
    assert sorted(k for k in written if k.startswith("plot_")) == ["plot_loss", "plot_throughput"]
    text = written["report"].read_text()
    assert "![Loss curves](plots/loss.png)" in text and "![MFU]" not in text and "![Peak memory]" not in text
    assert "- Peak memory: not plotted, no peak memory recorded (CPU runs record none)." in text
    assert "- MFU: not plotted, MFU n/a: no known peak for this device (use --peak-tflops)." in text


def test_baseline_ratios(hand, tmp_path_factory):
    base = tmp_path_factory.mktemp("baseline")
    write(base, "torch", "bf16", 0, [200.0] * 10, [3.0] * 10)
    write(base, "torch", "fp8", 0, [160.0] * 10, [3.0] * 10)
    r = build_comparison(hand, base, n_boot=300)
    rows = {(b["framework"], b["precision"]): b for b in r["baseline"]["rows"]}
    assert set(rows) == {("torch", "bf16"), ("torch", "fp8")}  # jax has no baseline cell
    assert rows[("torch", "bf16")]["tokens_per_s"]["ratio"] == pytest.approx(2.0)
    assert rows[("torch", "bf16")]["step_ms_ratio"] == pytest.approx(0.5)
    assert rows[("torch", "fp8")]["loss_difference"]["delta"] == pytest.approx(0.1)
    assert r["baseline"]["config_differences"] == []
    text = markdown.render(r)
    assert table_rows(text, "Against the baseline")[0][2] == "2.000× (2.000×–2.000×)"


def test_terminal_shows_the_table(hand):
    console = Console(record=True, width=200)
    terminal.render(build_comparison(hand, n_boot=200), console)
    out = console.export_text()
    assert "1,280 (1,280–1,280)" in out and "1.250×" in out
    assert "skipped: jax fp8 flax-fp8-delayed seed 0 — fp8 needs compute capability 8.9" in out


def evals_at(values, steps=(3, 7, 11)):
    return [{"step": k, "loss": v, "perplexity": math.exp(v)} for k, v in zip(steps, values)]


def convergence_matrix(root, seeds=(0,)) -> None:
    m = Matrix(("torch",), ("bf16", "fp8"), seeds, 1, tiny_config(synthetic=False, eval_every=4), mode="convergence")
    (root / "matrix.json").write_text(json.dumps(m.validate().to_dict()))


def test_validation_deltas_at_every_evaluation_at_bf16s_best_and_at_the_last(tmp_path):
    """A memorising run: training losses equal, validation loss tells the recipes apart."""
    write(tmp_path, "torch", "bf16", 0, [100.0] * 10, [3.0] * 10, evals=evals_at([3.5, 3.0, 3.4]))
    write(tmp_path, "torch", "fp8", 0, [80.0] * 10, [3.0] * 10, evals=evals_at([3.6, 3.25, 3.3]))
    convergence_matrix(tmp_path)
    record = build_comparison(tmp_path, n_boot=200)
    assert record["mode"] == "convergence"
    [row] = record["eval_deltas"]
    assert (row["framework"], row["recipe"], row["baseline"], row["seeds"]) == ("torch", "te-fp8-delayed", "bf16", 1)
    assert row["steps"] == [3, 7, 11]
    assert row["delta"] == pytest.approx([0.1, 0.25, -0.1])
    assert (row["best_step"], row["best_baseline_loss"], row["final_step"]) == (7, 3.0, 11)
    assert (row["delta_at_best"], row["delta_at_final"]) == (pytest.approx(0.25), pytest.approx(-0.1))
    assert row["ci_at_best"] is None and row["ci_at_final"] is None  # one seed: no interval
    text = markdown.render(record)
    rows = table_rows(text, "Convergence penalty: validation ΔLoss vs bf16")
    # recorded 0-based, shown as the progress counts: the evaluation after the 12th step is 'step 12'
    assert rows == [["torch", "te-fp8-delayed", "bf16", "1", "+0.2500 at step 8 (one seed: no interval)",
                     "-0.1000 at step 12 (one seed: no interval)", "seed 0 +0.2500", "+0.1000", "+0.2500", "-0.1000"]]
    assert "| step 4 | step 8 | step 12 |" in text


def test_the_penalty_interval_is_students_t_over_seeds(tmp_path):
    """Three seeds, differences 0.10, 0.30, 0.20 at bf16's best step: mean 0.2, sd 0.1, t(0.975, 2)."""
    for seed, (bf16, fp8) in enumerate([(3.0, 3.1), (3.2, 3.5), (3.1, 3.3)]):
        write(tmp_path, "torch", "bf16", seed, [100.0] * 10, [3.0] * 10, evals=evals_at([4.0, bf16], (5, 11)))
        write(tmp_path, "torch", "fp8", seed, [80.0] * 10, [3.0] * 10, evals=evals_at([4.0, fp8], (5, 11)))
    convergence_matrix(tmp_path, (0, 1, 2))
    record = build_comparison(tmp_path, n_boot=200)
    [row] = record["eval_deltas"]
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # scipy.stats.t.ppf(0.975, 2) = 4.3027
    assert row["seeds"] == 3 and row["best_step"] == 11
    assert row["by_seed_at_best"] == {"0": pytest.approx(0.1), "1": pytest.approx(0.3), "2": pytest.approx(0.2)}
    assert row["ci_at_best"] == pytest.approx([0.2 - half, 0.2 + half])
    text = markdown.render(record)
    assert "**Convergence penalty of te-fp8-delayed (torch):** validation ΔLoss +0.2000 vs bf16 at bf16's best step " \
           "12 (95% CI -0.0484–+0.4484 over 3 seeds, includes 0)" in text


def test_a_throughput_benchmark_with_evaluation_is_not_a_convergence_penalty(tmp_path):
    for seed in (0, 1):
        write(tmp_path, "torch", "bf16", seed, [100.0] * 10, [3.0] * 10, evals=evals_at([3.5, 3.0]))
        write(tmp_path, "torch", "fp8", seed, [80.0] * 10, [3.0] * 10, evals=evals_at([3.6, 3.1 + seed / 10]))
    m = Matrix(("torch",), ("bf16", "fp8"), (0, 1), 1, tiny_config())
    (tmp_path / "matrix.json").write_text(json.dumps(m.to_dict()))
    record = build_comparison(tmp_path, n_boot=200)
    assert record["mode"] == "throughput" and record["conclusions"]["loss_cost"] == []
    [row] = record["eval_deltas"]
    assert row["ci_at_best"] is not None  # the figure is there, with its interval over the two seeds
    text = markdown.render(record)
    assert "## Validation ΔLoss vs bf16 (early training, not a convergence penalty)" in text
    assert "Convergence penalty" not in text


def test_maxtexts_own_figures_are_compared_run_by_run():
    """Two machines: each run's figures against that run's tokens/s, not the cell's pooled one."""
    from parallax.analysis.compare import LoadedRun, _maxtext_own

    def mt_run(tps, logged, clock):
        own = {"tokens_per_s_median": logged, "wallclock_tokens_per_s_median": clock}
        return LoadedRun(Path("r"), {"status": "ok", "throughput": {"tokens_per_s": tps},
                                     "engine_extra": {"maxtext": own}})

    own = _maxtext_own([mt_run(460_000.0, 460_000.0, 455_400.0), mt_run(391_000.0, 391_000.0, 391_391.0),
                        mt_run(459_000.0, 459_000.0, 458_541.0)])
    assert own["tokens_per_s_median"] == 459_000.0 and own["logged_vs_ours"] == [0.0, 0.0, 0.0]
    assert own["clock_vs_ours"] == pytest.approx([-0.01, 0.001, -0.001])
    cell = {"framework": "maxtext", "recipe": "fp8_gpu", "precision": "fp8", "tokens_per_s": {"value": 440_000.0},
            "maxtext_own": {**own, "tflops_per_step": 20.0, "parallax_maxtext_accounting_tflops_per_step": 20.0,
                            "tflops_per_s_median": 280.0, "parameters": 7.0}}
    [row] = [line for line in markdown._maxtext_own({"cells": [cell]}).splitlines() if line.startswith("| fp8 ")]
    assert "| 459,000 (+0.00%) | 455,400 (-0.10%; runs -1.00% to +0.10%) |" in row  # not +4.32% against 440,000


def test_maxtexts_own_figures_sit_beside_ours():
    from parallax.analysis.report import markdown

    own = {"tokens_per_s_median": 404_000.0, "wallclock_tokens_per_s_median": 396_000.0, "tflops_per_step": 20.06421,
           "parallax_maxtext_accounting_tflops_per_step": 20.06421, "tflops_per_s_median": 245.1,
           "parameters": 100_313_856.0}
    cell = {"framework": "maxtext", "recipe": "bf16", "precision": "bf16", "tokens_per_s": {"value": 400_000.0},
            "maxtext_own": own}
    text = markdown._maxtext_own({"cells": [cell, {"framework": "jax", "recipe": "bf16", "precision": "bf16",
                                                   "tokens_per_s": {"value": 1.0}}]})
    row = [line for line in text.splitlines() if line.startswith("| bf16 ")]
    assert row == ["| bf16 | 400,000 | 404,000 (+1.00%) | 396,000 (-1.00%) | 20.064 (+0.00%) | 245.1 | 100,313,856 |"]
    assert markdown._maxtext_own({"cells": [{**cell, "maxtext_own": {**own, "wallclock_tokens_per_s_median": None,
                                                                     "parameters": None}}]}).count("n/a") == 2
    assert markdown._maxtext_own({"cells": [{**cell, "tokens_per_s": None}]}) == ""  # no throughput: no row


def test_a_convergence_benchmark_ranks_the_formats_by_penalty(tmp_path):
    """bf16, fp8 and the emulated MXFP8, MXFP4 and NVFP4 of torch over two seeds (the blackwell-formats
    plan's shape): ranked by ΔLoss at bf16's best step, smallest first, each with its t interval over
    the seeds, the emulated ones labelled."""
    penalty = {"fp8": (0.02, 0.04), "mxfp8": (0.01, 0.01), "nvfp4": (0.10, 0.14), "mxfp4": (0.30, 0.20)}
    for seed in (0, 1):
        write(tmp_path, "torch", "bf16", seed, [100.0] * 10, [3.0] * 10, evals=evals_at([4.0, 3.0 + seed / 10], (5, 11)))
        for fmt, deltas in penalty.items():
            write(tmp_path, "torch", fmt, seed, [100.0] * 10, [3.0] * 10, native=fmt == "fp8",
                  evals=evals_at([4.0, 3.0 + seed / 10 + deltas[seed]], (5, 11)))
    m = Matrix(("torch",), ("bf16", *penalty), (0, 1), 1, tiny_config(synthetic=False, eval_every=4),
               mode="convergence")
    (tmp_path / "matrix.json").write_text(json.dumps(m.validate().to_dict()))
    record = build_comparison(tmp_path, n_boot=200)
    ranking = record["penalty_ranking"]
    assert [(r["rank"], r["precision"], r["recipe"]) for r in ranking] == [
        (1, "mxfp8", "emulated-mxfp8"), (2, "fp8", "te-fp8-delayed"), (3, "nvfp4", "emulated-nvfp4"),
        (4, "mxfp4", "emulated-mxfp4")]
    assert [r["delta"] for r in ranking] == pytest.approx([0.01, 0.03, 0.12, 0.25])
    half = 12.706204736174698 * 0.05  # mxfp4: differences 0.3, 0.2: sd 0.1/√2, /√2 seeds; t(0.975, 1)
    assert ranking[3]["ci"] == pytest.approx([0.25 - half, 0.25 + half]) and ranking[3]["includes_zero"]
    assert ranking[0]["ci"] is None or ranking[0]["ci"] == pytest.approx([0.01, 0.01])
    assert [r["label"] for r in ranking] == ["emulated", "native", "emulated", "emulated"]
    assert [r["includes_zero"] for r in ranking] == [False, True, True, True]
    assert [r["overlaps_next"] for r in ranking] == [True, True, True, None]
    rows = table_rows(markdown.render(record), "Formats ranked by convergence penalty")
    assert rows[0] == ["1", "mxfp8 (emulated)", "torch", "emulated-mxfp8", "2", "+0.0100",
                       "95% CI +0.0100–+0.0100 over 2 seeds, higher loss", "yes: not ordered"]
    assert [row[:4] for row in rows[1:]] == [["2", "fp8", "torch", "te-fp8-delayed"],
                                            ["3", "nvfp4 (emulated)", "torch", "emulated-nvfp4"],
                                            ["4", "mxfp4 (emulated)", "torch", "emulated-mxfp4"]]
    assert rows[3][5] == "+0.2500" and "over 2 seeds, includes 0" in rows[3][6]
