"""Stock tuning (spec/tuning.py): knob sets named, validated, applied by the engines, recorded in
run.json, kept apart by comparability and judged by the report's tuning section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.fake_runs import ok_run, steps_from, tiny_config

from parallax import plans
from parallax.analysis import comparability
from parallax.analysis.compare import build_comparison
from parallax.analysis.report import markdown
from parallax.errors import ParallaxError
from parallax.run import train
from parallax.run.runner import Matrix
from parallax.spec import registry, tuning
from parallax.spec.config import RunConfig
from parallax.store import results


def test_every_framework_has_a_default_knob_set_without_knobs():
    for framework in ("torch", "jax", "maxtext"):
        assert tuning.get(framework, "default").knobs == {}
    assert tuning.get("jax", "lhs-no-triton-gemm").knobs == {
        "xla_flags": ["--xla_gpu_enable_latency_hiding_scheduler=true", "--xla_gpu_enable_triton_gemm=false"]}
    assert tuning.get("torch", "reduce-overhead").knobs == {"compile_mode": "reduce-overhead"}


@pytest.mark.parametrize("changes, message", [
    ({"tuning": "fast"}, "unknown --tuning 'fast' for torch; choose one of: tuned, default, reduce-overhead, "
                         "coordinate-descent, max-autotune-no-cudagraphs, max-autotune"),
    ({"framework": "jax", "tuning": "reduce-overhead"},
     "unknown --tuning 'reduce-overhead' for jax (a knob set of torch, not of jax); choose one of: tuned, default, "
     "lhs,"),
    ({"recipe": "te-fp8-delayed", "precision": "fp8", "tuning": "reduce-overhead"},
     "--tuning reduce-overhead replays the compiled step as CUDA graphs, but recipe torch:te-fp8-delayed compiles "
     "only its glue and captures its blocks itself (--cuda-graphs); choose another knob set: default, "
     "coordinate-descent, max-autotune-no-cudagraphs"),
    ({"compile": False, "tuning": "coordinate-descent"},
     "--tuning coordinate-descent sets torch.compile's knobs; drop --no-compile or use --tuning default"),
])
def test_a_knob_set_the_run_cannot_take_is_one_line(changes, message):
    run = RunConfig.for_preset("tiny", steps=4, warmup=1, device="cpu", **changes)
    with pytest.raises(ParallaxError) as err:
        run.validate()
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_tuned_resolves_through_the_table_and_says_what_it_ran(monkeypatch):
    bf16 = registry.get("jax", "bf16")
    assert tuning.record("jax", bf16, "tuned") == {"name": "tuned", "knob_set": "default", "knobs": {}}
    monkeypatch.setitem(tuning.TUNED, ("jax", "bf16"), "lhs")
    assert tuning.record("jax", bf16, "tuned") == {
        "name": "tuned", "knob_set": "lhs", "knobs": {"xla_flags": ["--xla_gpu_enable_latency_hiding_scheduler=true"]}}
    assert tuning.record("jax", registry.get("jax", "te-fp8-delayed"), "tuned")["knob_set"] == "default"


def test_the_tuning_plan_makes_one_cell_per_knob_set_its_recipe_takes():
    plan = plans.load("tuning")
    values = plan.values
    matrix = Matrix(tuple(values["frameworks"]), tuple(values["precisions"] + values["recipes"]),
                    tunings=tuple(values["tunings"]), base=RunConfig.for_preset("tiny", steps=3, warmup=1))
    ids = [c.id for c in matrix.cells()]
    assert ids == [
        "torch-bf16-seed0-rep0", "torch-bf16+reduce-overhead-seed0-rep0", "torch-bf16+coordinate-descent-seed0-rep0",
        "torch-te-fp8-delayed-seed0-rep0", "torch-te-fp8-delayed+coordinate-descent-seed0-rep0",
        "jax-bf16-seed0-rep0", "jax-bf16+lhs-no-triton-gemm-seed0-rep0", "jax-bf16+command-buffers-seed0-rep0",
        "jax-bf16+lhs-no-triton-gemm-cb-seed0-rep0", "jax-te-fp8-delayed-seed0-rep0",
        "jax-te-fp8-delayed+lhs-no-triton-gemm-seed0-rep0", "jax-te-fp8-delayed+command-buffers-seed0-rep0",
        "jax-te-fp8-delayed+lhs-no-triton-gemm-cb-seed0-rep0", "maxtext-bf16-seed0-rep0",
        "maxtext-bf16+lhs-no-triton-gemm-seed0-rep0", "maxtext-te_fp8_delayedscaling-seed0-rep0",
        "maxtext-te_fp8_delayedscaling+lhs-no-triton-gemm-seed0-rep0"]
    assert not any(tuning.get(c.framework, c.tuning).slow for c in matrix.cells())
    assert matrix.run_config(matrix.cells()[1], Path("x")).tuning == "reduce-overhead"


def test_a_tunings_entry_of_a_framework_not_in_the_matrix_is_refused():
    with pytest.raises(ParallaxError, match=r"^--tunings jax:lhs: jax is not among --frameworks \(torch\)"):
        Matrix(("torch",), ("bf16",), tunings=("jax:lhs",), base=RunConfig.for_preset("tiny")).validate()
    with pytest.raises(ParallaxError, match=r"^--tuning reduce-overhead replays the compiled step as CUDA graphs, "
                                            r"but recipe torch:te-fp8-delayed"):
        Matrix(("torch",), ("te-fp8-delayed",), tunings=("torch:reduce-overhead",),
               base=RunConfig.for_preset("tiny")).validate()


# --- the engines apply the knobs and run.json records them

def _tiny(tmp_path, **changes) -> RunConfig:
    folder = str(tmp_path / changes.pop("name", "run"))
    return RunConfig.for_preset("tiny", **{"steps": 3, "warmup": 1, "device": "cpu", "compile": False,
                                           "batch_size": 2, "seq_len": 16, "output_dir": folder, **changes})


def test_tuned_without_an_entry_trains_exactly_as_default_and_says_so(tmp_path):
    pytest.importorskip("torch")
    default = train.run_training(_tiny(tmp_path, name="a"))
    tuned = train.run_training(_tiny(tmp_path, name="b", tuning="tuned"))
    assert [s["loss"] for s in results.load_steps(tmp_path / "a")] == \
        [s["loss"] for s in results.load_steps(tmp_path / "b")]
    assert default["tuning"] == {"name": "default", "knob_set": "default", "knobs": {}}
    assert tuned["tuning"] == {"name": "tuned", "knob_set": "default", "knobs": {}}
    assert default["framework"]["compile_mode"] is None and default["framework"]["inductor_options"] == {}


def test_torch_runs_the_knob_sets_compile_mode_and_inductor_options(tmp_path, monkeypatch):
    """The mode reaches hooks.compile (replaced by eager here: inductor on the CPU takes minutes)."""
    pytest.importorskip("torch")
    from parallax.engines.torch.recipes.base import TorchHooks

    modes = []
    monkeypatch.setattr(TorchHooks, "compile", lambda self, torch, module, mode: modes.append(mode) or module)
    run = train.run_training(_tiny(tmp_path, name="ro", compile=True, tuning="reduce-overhead"))
    assert run["status"] == "ok" and modes == ["reduce-overhead"]
    assert run["framework"]["compile_mode"] == "reduce-overhead"
    assert run["tuning"]["knobs"] == {"compile_mode": "reduce-overhead"}
    run = train.run_training(_tiny(tmp_path, name="cd", compile=True, tuning="coordinate-descent"))
    assert modes == ["reduce-overhead", "default"]
    assert run["framework"]["inductor_options"] == {"coordinate_descent_tuning": True}


def test_a_jax_knob_set_reaches_xla_flags_of_the_run(tmp_path):
    """In a process of its own: XLA reads XLA_FLAGS once, when JAX starts."""
    pytest.importorskip("jax")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = {}
    for knob_set in ("default", "lhs-no-triton-gemm"):
        folder = tmp_path / knob_set
        done = subprocess.run([sys.executable, "-m", "parallax", "train", "--framework", "jax", "--model", "tiny",
                               "--batch-size", "2", "--seq-len", "16", "--steps", "3", "--warmup", "1", "--device",
                               "cpu", "--tuning", knob_set, "--output-dir", str(folder)],
                              env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        out[knob_set] = json.loads((folder / "run.json").read_text())
    tuned = out["lhs-no-triton-gemm"]
    assert tuned["framework"]["xla_flags"] == ("--xla_gpu_enable_latency_hiding_scheduler=true "
                                               "--xla_gpu_enable_triton_gemm=false")
    assert tuned["tuning"]["knob_set"] == "lhs-no-triton-gemm"
    assert out["default"]["framework"]["xla_flags"] == ""
    # GPU code-generation flags: the CPU's arithmetic is the default's, bit for bit
    assert tuned["per_step"]["loss"] == out["default"]["per_step"]["loss"]


# --- comparability and the report

def _facts(knob_set: str, recipe: str = "bf16") -> dict:
    run = {"config": {"framework": "jax", "recipe": recipe}, "framework": {"name": "jax", "xla_flags": ""},
           "recipe": {}}
    if knob_set != "default":
        flags = tuning.get("jax", knob_set).xla_flags
        run["framework"]["xla_flags"] = " ".join(flags)
        run["tuning"] = {"name": knob_set, "knob_set": knob_set, "knobs": {"xla_flags": list(flags)}}
    return comparability.facts(run)


def test_knob_sets_differ_only_in_a_tuning_comparison():
    lhs, default = _facts("lhs"), _facts("default")
    found = comparability.differences(lhs, default, "recipe")
    assert [(d.fact, d.scope, d.a, d.b) for d in found] == [("tuning", "tuning", "lhs", "default")]
    assert comparability.differences(lhs, default, "framework") == found
    assert comparability.differences(lhs, default, "tuning") == []
    assert comparability.differences(_facts("lhs"), _facts("lhs", "te-fp8-delayed"), "recipe") == []
    assert comparability.facts({"config": {}})["tuning"] == ("tuning", "default")  # a run.json from before


def _write(root: Path, knob_set: str, step_ms: float, loss_shift: float) -> None:
    run = tiny_config(framework="torch", recipe="bf16", tuning=knob_set)
    cell = f"torch-bf16{'' if knob_set == 'default' else '+' + knob_set}-seed0-rep0"
    steps = steps_from([step_ms] * run.steps, [9.0 - 0.1 * i + (loss_shift if i > 5 else 0.0)
                                               for i in range(run.steps)], run.warmup)
    record = ok_run(run.replace(output_dir=str(root / "runs" / cell)), steps, compile_s=2.0 + step_ms / 100)
    record["tuning"] = tuning.record("torch", registry.get("torch", "bf16"), knob_set)
    results.write_run(root / "runs" / cell, record, steps)


def test_the_tuning_section_ratios_compile_times_loss_and_the_winner(tmp_path):
    _write(tmp_path, "default", 100.0, 0.0)
    _write(tmp_path, "reduce-overhead", 80.0, 0.01)
    _write(tmp_path, "coordinate-descent", 50.0, 0.5)  # fastest, but beyond the loss band
    record = build_comparison(tmp_path, n_boot=200)
    section = record["tuning"]
    rows = {r["knob_set"]: r for r in section["rows"]}
    assert list(rows) == ["default", "coordinate-descent", "reduce-overhead"]
    assert rows["default"]["tokens_per_s"]["value"] == pytest.approx(1280.0)  # 4 x 32 tokens / 100 ms
    assert rows["reduce-overhead"]["ratio"] == pytest.approx(1.25) and rows["reduce-overhead"]["ci"] == \
        pytest.approx([1.25, 1.25])
    assert rows["coordinate-descent"]["ratio"] == pytest.approx(2.0)
    assert rows["reduce-overhead"]["compile_s"] == pytest.approx(2.8)
    assert rows["reduce-overhead"]["loss_gap"] == pytest.approx(0.01)
    assert rows["coordinate-descent"]["loss_gap"] == pytest.approx(0.5) and rows["coordinate-descent"]["moves_loss"]
    assert section["winners"] == [{"framework": "torch", "recipe": "bf16", "gpus": 1, "knob_set": "reduce-overhead",
                                   "ratio": pytest.approx(1.25), "ci": pytest.approx([1.25, 1.25]),
                                   "beats_default": True, "moved_loss": ["coordinate-descent"]}]
    assert section["tuned_table"] == ('TUNED: dict[tuple[str, str], str] = {\n'
                                      '    ("torch", "bf16"): "reduce-overhead",  # 1.250x [1.250, 1.250]\n}')
    text = markdown.render(record)
    assert ("| torch | bf16 | coordinate-descent | 2,560 (2,560–2,560) | 2.000× (2.000×–2.000×) faster | 2.5 s | "
            "0.500 **moves the loss** |") in text
    assert "| torch | bf16 | reduce-overhead | 1.250× (1.250×–1.250×) | yes | coordinate-descent |" in text
    # the main tables keep the default row beside the tuned ones
    names = [c["recipe"] for c in record["cells"]]
    assert names == ["bf16", "bf16+coordinate-descent", "bf16+reduce-overhead"]


def test_recipe_speedups_pair_cells_of_one_knob_set(tmp_path):
    """te-fp8-delayed+lhs over bf16+lhs, never over bf16: the report's ratios stay within a knob set."""
    for recipe, fmt, ms in (("bf16", "bf16", 100.0), ("te-fp8-delayed", "fp8", 80.0)):
        for knob_set, speed in (("default", 1.0), ("lhs", 0.9)):
            run = tiny_config(framework="jax", recipe=recipe, precision=fmt, tuning=knob_set)
            cell = f"jax-{recipe}{'' if knob_set == 'default' else '+' + knob_set}-seed0-rep0"
            steps = steps_from([ms * speed] * run.steps, [9.0 - 0.1 * i for i in range(run.steps)], run.warmup)
            record = ok_run(run.replace(output_dir=str(tmp_path / "runs" / cell)), steps)
            record["tuning"] = tuning.record("jax", registry.get("jax", recipe), knob_set)
            record["framework"]["xla_flags"] = " ".join(tuning.get("jax", knob_set).xla_flags)
            results.write_run(tmp_path / "runs" / cell, record, steps)
    record = build_comparison(tmp_path, n_boot=100)
    assert [(s["label"], round(s["ratio"], 4)) for s in record["speedups"]] == [
        ("jax: te-fp8-delayed over bf16", 1.25), ("jax: te-fp8-delayed+lhs over bf16+lhs", 1.25)]
    assert [(r["recipe"], r["knob_set"], round(r["ratio"], 4)) for r in record["tuning"]["rows"]] == [
        ("bf16", "default", 1.0), ("bf16", "lhs", 1.1111), ("te-fp8-delayed", "default", 1.0),
        ("te-fp8-delayed", "lhs", 1.1111)]
    fastest = record["conclusions"]["fastest"]
    assert [(c["precision"], c["recipe"]) for c in fastest] == [("bf16", "bf16+lhs"), ("fp8", "te-fp8-delayed+lhs")]
