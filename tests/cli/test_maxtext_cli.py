"""`parallax train --framework maxtext` and `parallax export-configs` through the real CLI:
every refusal is one line (exit 2) before any GPU work, and the whole train path — config,
subprocess, progress, metrics file, result — runs end to end against a fake MaxText trainer
(tests/fixtures/fake_maxtext.py; CI is Python 3.11, where real MaxText 0.2.5 cannot install,
so a real MaxText run of the tiny preset cannot happen in CI)."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from fixtures import fake_maxtext  # noqa: E402
from fixtures.cli import one_error_line  # noqa: E402
from parallax.cli import main  # noqa: E402
from parallax.engines.maxtext import child, metrics  # noqa: E402
from parallax.run.runner import Matrix  # noqa: E402

GPU_PACKAGES = {"maxtext": "0.2.5", "jax": "0.11.2", "jaxlib": "0.11.2", "jax_cuda13_plugin": "0.11.2",
                "qwix": "0.1.8", "numpy": "2.0"}


def fake_gpu(monkeypatch, name="NVIDIA H200", cc="9.0", packages=GPU_PACKAGES):
    from parallax.plan import envinfo

    ok = {"available": True, "error": None}
    probe = {"driver": ok, "nvml": ok, "devices": [{"index": 0, "name": name, "compute_capability": cc,
                                                    "uuid": "GPU-fake"}]}
    monkeypatch.setattr(envinfo, "probe_gpus", lambda: probe)
    monkeypatch.setattr(envinfo, "package_versions", lambda names=envinfo.PACKAGES: dict(packages))


def install_maxtext_here(folder: Path, monkeypatch) -> Path:
    """The fake MaxText importable here and in the subprocess, Python's version check lowered to
    this interpreter (CI is 3.11; the real check has its own test), Parallax's cache (parameter
    counts, converted weights) in ``folder``/cache."""
    root = fake_maxtext.install(folder / "site")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setattr("parallax.engines.maxtext.engine.MIN_PYTHON", sys.version_info[:2])
    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(folder / "cache"))
    fake_gpu(monkeypatch)
    return root


@pytest.fixture
def maxtext_here(tmp_path, monkeypatch):
    return install_maxtext_here(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def trained_once(tmp_path_factory):
    """``trained_once(*args)``: the folder of ``train(folder, *args)`` with the fake MaxText and a
    cache of its own (so the weights and the count are written, not read), run once for the
    tests that only read what that same command wrote."""
    made = {}

    def run(*args: str) -> Path:
        if args not in made:
            folder = tmp_path_factory.mktemp("maxtext-run")
            with pytest.MonkeyPatch.context() as mp:
                install_maxtext_here(folder, mp)
                assert train(folder, *args) == 0
            made[args] = folder
        return made[args]

    return run


def summary_text(result: dict) -> str:
    """The summary table `parallax train` prints, as text."""
    import io

    from rich.console import Console

    from parallax.run.progress import summary_table

    console = Console(file=io.StringIO(), width=300)
    console.print(summary_table(result))
    return console.file.getvalue()


def train(tmp_path, *args) -> int:
    return main(["train", "--framework", "maxtext", "--model", "tiny", "--steps", "6", "--warmup", "2",
                 "--output-dir", str(tmp_path / "run"), *args])


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="this interpreter is new enough for MaxText")
def test_python_older_than_3_12_is_one_line(tmp_path, capsys):
    assert train(tmp_path) == 2
    have = ".".join(map(str, sys.version_info[:2]))
    assert one_error_line(capsys) == (
        f"parallax: error: the maxtext engine needs Python >= 3.12 (MaxText requires it); this is Python {have}: "
        "use a 3.12+ environment and pip install 'slm-parallax[maxtext]'")
    assert not (tmp_path / "run" / "run.json").exists()


def test_missing_maxtext_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("parallax.engines.maxtext.engine.MIN_PYTHON", sys.version_info[:2])
    assert train(tmp_path) == 2
    assert one_error_line(capsys) == ("parallax: error: maxtext is not installed; install it with: "
                                      "pip install 'slm-parallax[maxtext]' (Python >= 3.12)")


def test_a_key_the_installed_base_yml_lacks_is_named(tmp_path, capsys, monkeypatch):
    root = fake_maxtext.install(tmp_path / "site", left_out=("learning_rate_final_fraction",))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr("parallax.engines.maxtext.engine.MIN_PYTHON", sys.version_info[:2])
    fake_gpu(monkeypatch)
    assert train(tmp_path) == 2
    base = root / "maxtext" / "configs" / "base.yml"
    assert one_error_line(capsys) == (
        f"parallax: error: MaxText 0.2.5 has no config key 'learning_rate_final_fraction' in {base}; Parallax "
        "writes the keys of MaxText 0.2.5: pip install 'maxtext==0.2.5'")


@pytest.mark.parametrize("recipe,name,cc,packages,expected", [
    ("fp8", "NVIDIA A100-SXM4-80GB", "8.0", GPU_PACKAGES,
     "maxtext recipe 'fp8' cannot run here: fp8 needs compute capability 8.9+; GPU 0 (8.0, Ampere) lacks it"),
    ("te_nvfp4", "NVIDIA H200", "9.0", dict(GPU_PACKAGES, transformer_engine_jax="2.20.2"),
     "maxtext recipe 'te_nvfp4' cannot run here: te_nvfp4 needs compute capability 10.0+; GPU 0 (9.0, Hopper) lacks it"),
    ("te_fp8_delayedscaling", "NVIDIA H200", "9.0", GPU_PACKAGES,
     "maxtext recipe 'te_fp8_delayedscaling' cannot run here: transformer_engine_jax not installed; "
     "pip install 'slm-parallax[maxtext]'"),
    ("fp8_gpu", "NVIDIA H200", "9.0", {k: v for k, v in GPU_PACKAGES.items() if k != "qwix"},
     "maxtext recipe 'fp8_gpu' cannot run here: qwix not installed; pip install 'slm-parallax[maxtext]'"),
])
def test_a_mode_this_gpu_or_installation_cannot_run_is_one_line(tmp_path, capsys, maxtext_here, monkeypatch,
                                                                 recipe, name, cc, packages, expected):
    fake_gpu(monkeypatch, name, cc, packages)
    assert train(tmp_path, "--recipe", recipe) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"parallax: error: {expected}"), line


def test_cpu_device_and_no_gpu_are_one_line(tmp_path, capsys, maxtext_here, monkeypatch):
    assert train(tmp_path, "--device", "cpu") == 2
    assert one_error_line(capsys) == ("parallax: error: the maxtext engine trains on an NVIDIA GPU (MaxText's "
                                      "hardware: gpu); drop --device cpu, or use --framework jax on the CPU")
    from parallax.plan import envinfo

    monkeypatch.setattr(envinfo, "probe_gpus", lambda: envinfo.no_gpu_probe("driver said no"))
    assert train(tmp_path) == 2
    assert one_error_line(capsys) == ("parallax: error: the maxtext engine needs an NVIDIA GPU; "
                                      "no NVIDIA GPU found (driver said no)")


def test_train_runs_maxtext_and_records_its_metrics_as_our_steps(trained_once):
    run_dir = trained_once() / "run"
    result = json.loads((run_dir / "run.json").read_text())
    assert result["status"] == "ok"
    assert (result["framework"]["name"], result["framework"]["version"], result["framework"]["tuning"]) == (
        "maxtext", "0.2.5", "tuned")
    # the key progress.py and the Markdown report read, as the torch and jax engines write it
    assert (result["framework"]["attention_backend"], result["framework"]["attention"]) == (
        "cudnn_flash_jax", "cudnn_flash_jax")
    assert "attention cudnn_flash_jax; compiled" in summary_text(result)
    unknown = {**result, "timing": {**result["timing"], "compile_s": None}}  # MaxText logged no AOT compile
    assert "compile / first step │ n/a" in summary_text(unknown)
    assert result["precision"]["recipe"] == "bf16" and result["precision"]["details"]["maxtext_keys"] == {
        "quantization": "", "use_qwix_quantization": False}
    step_s = {k: 0.05 + 0.001 * (k % 3) for k in range(1, 6)}
    # as the jax engine's: the ahead-of-time compile in MaxText's log (2.5 s) plus step 0 (0.2 s)
    assert result["timing"]["compile_s"] == pytest.approx(2.7) and result["per_step"]["step_ms"][0] == pytest.approx(200.0)
    weights_dir = result["framework"]["initial_weights"]["load_parameters_path"]
    compiled = result["engine_extra"]["maxtext"]["compile"]
    assert {k: compiled[k] for k in ("seconds", "method", "compile_from")} == {  # the window starts after the restore
        "seconds": 2.5, "method": metrics.COMPILE_METHOD,
        "compile_from": f"[process=0] [sync] Finished load in 0.14 seconds @ {weights_dir}"}
    assert (compiled["first_step_seconds"], compiled["time_to_first_step_s"]) == (pytest.approx(0.2), pytest.approx(2.7))
    assert result["timing"]["measured_steps"] == 4
    assert result["timing"]["step_ms"]["median"] == pytest.approx(statistics.median(
        [step_s[k] * 1e3 for k in range(2, 6)]))
    assert result["throughput"]["tokens_per_s"] == pytest.approx(1024 / 0.0515)
    assert (result["loss"]["first"], result["loss"]["final"]) == (pytest.approx(9.2), pytest.approx(8.7))
    mt = result["engine_extra"]["maxtext"]
    # MaxText's trainer through child.py, which adds the allocator's peak (the CPU keeps none)
    assert result["framework"]["command"][1:3] == ["-m", "parallax.engines.maxtext.child"]
    assert child.MEMORY_TAG + '{"peak_bytes_in_use": null' in (run_dir / "maxtext" / "train.log").read_text()
    assert result["memory"] == {"peak_allocated_bytes": None, "peak_reserved_bytes": None}
    assert mt["memory_method"].startswith("peak_bytes_in_use and peak_pool_bytes")
    assert (mt["parameters_logged_billion"], mt["parameters_agree"], mt["bytes_in_use_after_init_gb"]) == (
        0.001, True, 3.21)
    # the exact count, from MaxText's abstract model (count_params.py), not its three decimals
    assert (mt["parameters"], mt["parameters_exact_agree"], mt["parameters_reason"]) == (1_362_240, True, None)
    assert mt["parameters_method"].startswith("count_params.py (or initial_weights.py, which builds the same abstract model")
    assert "\nparallax-maxtext-parameters: 1362240\n" in (run_dir / "maxtext" / "initial_weights.log").read_text()
    assert mt["tokens_per_s_median"] == pytest.approx(statistics.median([1024 / step_s[k] for k in range(2, 6)]))
    assert mt["wallclock_tokens_per_s"] > 0
    assert result["data"]["maxtext_input"].startswith("dataset_type=synthetic: MaxText's own generated batch")
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(6))
    assert [s["grad_norm"] for s in steps] == [1.5 + k for k in range(6)]  # before clipping: raw_grad_norm
    # 6 steps inside the 20 warm-up steps: MaxText's ramp lr * step / 20 (one step behind ours)
    assert steps[4]["lr"] == pytest.approx(6e-4 * 4 / 20) and [s["measured"] for s in steps[:3]] == [False, False, True]
    config = yaml.safe_load((run_dir / "maxtext" / "maxtext-tiny-bf16.yml").read_text())
    assert (config["base_emb_dim"], config["per_device_batch_size"], config["steps"], config["dataset_type"]) == (
        64, 8, 6, "synthetic")
    assert config["metrics_file"] == str((run_dir / "maxtext" / "metrics.jsonl").resolve())
    assert "completed step: 5" in (run_dir / "maxtext" / "train.log").read_text()


def test_maxtext_starts_from_parallax_weights_of_the_runs_seed(tmp_path, capsys, maxtext_here):
    """The engine writes init_weights(tiny, 5) in MaxText's tree where load_parameters_path says,
    before MaxText starts (the fake trainer fails without it), and records it."""
    import numpy as np

    from parallax.spec.config import PRESETS
    from parallax.engines.maxtext.weights import to_maxtext
    from parallax.engines.weights import init_weights

    assert train(tmp_path, "--seed", "5") == 0
    run_dir = tmp_path / "run"
    result = json.loads((run_dir / "run.json").read_text())
    initial = result["framework"]["initial_weights"]
    weights_dir = Path(initial["load_parameters_path"])
    assert weights_dir.parent == tmp_path / "cache" / "maxtext-weights" and initial["cached_from"] is None
    config = yaml.safe_load((run_dir / "maxtext" / "maxtext-tiny-bf16.yml").read_text())
    assert config["load_parameters_path"] == str(weights_dir)
    assert (initial["source"], initial["seed"]) == ("parallax.engines.weights.init_weights", 5)
    assert not (run_dir / "maxtext" / "initial_weights").exists()  # the results stay small
    saved = np.load(weights_dir / "items" / "params.npz")
    expected = to_maxtext(init_weights(PRESETS["tiny"], 5), PRESETS["tiny"])  # tuned: scan_layers false
    assert sorted(saved.files) == sorted(f"params/params/{path}" for path in expected)
    for path, value in expected.items():
        np.testing.assert_array_equal(saved[f"params/params/{path}"], value)
    assert "restoring params from " + str(weights_dir) in (run_dir / "maxtext" / "train.log").read_text()


def test_the_defaults_tuning_writes_the_layers_stacked_on_the_scan_axis(trained_once):
    import numpy as np

    result = json.loads((trained_once("--recipe", "bf16-defaults") / "run" / "run.json").read_text())
    saved = np.load(Path(result["framework"]["initial_weights"]["load_parameters_path"]) / "items" / "params.npz")
    assert saved["params/params/decoder/layers/self_attention/query/kernel"].shape == (64, 2, 4, 16)


def test_the_parameter_count_of_a_model_is_made_once(tmp_path, capsys, maxtext_here, monkeypatch):
    """A benchmark's repeats count once: the second run of the same model reads the first's count
    (count_params.py costs ~20 s of CPU after each MaxText run); a failed count is not kept."""
    monkeypatch.setenv("FAKE_MAXTEXT_MODE", "count-fails")
    assert train(tmp_path) == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["engine_extra"]["maxtext"]["parameters"] is None
    monkeypatch.delenv("FAKE_MAXTEXT_MODE")
    shutil.rmtree(tmp_path / "run")
    assert train(tmp_path) == 0
    first = json.loads((tmp_path / "run" / "run.json").read_text())["engine_extra"]["maxtext"]
    assert (first["parameters"], (tmp_path / "run" / "maxtext" / "count_params.log").exists()) == (1_362_240, True)
    shutil.rmtree(tmp_path / "run")
    assert train(tmp_path) == 0
    again = json.loads((tmp_path / "run" / "run.json").read_text())["engine_extra"]["maxtext"]
    assert (again["parameters"], again["parameters_exact_agree"]) == (1_362_240, True)
    assert not (tmp_path / "run" / "maxtext" / "count_params.log").exists()
    assert "counted by count_params.py)" in again["parameters_method"]
    assert len(list((tmp_path / "cache" / "maxtext-parameters").glob("*.json"))) == 1


def test_the_weights_child_counts_the_parameters_so_no_count_runs_after_training(trained_once):
    """initial_weights.py builds MaxText's abstract model anyway: its count is kept, and the
    ~25 s count_params.py after training (which once pushed a cold fp8 run past its limit) is not run."""
    run_dir = trained_once() / "run"
    result = json.loads((run_dir / "run.json").read_text())["engine_extra"]["maxtext"]
    assert (result["parameters"], result["parameters_exact_agree"]) == (1_362_240, True)
    assert "counted by initial_weights.py)" in result["parameters_method"]
    assert "parallax-maxtext-parameters: 1362240" in (run_dir / "maxtext" / "initial_weights.log").read_text()
    assert not (run_dir / "maxtext" / "count_params.log").exists()


def test_a_run_no_longer_than_the_lr_warmup_gets_a_schedule_maxtext_accepts(tmp_path, capsys, maxtext_here):
    """10 steps, 20 warm-up steps: MaxText rejects a warmup_steps_fraction above 1, so the
    schedule is 22 steps long (20 of warm-up) and the run stops at step 10, as ours does."""
    assert train(tmp_path, "--steps", "10") == 0
    run_dir = tmp_path / "run"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ok"
    config = yaml.safe_load((run_dir / "maxtext" / "maxtext-tiny-bf16.yml").read_text())
    assert (config["steps"], config["learning_rate_schedule_steps"]) == (10, 22)
    assert int(22 * config["warmup_steps_fraction"]) == 20
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert [s["lr"] for s in steps] == pytest.approx([6e-4 * k / 20 for k in range(10)])


@pytest.mark.parametrize("mode,code,status,error", [
    ("fail", 3, "oom", "out of memory: MaxTextFailed: MaxText exited with status 1: jax.errors.JaxRuntimeError: "
                       "RESOURCE_EXHAUSTED: fake allocation of 99 GiB"),
    ("fail-jax", 1, "failed", "MaxTextFailed: MaxText exited with status 1: OSError: "
                              "/lib/x86_64-linux-gnu/libcudnn_heuristic.so.9: undefined symbol"),
    ("short", 1, "failed", "MaxTextFailed: MaxText's metrics file"),
    ("other-count", 1, "failed", "MaxTextFailed: MaxText built a model of 11,362,240 parameters; tiny has 1,362,240"),
    # another tree stops the run before MaxText trains: the weights could not be its initial weights
    ("other-model", 1, "failed", "MaxTextFailed: writing Parallax's initial weights for MaxText failed (status 1): "
                                 "parallax.errors.ParallaxError: MaxText's parameter 'decoder/logits_dense/kernel' "
                                 "has shape (64, 166250); the converted weights give (64, 10000)"),
])
def test_a_maxtext_run_that_fails_records_its_log_tail(tmp_path, capsys, maxtext_here, monkeypatch, mode, code,
                                                       status, error):
    monkeypatch.setenv("FAKE_MAXTEXT_MODE", mode)
    assert train(tmp_path) == code
    result = json.loads((tmp_path / "run" / "run.json").read_text())
    assert result["status"] == status
    assert result["error"].startswith(error), result["error"]
    tail = result["log_tail"]
    seen = {"fail": "RESOURCE_EXHAUSTED", "fail-jax": "JAX_TRACEBACK_FILTERING", "other-model": "ParallaxError"}
    assert seen.get(mode, "number parameters") in tail


def test_a_parameter_count_that_fails_is_null_with_the_reason(tmp_path, capsys, maxtext_here, monkeypatch):
    """count_params.py failing does not fail the run: null and its last line, never a number made up;
    the logged three-decimal figure is still checked."""
    monkeypatch.setenv("FAKE_MAXTEXT_MODE", "count-fails")
    assert train(tmp_path) == 0
    mt = json.loads((tmp_path / "run" / "run.json").read_text())["engine_extra"]["maxtext"]
    assert (mt["parameters"], mt["parameters_exact_agree"], mt["parameters_method"]) == (None, None, None)
    assert mt["parameters_reason"] == ("count_params.py exited with status 1: RuntimeError: fake: no parameter "
                                       "count today")
    assert (mt["parameters_logged_billion"], mt["parameters_agree"]) == (0.001, True)


def test_each_step_s_wait_in_maxtext_s_data_loader_is_recorded(trained_once):
    """The child wraps MaxText's DataLoader.load_next_batch: one wait a step, in steps.jsonl and
    summarised in run.json as the other engines' waits are."""
    run_dir = trained_once() / "run"
    result = json.loads((run_dir / "run.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    waits = [s["data_wait_ms"] for s in steps]
    assert len(waits) == 6 and all(w >= 0.0 for w in waits)
    assert result["timing"]["data_wait"]["total_ms"] == pytest.approx(sum(waits[2:]), rel=1e-12)
    assert result["framework"]["settings"]["grain_worker_count"] == 8
    assert result["framework"]["settings"]["grain_per_worker_buffer_size"] == 16


def test_a_slow_maxtext_feed_makes_the_run_input_bound(tmp_path, capsys, maxtext_here, monkeypatch):
    """A data loader planted to take 20 ms a batch, against the fake's 50-52 ms steps."""
    from parallax.analysis import comparability

    monkeypatch.setenv("FAKE_MAXTEXT_DATA_WAIT_S", "0.02")
    assert train(tmp_path) == 0
    result = json.loads((tmp_path / "run" / "run.json").read_text())
    steps = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").read_text().splitlines()]
    assert all(s["data_wait_ms"] >= 20.0 for s in steps)
    reason = comparability.input_bound(result)
    assert reason.startswith("input-bound: waited ") and reason.endswith(comparability.FEED_FASTER_DEFAULT)
    result["data"]["maxtext_input"] = "grain mmap_npy in Parallax's batch order: /runs/x/maxtext/data"
    assert comparability.input_bound(result).endswith(comparability.FEED_FASTER_GRAIN)


def test_the_defaults_recipe_runs_base_yml_settings_and_records_them(trained_once):
    run_dir = trained_once("--recipe", "bf16-defaults") / "run"
    result = json.loads((run_dir / "run.json").read_text())
    assert result["status"] == "ok" and result["precision"]["recipe"] == "bf16-defaults"
    assert result["precision"]["details"]["params"]["tuning"] == "defaults"
    assert (result["framework"]["tuning"], result["framework"]["settings"], result["framework"]["attention"]) == (
        "defaults", {"scan_layers": True, "remat_policy": "full", "attention": "autoselected", "grain_worker_count": 1,
                     "grain_per_worker_buffer_size": 1, "grain_num_threads": 16, "grain_prefetch_buffer_size": 500},
        "autoselected")
    config = yaml.safe_load((run_dir / "maxtext" / "maxtext-tiny-bf16-defaults.yml").read_text())
    assert (config["scan_layers"], config["remat_policy"], config["attention"], config["quantization"]) == (
        True, "full", "autoselected", "")


def test_the_benchmark_accepts_maxtext_cells():
    matrix = Matrix(("torch", "maxtext"), ("bf16", "fp8", "te_fp8_delayedscaling")).validate()
    assert [(c.framework, c.recipe) for c in matrix.cells()] == [
        ("torch", "bf16"), ("torch", "te-fp8-delayed"),
        ("maxtext", "bf16"), ("maxtext", "fp8_gpu"), ("maxtext", "te_fp8_delayedscaling")]


def test_the_benchmark_takes_the_defaults_tuning_as_a_second_maxtext_cell():
    matrix = Matrix(("torch", "jax", "maxtext"), ("bf16", "fp8", "maxtext:bf16-defaults"), repeats=2).validate()
    cells = [(c.framework, c.recipe, c.precision) for c in matrix.cells() if c.repeat == 0]
    assert cells == [("torch", "bf16", "bf16"), ("torch", "te-fp8-delayed", "fp8"), ("jax", "bf16", "bf16"),
                     ("jax", "flax-fp8-delayed", "fp8"), ("maxtext", "bf16", "bf16"),
                     ("maxtext", "bf16-defaults", "bf16"), ("maxtext", "fp8_gpu", "fp8")]
    assert "maxtext-bf16-defaults-seed0-rep1" in [c.id for c in matrix.cells()]


# ----------------------------------------------------------------------------- export-configs


def test_export_configs_writes_one_checked_yaml_per_maxtext_recipe(tmp_path, capsys):
    base = fake_maxtext.install(tmp_path / "site") / "maxtext" / "configs" / "base.yml"
    out = tmp_path / "configs"
    assert main(["export-configs", "--output-dir", str(out), "--base-yml", str(base)]) == 0
    captured = capsys.readouterr()
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"maxtext-llama-100m-{r}.yml" for r in (
        "bf16", "bf16-defaults", "fp8", "fp8_gpu", "te_fp8_delayedscaling", "te_fp8_currentscaling", "te_mxfp8",
        "te_nvfp4", "te_nvfp4_no_rht"))
    assert captured.out.split() == [str(out / n) for n in (
        "maxtext-llama-100m-bf16.yml", "maxtext-llama-100m-bf16-defaults.yml", "maxtext-llama-100m-fp8_gpu.yml",
        "maxtext-llama-100m-fp8.yml", "maxtext-llama-100m-te_fp8_delayedscaling.yml",
        "maxtext-llama-100m-te_fp8_currentscaling.yml", "maxtext-llama-100m-te_mxfp8.yml",
        "maxtext-llama-100m-te_nvfp4.yml", "maxtext-llama-100m-te_nvfp4_no_rht.yml")]
    said = " ".join(captured.err.split())  # wrapped to the terminal's width
    assert said == f"parallax: wrote 9 MaxText config(s) for llama-100m; keys checked against {base}"
    fp8 = yaml.safe_load((out / "maxtext-llama-100m-fp8_gpu.yml").read_text())
    assert (fp8["quantization"], fp8["use_qwix_quantization"], fp8["base_emb_dim"]) == ("fp8_gpu", True, 768)
    # each recipe's own tuning: bf16-defaults is bf16 with base.yml's performance settings
    bf16, defaults = (yaml.safe_load((out / f"maxtext-llama-100m-{r}.yml").read_text())
                      for r in ("bf16", "bf16-defaults"))
    settings = ("scan_layers", "remat_policy", "attention", "grain_worker_count", "grain_per_worker_buffer_size")
    assert [bf16[k] for k in settings] == [False, "minimal", "cudnn_flash_jax", 8, 16]
    assert [defaults[k] for k in settings] == [True, "full", "autoselected", 1, 1]
    assert {k: v for k, v in defaults.items() if k not in settings} == {
        k: v for k, v in bf16.items() if k not in settings}
    assert "tuning 'defaults'" in (out / "maxtext-llama-100m-bf16-defaults.yml").read_text()


def test_export_configs_tuning_given_applies_to_every_file(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["export-configs", "--output-dir", str(out), "--recipes", "bf16,bf16-defaults",
                 "--tuning", "tuned"]) == 0
    for recipe in ("bf16", "bf16-defaults"):
        keys = yaml.safe_load((out / f"maxtext-llama-100m-{recipe}.yml").read_text())
        assert (keys["scan_layers"], keys["remat_policy"]) == (False, "minimal")


def test_export_configs_any_preset_and_recipe_subset(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["export-configs", "--output-dir", str(out), "--model", "llama-860m", "--recipes", "fp8",
                 "--steps", "500", "--batch-size", "8", "--tuning", "defaults"]) == 0
    assert " ".join(capsys.readouterr().err.split()).endswith("keys not checked: MaxText is not installed here")
    (only,) = out.iterdir()
    keys = yaml.safe_load(only.read_text())
    assert (only.name, keys["base_emb_dim"], keys["base_num_decoder_layers"], keys["head_dim"], keys["steps"],
            keys["per_device_batch_size"], keys["remat_policy"]) == (
        "maxtext-llama-860m-fp8_gpu.yml", 2048, 16, 128, 500, 8, "full")


@pytest.mark.parametrize("steps,schedule", [(1, 22), (10, 22), (20, 22), (21, 22), (22, 22)])
def test_export_configs_takes_steps_below_the_measurement_warmup(tmp_path, capsys, steps, schedule):
    """Parallax's --warmup (20, left out of its statistics) is no MaxText key: any --steps works,
    and the file's schedule is ours (MaxText's warm-up fraction at most 1)."""
    out = tmp_path / "c"
    assert main(["export-configs", "--output-dir", str(out), "--recipes", "bf16", "--steps", str(steps)]) == 0
    keys = yaml.safe_load((out / "maxtext-llama-100m-bf16.yml").read_text())
    assert (keys["steps"], keys["learning_rate_schedule_steps"]) == (steps, schedule)
    assert keys["warmup_steps_fraction"] <= 1.0 and int(schedule * keys["warmup_steps_fraction"]) == 20


def test_export_configs_key_drift_is_one_line_and_writes_nothing(tmp_path, capsys):
    base = fake_maxtext.install(tmp_path / "site", left_out=("adamw_mask",)) / "maxtext" / "configs" / "base.yml"
    out = tmp_path / "configs"
    assert main(["export-configs", "--output-dir", str(out), "--base-yml", str(base)]) == 2
    assert one_error_line(capsys) == (f"parallax: error: this MaxText has no config key 'adamw_mask' in {base}; "
                                      "Parallax writes the keys of MaxText 0.2.5: pip install 'maxtext==0.2.5'")
    assert not out.exists()


def test_export_configs_unknown_recipe_is_one_line(tmp_path, capsys):
    assert main(["export-configs", "--output-dir", str(tmp_path), "--recipes", "te-fp8-delayed"]) == 2
    assert one_error_line(capsys).startswith(
        "parallax: error: no framework of maxtext has a recipe 'te-fp8-delayed'")


def test_the_report_puts_maxtexts_own_figures_beside_ours(tmp_path, capsys, trained_once):
    results = trained_once()
    result = json.loads((results / "run" / "run.json").read_text())
    mt = result["engine_extra"]["maxtext"]
    assert mt["wallclock_tokens_per_s_median"] > 0
    assert main(["compare", "--results-dir", str(results), "--output-report", str(tmp_path / "report.md")]) == 0
    text = (tmp_path / "report.md").read_text()
    section = text[text.index("## MaxText's own figures"):].split("\n\n")[1]
    row = section.splitlines()[2]
    ours = result["throughput"]["tokens_per_s"]
    logged = mt["tokens_per_s_median"]
    assert row.startswith(f"| bf16 | {ours:,.0f} | {logged:,.0f} ({logged / ours - 1:+.2%}) | ")
    assert row.endswith(" | 1,362,240 |")
    differences = text[text.index("## MaxText's own figures"):].split("\n\n")[3]
    assert differences.startswith("MaxText trains the same function") and "wq/√head_dim" in differences


def test_a_repeat_reuses_the_checkpoint_and_the_cache_keeps_the_newest(tmp_path, capsys, maxtext_here, monkeypatch):
    """The same model, mode, layout and seed convert once; another seed is another checkpoint;
    beyond WEIGHTS_CACHE_KEEP the least recently used go."""
    from parallax.engines.maxtext import launch

    def initial(name, *args):
        assert main(["train", "--framework", "maxtext", "--model", "tiny", "--steps", "6", "--warmup", "2",
                     "--output-dir", str(tmp_path / name), *args]) == 0
        return json.loads((tmp_path / name / "run.json").read_text())["framework"]["initial_weights"]

    first, again = initial("a", "--seed", "1"), initial("b", "--seed", "1")
    assert again["load_parameters_path"] == first["load_parameters_path"]
    assert (first["cached_from"], again["cached_from"]) == (None, first["load_parameters_path"])
    assert (tmp_path / "b" / "maxtext" / "initial_weights.log").read_text().startswith("kept from an earlier run")
    monkeypatch.setattr(launch, "WEIGHTS_CACHE_KEEP", 1)
    other = initial("c", "--seed", "2")
    assert other["load_parameters_path"] != first["load_parameters_path"] and other["cached_from"] is None
    assert sorted(p.name for p in (tmp_path / "cache" / "maxtext-weights").iterdir()) == [
        Path(other["load_parameters_path"]).name]


def our_windows(prepared, result: dict, steps: int) -> list[str]:
    """The SHA-256 of each of the first ``steps`` batches of windows our loader draws for a run
    (as the torch and JAX engines train on them)."""
    import hashlib

    import numpy as np

    from parallax.data.loader import TokenBatches

    cfg = result["config"]
    with TokenBatches(prepared, batch_size=cfg["batch_size"], seq_len=cfg["seq_len"], seed=cfg["seed"],
                      vocab_size=10_000, pin=False) as batches:
        drawn = [np.array(w, dtype=np.int32) for w, _ in zip(batches, range(steps))]
    return [hashlib.sha256(w.tobytes()).hexdigest() for w in drawn]


def test_real_tokens_reach_maxtext_as_our_loaders_batches(tmp_path, capsys, maxtext_here, prepared):
    """By default MaxText trains on the batches our loader draws, handed to its DataLoader in its
    process (engines/maxtext/feed.py): the fake trainer fingerprints every batch it was given."""
    import re

    from parallax.engines.maxtext import feed

    assert train(tmp_path, "--data", str(prepared.directory)) == 0
    run_dir = tmp_path / "run"
    result = json.loads((run_dir / "run.json").read_text())
    seen = re.findall(r"fake batch (\d+): (.*)$", (run_dir / "maxtext" / "train.log").read_text(), re.M)
    assert [int(step) for step, _ in seen] == list(range(6))
    b, s = result["config"]["batch_size"], result["config"]["seq_len"]
    tail = f" positions {b * s * (s - 1) // 2} segments {b * s}+{b * s} shape {b}x{s}"
    assert [text for _, text in seen] == [sha + tail for sha in our_windows(prepared, result, 6)]
    assert result["data"]["maxtext_input"] == f"{feed.DESCRIPTION}: {prepared.directory}"
    yml = yaml.safe_load((run_dir / "maxtext" / "maxtext-tiny-bf16.yml").read_text())
    assert yml["dataset_type"] == "synthetic" and "grain_train_files" not in yml
    assert not (run_dir / "maxtext" / "data").exists()


def test_a_maxtext_whose_loader_cannot_take_our_batches_fails_the_run(tmp_path, capsys, maxtext_here, prepared,
                                                                       monkeypatch):
    """A DataLoader without load_next_batch_pre_sharding: the child stops before training, so
    no run trains on MaxText's own synthetic batch under a real-token label."""
    monkeypatch.setenv("FAKE_MAXTEXT_MODE", "old-loader")
    assert train(tmp_path, "--data", str(prepared.directory)) == 1
    result = json.loads((tmp_path / "run" / "run.json").read_text())
    assert result["status"] == "failed"
    assert "has no load_next_batch_pre_sharding" in result["error"] and "--tuning grain" in result["error"]
