"""A ratio only between like cells: the facts a run records, the refusals, the fallback rule and
the cross-machine section (``parallax.analysis.comparability``, ``parallax.analysis.compare.Judge``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fixtures.fake_runs import steps_from, tiny_config, write_ok_run

from parallax.analysis import comparability, stats
from parallax.cli import main
from parallax.analysis.compare import build_comparison
from parallax.analysis.crossover import crossover
from parallax.errors import ParallaxError
from parallax.analysis.report import export, markdown

WARMUP_MS = [500.0, 300.0]
LOSSES = [9.0, 8.0] + [3.0] * 10


def gpu(uuid: str, name: str = "NVIDIA H200", power: float = 700.0) -> dict:
    return {"name": name, "uuid": f"GPU-{uuid}", "power_limit_w": power, "clock_sm_max_mhz": 1980,
            "clock_mem_max_mhz": 3201, "compute_capability": "9.0"}


def env(uuid: str = "aaaa1111", **changes) -> dict:
    base = {"hostname": "vm", "python": "3.12.3", "parallax": "0.1.0", "gpus": [gpu(uuid)],
            "nvml": {"driver_version": "580.159.04"}, "packages": {"torch": "2.11.0", "jax": "0.11.2"}}
    return {**base, **changes}


def framework(name: str = "torch", **changes) -> dict:
    base = {"name": name, "version": "0", "device": "cuda:0" if name == "torch" else "gpu:0",
            "platform": "gpu", "attention_backend": "cudnn", "compiled": True}
    return {**base, **changes}


def put(root, fw: str, recipe: str, fmt: str, ms: float, seed: int = 0, rep: int = 0, environment=None,
        fw_info=None, data=None) -> None:
    """An ok run of ``recipe`` at ``ms`` a step (constant), with the given facts."""
    run = tiny_config(framework=fw, precision=fmt, recipe=recipe, seed=seed)
    steps = steps_from(WARMUP_MS + [ms] * 10, LOSSES, run.warmup)
    path = write_ok_run(root / "runs" / f"{fw}-{recipe}-seed{seed}-rep{rep}", run, steps)
    record = json.loads(path.read_text())
    record["environment"] = environment or env()
    record["framework"] = fw_info or framework(fw)
    if data is not None:
        record["data"] = data
    path.write_text(json.dumps(record))


def refused(args: list[str], capsys) -> str:
    assert main(args) == 2
    return capsys.readouterr().err


def speedup(record: dict, label: str) -> dict:
    return next(s for s in record["speedups"] if s["label"] == label)


# ----------------------------------------------------------------------------- facts

def test_facts_read_the_machine_software_data_and_what_ran():
    run = {"environment": env(), "framework": framework("jax", xla_flags="--a=1 --own=1", allocator="bfc",
                                                        preallocate="false"),
           "recipe": {"params": {"xla_flags": ["--own=1"]}}, "config": {"gpus": 1},
           "data": {"synthetic": False, "train_sha256": "7fd090e8457284e3aaaa", "tokenizer_sha256": "5c69a5b805d8ffff"}}
    facts = comparability.facts(run)
    assert facts["machine.gpus"] == ("machine", (("NVIDIA H200", "GPU-aaaa1111", 700.0, 1980, 3201),))
    assert facts["machine.driver"] == ("machine", "580.159.04")
    assert facts["software.packages"] == ("software", {"torch": "2.11.0", "jax": "0.11.2"})
    assert facts["data"] == ("data", "tokens 7fd090e84572, tokenizer 5c69a5b805d8")
    assert facts["xla_flags"] == ("framework", "--a=1")  # the recipe's own flag is the recipe's fact
    assert facts["recipe_xla_flags"] == ("recipe", "--own=1")
    assert facts["attention"] == ("framework", "cudnn")
    assert comparability.machine_label(run) == "NVIDIA H200 aaaa1111"


def test_a_run_is_on_the_gpus_its_device_index_and_count_name():
    two = env(gpus=[gpu("aaaa1111"), gpu("bbbb2222")])
    second = {"environment": two, "framework": framework(device="cuda:1"), "config": {"gpus": 1}}
    both = {"environment": two, "framework": framework(), "parallel": {"gpus": 2}, "config": {"gpus": 2}}
    assert comparability.machine_label(second) == "NVIDIA H200 bbbb2222"
    assert comparability.machine_label(both) == "2× NVIDIA H200 aaaa1111+bbbb2222"
    assert comparability.machine_label({"environment": {"hostname": "box", "gpus": []}}) == "cpu box"


def test_a_library_only_one_run_recorded_is_not_a_difference():
    a = comparability.facts({"environment": env(packages={"torch": "2.11.0", "transformer_engine": "2.20.2"})})
    b = comparability.facts({"environment": env(packages={"torch": "2.11.0"})})
    c = comparability.facts({"environment": env(packages={"torch": "2.10.0"})})
    assert comparability.differences(a, b) == []
    (found,) = comparability.differences(a, c)
    assert (found.fact, found.a, found.b) == ("software.torch", "2.11.0", "2.10.0")


def test_attention_fallback_is_read_from_the_engine_s_first_choice():
    refused_cudnn = framework(attention_backend="flash", attention_refused={"cudnn": "SUBLIBRARY_VERSION_MISMATCH"})
    assert comparability.attention_fallback({"framework": refused_cudnn}) == \
        "cudnn refused (SUBLIBRARY_VERSION_MISMATCH) → flash"
    assert comparability.attention_fallback({"framework": framework("jax", attention_backend="xla")}) \
        .endswith("→ xla")
    assert comparability.attention_fallback({"framework": framework()}) is None
    cpu = {"name": "torch", "device": "cpu", "attention_backend": "math"}
    assert comparability.attention_fallback({"framework": cpu}) is None
    maxtext = {"name": "maxtext", "platform": "gpu", "attention_backend": "cudnn_flash_te"}
    assert comparability.attention_fallback({"framework": maxtext}) is None


# ----------------------------------------------------------------------------- refusals

def test_compare_refuses_two_cells_of_different_gpus_naming_the_machine(tmp_path, capsys):
    put(tmp_path, "torch", "bf16", "bf16", 100.0, environment=env("aaaa1111"))
    put(tmp_path, "torch", "te-fp8-delayed", "fp8", 80.0, environment=env("bbbb2222"))
    err = refused(["compare", "--results-dir", str(tmp_path), "--bootstraps", "200",
                   "--output-report", str(tmp_path / "report.md")], capsys)
    assert err.count("\n") == 1
    assert err.startswith("parallax: error: refusing torch te-fp8-delayed over torch bf16 "
                          "(runs/torch-te-fp8-delayed-seed0-rep0, runs/torch-bf16-seed0-rep0): they differ in "
                          "machine.gpus (NVIDIA H200 GPU-bbbb2222 700 W vs NVIDIA H200 GPU-aaaa1111 700 W); ")
    assert "--cross-machine" in err
    assert not (tmp_path / "report.md").exists()  # refused before anything was written


@pytest.mark.parametrize("field, a, b, fact", [
    ("packages", {"torch": "2.11.0"}, {"torch": "2.10.0"}, "software.torch"),
    ("nvml", {"driver_version": "580.159.04"}, {"driver_version": "575.1"}, "machine.driver"),
    ("gpus", [gpu("aaaa1111", power=700.0)], [gpu("aaaa1111", power=500.0)], "machine.gpus"),
])
def test_a_speedup_between_cells_that_differ_in_a_fact_is_refused(tmp_path, field, a, b, fact):
    put(tmp_path, "torch", "bf16", "bf16", 100.0, environment=env(**{field: a}))
    put(tmp_path, "torch", "te-fp8-delayed", "fp8", 80.0, environment=env(**{field: b}))
    with pytest.raises(ParallaxError, match=rf"^refusing torch te-fp8-delayed over torch bf16 .*they differ in {fact} "):
        build_comparison(tmp_path, n_boot=200)


def test_the_data_source_and_an_unrequested_xla_flag_are_refused_between_recipes(tmp_path):
    put(tmp_path, "jax", "bf16", "bf16", 100.0, data={"synthetic": False, "train_sha256": "a" * 64})
    put(tmp_path, "jax", "flax-fp8-delayed", "fp8", 80.0, data={"synthetic": False, "train_sha256": "b" * 64})
    with pytest.raises(ParallaxError, match=r"differ in data \(tokens bbbbbbbbbbbb, tokenizer None vs tokens aaaaaaaaaaaa, tokenizer None\)"):
        build_comparison(tmp_path, n_boot=200)
    put(tmp_path, "jax", "flax-fp8-delayed", "fp8", 80.0, data={"synthetic": False, "train_sha256": "a" * 64},
        fw_info=framework("jax", xla_flags="--xla_gpu_enable_command_buffer="))
    with pytest.raises(ParallaxError, match=r"differ in xla_flags \(--xla_gpu_enable_command_buffer= vs none\)"):
        build_comparison(tmp_path, n_boot=200)


def test_what_a_recipe_brings_may_differ_between_recipes_and_what_a_framework_chose_between_frameworks(tmp_path):
    put(tmp_path, "torch", "bf16", "bf16", 100.0)
    put(tmp_path, "torch", "te-fp8-delayed", "fp8", 80.0,
        fw_info=framework(cuda_graphs=True, graph_scope="blocks", compile_scope="glue"))
    put(tmp_path, "torch", "te-fp8-dpa", "fp8", 75.0,
        fw_info=framework(cuda_graphs=True, graph_scope="blocks", recipe_attention="TE DotProductAttention"))
    put(tmp_path, "jax", "bf16", "bf16", 90.0, fw_info=framework("jax", xla_flags="--mine", attention_backend="cudnn",
                                                                 compiled=True, allocator="bfc"))
    record = build_comparison(tmp_path, n_boot=200)
    assert speedup(record, "torch: te-fp8-delayed over bf16")["ratio"] == pytest.approx(100 / 80)
    assert speedup(record, "torch: te-fp8-dpa over bf16")["ratio"] == pytest.approx(100 / 75)  # its own attention
    assert comparability.facts({"framework": framework(recipe_attention="TE")})["recipe_attention"] == ("recipe", "TE")
    assert speedup(record, "bf16: jax over torch")["ratio"] == pytest.approx(100 / 90)
    assert all(s["machines"] == ["NVIDIA H200 aaaa1111"] * 2 for s in record["speedups"])


def test_a_cell_whose_attention_fell_back_is_kept_out_of_every_speedup(tmp_path):
    put(tmp_path, "torch", "bf16", "bf16", 100.0)
    put(tmp_path, "torch", "te-bf16", "bf16", 105.0)
    put(tmp_path, "torch", "te-fp8-delayed", "fp8", 80.0,
        fw_info=framework(attention_backend="flash", attention_refused={"cudnn": "CUDNN_STATUS_MISMATCH"}))
    record = build_comparison(tmp_path, n_boot=200)
    assert [s["label"] for s in record["speedups"]] == ["torch: te-bf16 over bf16"]
    assert record["excluded"] == [{"cell": "torch te-fp8-delayed",
                                   "reason": "attention fell back (cudnn refused (CUDNN_STATUS_MISMATCH) → flash)"}]
    fell_back = next(c for c in record["cells"] if c["recipe"] == "te-fp8-delayed")
    assert fell_back["attention_fallback"] == "cudnn refused (CUDNN_STATUS_MISMATCH) → flash"
    assert fell_back["tokens_per_s"]["value"] == pytest.approx(4 * 32 * 1000 / 80)  # its own speed stays shown
    text = markdown.render(record)
    assert "| torch | fp8 te-fp8-delayed | 0 | NVIDIA H200 aaaa1111 | flash (fell back) |" in text
    assert [e["precision"] for e in record["conclusions"]["fastest"]] == ["bf16"]  # not ranked at fp8
    csv_row = next(r for r in export.rows(record) if r["recipe"] == "te-fp8-delayed")
    assert (csv_row["machine"], csv_row["attention_fallback"]) == ("NVIDIA H200 aaaa1111", fell_back["attention_fallback"])


def test_one_cell_on_more_gpus_of_the_same_machine_scales_against_its_one_gpu_twin(tmp_path):
    one, two = env(gpus=[gpu("aaaa1111")]), env(gpus=[gpu("aaaa1111"), gpu("bbbb2222")])
    a, b = comparability.facts({"environment": one}), comparability.facts(
        {"environment": two, "parallel": {"gpus": 2}, "config": {"gpus": 2}})
    assert comparability.differences(a, b, "scaling") == []
    assert [d.fact for d in comparability.differences(a, b, "recipe")] == ["machine.gpus"]
    other = comparability.facts({"environment": env(gpus=[gpu("cccc3333"), gpu("dddd4444")]),
                                 "parallel": {"gpus": 2}, "config": {"gpus": 2}})
    assert [d.fact for d in comparability.differences(a, other, "scaling")] == ["machine.gpus"]


# ----------------------------------------------------------------------------- --cross-machine

def cross_matrix(root) -> None:
    """bf16 on machines A and B (twins: 100 and 104 ms), fp8 on B only (80 ms)."""
    put(root, "torch", "bf16", "bf16", 100.0, rep=0, environment=env("aaaa1111"))
    put(root, "torch", "bf16", "bf16", 104.0, rep=1, environment=env("bbbb2222"))
    put(root, "torch", "te-fp8-delayed", "fp8", 80.0, environment=env("bbbb2222"))
    put(root, "jax", "bf16", "bf16", 90.0, environment=env("aaaa1111"))


def test_cross_machine_speedups_are_apart_and_their_interval_holds_the_twins_spread(tmp_path, capsys):
    cross_matrix(tmp_path)
    err = refused(["compare", "--results-dir", str(tmp_path), "--bootstraps", "200"], capsys)
    assert "refusing to pool the runs of torch bf16" in err and "machine.gpus" in err
    record = build_comparison(tmp_path, n_boot=300, cross_machine=True)
    assert record["speedups"] == []  # every ratio here involves a cell of two machines
    (twin,) = record["cross_machine"]["twins"]
    assert twin["cell"] == "torch bf16" and twin["machines"] == ["NVIDIA H200 aaaa1111", "NVIDIA H200 bbbb2222"]
    assert twin["log_ratio"] == pytest.approx(math.log(100 / 104))
    fp8 = next(s for s in record["cross_machine"]["speedups"] if s["label"] == "torch: te-fp8-delayed over bf16")
    spread = abs(math.log(100 / 104))
    assert fp8["machine_spread"] == pytest.approx(spread)
    assert fp8["ci"] == pytest.approx([fp8["raw_ci"][0] * math.exp(-spread), fp8["raw_ci"][1] * math.exp(spread)])
    assert fp8["machines"] == ["NVIDIA H200 bbbb2222", "mixed: NVIDIA H200 aaaa1111, NVIDIA H200 bbbb2222"]
    text = markdown.render(record)
    assert "## Cross-machine speedups (--cross-machine)" in text and "**Not like-for-like:**" in text
    assert "- torch bf16: 1,280 on NVIDIA H200 aaaa1111, 1,231 on NVIDIA H200 bbbb2222 (-3.85%)" in text
    assert "| NVIDIA H200 bbbb2222 | NVIDIA H200 GPU-bbbb2222 (700 W, 1980/3201 MHz) | vm | 580.159.04 |" in text


def test_without_a_twin_on_both_machines_a_cross_machine_ratio_has_no_interval(tmp_path):
    put(tmp_path, "torch", "bf16", "bf16", 100.0, environment=env("aaaa1111"))
    put(tmp_path, "torch", "te-fp8-delayed", "fp8", 80.0, environment=env("bbbb2222"))
    (only,) = build_comparison(tmp_path, n_boot=200, cross_machine=True)["cross_machine"]["speedups"]
    assert only["ratio"] == pytest.approx(100 / 80)
    assert only["ci"] is None and only["distinguishable"] is False
    assert only["note"].startswith("no interval: no cell ran on both NVIDIA H200 aaaa1111 and NVIDIA H200 bbbb2222")


def test_crossover_refuses_as_compare_does_and_names_each_row_s_machine(tmp_path, capsys):
    good, bad = tmp_path / "good", tmp_path / "bad"
    put(good, "torch", "bf16", "bf16", 100.0)
    put(good, "torch", "te-fp8-delayed", "fp8", 80.0)
    put(good, "torch", "te-fp8-current", "fp8", 90.0,
        fw_info=framework(attention_backend="flash", attention_refused={"cudnn": "no"}))
    record = crossover([good], n_boot=200, level=0.95)
    (row,) = record["rows"]
    assert (row["recipe"], row["machine"], row["data"], row["cross_machine"]) == \
        ("te-fp8-delayed", "NVIDIA H200 aaaa1111", "synthetic", False)
    assert [e["cell"] for e in record["excluded"]] == ["torch te-fp8-current"]
    put(bad, "torch", "bf16", "bf16", 100.0, environment=env("aaaa1111"))
    put(bad, "torch", "te-fp8-delayed", "fp8", 80.0, environment=env("bbbb2222"))
    err = refused(["crossover", str(bad), "--output-dir", str(tmp_path / "xo")], capsys)
    assert "refusing torch te-fp8-delayed over torch bf16" in err
    (cross,) = crossover([bad], n_boot=200, level=0.95, cross_machine=True)["rows"]
    assert cross["cross_machine"] is True and cross["ci"] is None


def test_a_baseline_on_another_machine_is_labelled_cross_machine(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    put(here, "torch", "bf16", "bf16", 100.0, environment=env("aaaa1111"))
    put(there, "torch", "bf16", "bf16", 110.0, environment=env("bbbb2222"))
    base = build_comparison(here, there, n_boot=200)["baseline"]
    assert base["cross_machine"] is True
    assert base["machines"] == {"this": ["NVIDIA H200 aaaa1111"], "baseline": ["NVIDIA H200 bbbb2222"]}
    (row,) = base["rows"]
    assert row["tokens_per_s"]["ratio"] == pytest.approx(110 / 100)
    assert any(n.startswith("cross-machine: this run's cells ran on NVIDIA H200 aaaa1111") for n in base["notes"])


def test_the_twin_spread_uses_each_machine_s_median_run(tmp_path):
    for rep, (ms, uuid) in enumerate(((100.0, "aaaa1111"), (102.0, "aaaa1111"), (110.0, "bbbb2222"))):
        put(tmp_path, "torch", "bf16", "bf16", ms, rep=rep, environment=env(uuid))
    (twin,) = build_comparison(tmp_path, n_boot=200, cross_machine=True)["cross_machine"]["twins"]
    tokens = 4 * 32
    a = float(np.median([stats.tokens_per_s_from_ms(tokens, 100.0), stats.tokens_per_s_from_ms(tokens, 102.0)]))
    assert twin["tokens_per_s"] == pytest.approx([a, tokens * 1000 / 110])


def test_a_run_whose_guard_verdict_was_regraded_is_named_in_its_cell(tmp_path):
    put(tmp_path, "torch", "bf16", "bf16", 100.0)
    path = tmp_path / "runs" / "torch-bf16-seed0-rep0" / "run.json"
    record = json.loads(path.read_text())
    record["guards"] = {"regraded": {"was_status": "failed", "was_error": "numerics guard: zero at step 1",
                                     "at": "2026-12-01T13:02:36Z", "by": "scripts/regrade_guards.py"}}
    path.write_text(json.dumps(record))
    (cell,) = build_comparison(tmp_path, n_boot=200)["cells"]
    assert cell["notes"][1:] == ["runs/torch-bf16-seed0-rep0: its guard verdict was regraded from 'failed' by "
                             "scripts/regrade_guards.py on 2026-12-01 (was: numerics guard: zero at step 1)"]


# ----------------------------------------------------------------------------- input-bound

FEED = "prepared tokens (parallax data prepare) through the native loader, on a host with CPU cores to spare"


def waited(root, fw: str, recipe: str, fraction: float, step_ms: float = 100.0) -> None:
    """Give the run of ``recipe`` (``put``) a data wait of ``fraction`` of its step time."""
    path = root / "runs" / f"{fw}-{recipe}-seed0-rep0" / "run.json"
    record = json.loads(path.read_text())
    mean = fraction * step_ms
    record["timing"]["data_wait"] = {"median_ms": mean, "mean_ms": mean, "total_ms": 10 * mean, "fraction": fraction}
    path.write_text(json.dumps(record))


def test_input_bound_is_a_wait_above_two_percent_of_the_step_and_unknown_without_a_record():
    run = {"framework": framework(), "timing": {"step_ms": {"mean": 52.0}}}
    at = {**run, "timing": {**run["timing"], "data_wait": {"mean_ms": 1.04, "fraction": 0.02}}}
    above = {**run, "timing": {**run["timing"], "data_wait": {"mean_ms": 3.12, "fraction": 0.06}}}
    assert comparability.INPUT_BOUND_FRACTION == 0.02
    assert comparability.input_bound(at) is None  # exactly 2% is not above it
    assert comparability.input_bound(run) is None  # a run.json from before the data wait: unknown
    assert comparability.input_bound({**run, "timing": {**run["timing"], "data_wait": None}}) is None
    assert comparability.input_bound(above) == (
        f"input-bound: waited 3.1 ms of 52.0 ms a step for its batch (6.0%); feed it faster: {FEED}")
    fed = {**above, "framework": framework("maxtext"), "data": {"maxtext_input": "Parallax's native loader ..."}}
    assert comparability.input_bound(fed).endswith(f"feed it faster: {FEED}")
    grain = {**fed, "data": {"maxtext_input": "grain mmap_npy in Parallax's batch order: /r/maxtext/data"}}
    assert comparability.input_bound(grain).endswith("instead of Grain (the maxtext engine's default, without a "
                                                     "grain --tuning), or more Grain workers (grain_worker_count: "
                                                     "engines/maxtext/config.py)")
    assert comparability.kept_out(above) == comparability.input_bound(above)


def test_an_input_bound_cell_is_kept_out_of_every_speedup_with_its_reason(tmp_path):
    from rich.console import Console

    from parallax.analysis.report import terminal

    put(tmp_path, "torch", "bf16", "bf16", 100.0)
    put(tmp_path, "torch", "te-bf16", "bf16", 105.0)
    put(tmp_path, "torch", "te-fp8-delayed", "fp8", 80.0)
    waited(tmp_path, "torch", "bf16", 0.02, 100.0)  # at the line: compared
    waited(tmp_path, "torch", "te-fp8-delayed", 0.05, 80.0)
    record = build_comparison(tmp_path, n_boot=200)
    reason = f"input-bound: waited 4.0 ms of 80.0 ms a step for its batch (5.0%); feed it faster: {FEED}"
    assert [s["label"] for s in record["speedups"]] == ["torch: te-bf16 over bf16"]
    assert record["excluded"] == [{"cell": "torch te-fp8-delayed", "reason": reason}]
    bound = next(c for c in record["cells"] if c["recipe"] == "te-fp8-delayed")
    assert bound["input_bound"] == reason and bound["data_wait"] == {"fraction": 0.05, "mean_ms": 4.0, "runs": 1}
    assert bound["tokens_per_s"]["value"] == pytest.approx(4 * 32 * 1000 / 80)  # its own speed stays shown
    assert next(c for c in record["cells"] if c["recipe"] == "bf16")["input_bound"] is None
    assert next(c for c in record["cells"] if c["recipe"] == "te-bf16")["data_wait"] is None  # recorded none
    assert [e["precision"] for e in record["conclusions"]["fastest"]] == ["bf16"]  # not ranked at fp8
    text = markdown.render(record)
    assert f"torch te-fp8-delayed: {reason}; its speed measures the data feeding" in text
    assert "| 1,600 (1,600–1,600) (input-bound) |" in text
    console = Console(record=True, width=400)
    terminal.render(record, console)
    shown = console.export_text()
    assert f"note: torch te-fp8-delayed is kept out of every speedup: {reason}" in shown
    assert "(input-bound)" in next(line for line in shown.splitlines() if "te-fp8-delayed" in line)
