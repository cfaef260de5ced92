"""``parallax profile`` through the real command line on the CPU: torch and JAX tiny end to end
(CPU operators, no limits), a finished run's configuration (--from-run), --compare and its
refusals, every bad input as one line with exit 2."""

from __future__ import annotations

import json
import re

import pytest

from fixtures.cli import one_error_line

from parallax.cli import main
from parallax.spec.config import RunConfig

SMALL = ["--model", "tiny", "--batch-size", "2", "--seq-len", "64", "--device", "cpu", "--warmup", "1",
         "--steps", "2"]
KERNEL_CLASSES = ["gemm-bf16", "gemm-fp8", "gemm-fp4", "attention-fwd", "attention-bwd", "quantize", "elementwise",
                  "optimizer", "communication", "memcpy", "other"]


# What the progress says in a log for SMALL's --warmup 1 --steps 2: the timed steps are told together
PROGRESS = ["warm-up step 1/1", "timed step 2/2", "profiled step 1/2", "profiled step 2/2"]


def progress_lines(err: str) -> list[str]:
    return [row for row in err.splitlines() if re.fullmatch(r"(warm-up|timed|profiled) step \d+/\d+", row)]


def check_cpu_profile(out, framework: str) -> dict:
    """The files of a CPU profile and what every one of them must say; the record."""
    record = json.loads((out / "profile.json").read_text())
    assert record["schema"] == "parallax.profile/1" and record["title"] == f"{framework} bf16"
    assert record["on_gpu"] is False and record["framework"]["name"] == framework
    classes = {row["class"]: row for row in record["classes"]}
    assert [row["class"] for row in record["classes"]][:len(KERNEL_CLASSES)] == KERNEL_CLASSES
    assert "host gaps" in classes
    assert sum(row["share"] for row in record["classes"]) == pytest.approx(1.0)
    assert sum(row["ms_per_step"] for row in record["classes"]) == pytest.approx(record["timing"]["step_ms"])
    for name in ("gemm-bf16", "attention-fwd", "attention-bwd", "elementwise", "optimizer"):
        assert classes[name]["ms_per_step"] > 0, name  # the scopes and names found each class's operators
    assert classes["gemm-bf16"]["achieved"] > 0 and classes["gemm-bf16"]["limit"] is None
    assert {row["limit_source"] for row in record["classes"] if row["work"] is not None} == {"n/a on the CPU"}
    assert record["busy"]["method"] == "union of the kernel intervals"
    assert record["limits"]["attention"]["forward"] == {"value": None, "source": "n/a on the CPU"}
    md = (out / "profile.md").read_text()
    assert md.startswith(f"# Where the step goes: {framework} bf16\n")
    assert "- limits: n/a on the CPU (no GPU: the CPU operators were profiled, and no class has a limit here)" in md
    assert "| host gaps |" in md and "| step (without the profiler) |" in md
    assert (out / "profile.png").stat().st_size > 0
    return record


def test_torch_tiny_on_the_cpu(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    out = tmp_path / "torch"
    assert main(["profile", "--framework", "torch", *SMALL, "--no-compile", "--output-dir", str(out),
                 "--keep-trace"]) == 0
    said = capsys.readouterr()
    assert progress_lines(said.err) == PROGRESS  # one line a step: the stages are shorter than ten
    line = " ".join(said.out.split())  # wrapped to the terminal
    assert line.startswith("parallax profile: torch bf16: ") and line.rstrip().endswith(f"-> {out / 'profile.md'}")
    record = check_cpu_profile(out, "torch")
    assert record["config"]["steps"] == 1 + 2 * 2 and record["config"]["compile"] is False
    assert record["timing"]["timed_steps"] == 2 and record["busy"]["profiled_steps"] == 2
    assert (out / "trace.json.gz").stat().st_size > 0


def test_the_child_of_a_torch_profile_shows_its_progress_on_the_stderr_it_inherits(tmp_path, capfd):
    """On a GPU a torch profile runs in a child process (run/profile_child.py): its steps are
    counted there, on the stderr it shares with the command. The same child, on the CPU."""
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    from parallax.run import profile_child

    run = RunConfig(framework="torch", model="tiny", batch_size=2, seq_len=64, device="cpu", compile=False)
    code, record = profile_child.profile(run.to_dict(), 3, 2, tmp_path / "child")
    assert code == 0 and record["timing"]["warmup_steps"] == 3
    assert progress_lines(capfd.readouterr().err) == [f"warm-up step {k}/3" for k in (1, 2, 3)] + PROGRESS[1:]


def test_jax_tiny_from_a_finished_runs_folder(tmp_path, capsys):
    pytest.importorskip("jax")
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    config = RunConfig(framework="jax", model="tiny", batch_size=2, seq_len=64, device="cpu", steps=40, warmup=5,
                       eval_every=10)
    (run / "run.json").write_text(json.dumps({"status": "ok", "config": config.to_dict()}))
    out = tmp_path / "jax"
    assert main(["profile", "--from-run", str(run), "--warmup", "3", "--steps", "2", "--output-dir", str(out)]) == 0
    assert progress_lines(capsys.readouterr().err) == [f"warm-up step {k}/3" for k in (1, 2, 3)] + PROGRESS[1:]
    record = check_cpu_profile(out, "jax")
    # the run's configuration, with the profile's steps and no evaluation
    assert (record["config"]["steps"], record["config"]["warmup"], record["config"]["eval_every"]) == (7, 3, 0)
    assert record["framework"]["attention"] == "xla" and not (out / "trace.xplane.tar.gz").exists()


def profile_json(folder, title: str, uuid: str, step_ms: float) -> str:
    """A minimal profile.json of ``title`` on the H200 ``uuid``."""
    classes = [{"class": c, "ms_per_step": 1.0, "share": 1.0 / step_ms, "fraction": 0.5 if c == "gemm-bf16" else None}
               for c in KERNEL_CLASSES]
    record = {"schema": "parallax.profile/1", "title": title, "config": {"gpus": 1},
              "framework": {"name": title.split()[0], "device": "cuda:0"},
              "environment": {"hostname": "h200", "gpus": [{"name": "NVIDIA H200", "uuid": uuid}]},
              "timing": {"step_ms": step_ms}, "busy": {"ms_per_step": 11.0},
              "classes": classes + [{"class": "host gaps", "ms_per_step": step_ms - 11.0,
                                     "share": (step_ms - 11.0) / step_ms}]}
    folder.mkdir()
    (folder / "profile.json").write_text(json.dumps(record))
    return str(folder / "profile.json")


def test_compare_writes_the_three_files(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a = profile_json(tmp_path / "a", "torch bf16", "GPU-aaaa", 20.0)
    b = profile_json(tmp_path / "b", "torch te-fp8-delayed", "GPU-aaaa", 16.0)
    out = tmp_path / "cmp"
    assert main(["profile", "--compare", a, b, "--output-dir", str(out)]) == 0
    assert capsys.readouterr().out == f"parallax profile: torch bf16 vs torch te-fp8-delayed -> {out / 'profile_compare.md'}\n"
    compared = json.loads((out / "profile_compare.json").read_text())
    rows = {r["class"]: r for r in compared["rows"]}
    assert rows["step (without the profiler)"]["delta_ms"] == [-4.0] and rows["host gaps"]["ms_per_step"] == [9.0, 5.0]
    assert rows["gemm-bf16"]["fraction"] == [0.5, 0.5]
    md = (out / "profile_compare.md").read_text()
    assert md.startswith("# Where the step goes: torch bf16 vs torch te-fp8-delayed\n")
    assert "| host gaps | 9.000 (45.0%) | 5.000 (31.2%) | -4.000 |  |  |" in md.splitlines()
    assert (out / "profile_compare.png").stat().st_size > 0


def test_compare_refuses_two_machines_unless_asked(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a = profile_json(tmp_path / "a", "torch bf16", "GPU-aaaa1111", 20.0)
    b = profile_json(tmp_path / "b", "jax bf16", "GPU-bbbb2222", 18.0)
    out = tmp_path / "cmp"
    assert main(["profile", "--compare", a, b, "--output-dir", str(out)]) == 2
    assert one_error_line(capsys) == (
        f"parallax: error: refusing to compare profiles of two machines: {a} ran on NVIDIA H200 aaaa1111, {b} on "
        "NVIDIA H200 bbbb2222; profile both on one machine, or pass --cross-machine")
    assert not (out / "profile_compare.md").exists()
    assert main(["profile", "--compare", a, b, "--cross-machine", "--output-dir", str(out)]) == 0


@pytest.mark.parametrize("args, message", [
    (["--compare", "a.json"], "--compare needs two or more profile.json files"),
    (["a.json", "b.json"], "'a.json': files are read with --compare only; pass --compare A.json B.json"),
    (["--compare", "a.json", "b.json", "--framework", "jax"], "--compare reads finished profiles; drop --framework"),
    (["--compare", "missing/a.json", "missing/b.json"], "--compare missing/a.json: not a readable profile.json"),
    (["--cross-machine"], "--cross-machine goes with --compare; drop it"),
    (["--steps", "0"], "--warmup and --steps must be at least 1, got 15 and 0"),
    (["--warmup", "0"], "--warmup and --steps must be at least 1, got 0 and 5"),
    (["--recipe", "te-fp9"], "unknown recipe 'te-fp9' for torch"),
    (["--config", "c.json", "--from-run", "r"], "--config and --from-run both give the whole run; pass one of them"),
    (["--from-run", "nowhere"], "--from-run nowhere: nowhere/run.json: No such file or directory; pass a run's output "
                                "folder"),
    (["--from-run", "nowhere", "--model", "tiny"], "--from-run carries the whole run; drop --model"),
    (["--model", "tiny", "--device", "cpu", "--precision", "fp8"], "recipe 'te-fp8-delayed'"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, monkeypatch, capsys, args, message):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    assert main(["profile", *args, "--output-dir", str(tmp_path / "out")]) == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "out" / "profile.json").exists()


def test_a_config_file_is_the_whole_run_with_the_profiles_steps(tmp_path):
    from parallax.cli import profile as profile_cli

    config = tmp_path / "cell.json"
    config.write_text(json.dumps(RunConfig.for_preset("tiny", framework="jax", device="cpu", eval_every=5).to_dict()))
    options = {name: None for name in ("framework", "precision", "recipe", "model", "batch_size", "seq_len", "seed",
                                       "data", "cuda_graphs", "device")}
    options.update(synthetic=False, hf=False, no_compile=False)
    plan, note = profile_cli._plan(options, str(config), None, warmup=3, steps=4)
    assert note is None and (plan.run.framework, plan.run.model, plan.recipe.name) == ("jax", "tiny", "bf16")
    assert (plan.run.steps, plan.run.warmup, plan.run.eval_every) == (3 + 2 * 4, 3, 0)


def test_a_run_of_several_gpus_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"config": RunConfig(gpus=4).to_dict()}))
    assert main(["profile", "--from-run", str(run), "--output-dir", str(tmp_path / "out")]) == 2
    assert one_error_line(capsys) == ("parallax: error: parallax profile measures one GPU; this run used --gpus 4 "
                                      "(profile its per-GPU step with the same options and no --gpus)")


def test_help_names_the_maxtext_path(capsys):
    assert main(["profile", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "MaxText (--framework maxtext) runs in its own process with its own profiler" in text
    assert "--from-run DIR" in text and "--keep-trace" in text and "[default: 15]" in text


# --- MaxText, profiled by MaxText (the fake of tests/fixtures/fake_maxtext.py) ----------------------

@pytest.fixture
def fake_maxtext_gpu(tmp_path, monkeypatch):
    """The fake MaxText importable here and in its subprocess, an H200 as the probe sees it (no
    driver behind it: cuBLASLt cannot run), and Python's version check lowered to this interpreter."""
    import sys

    from fixtures import fake_maxtext
    from parallax.plan import envinfo

    root = fake_maxtext.install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr("parallax.engines.maxtext.engine.MIN_PYTHON", sys.version_info[:2])
    ok = {"available": True, "error": None}
    probe = {"driver": ok, "nvml": ok, "devices": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0",
                                                    "uuid": "GPU-fake"}]}
    monkeypatch.setattr(envinfo, "probe_gpus", lambda: probe)
    packages = {"maxtext": "0.2.5", "jax": "0.11.2", "jaxlib": "0.11.2", "jax_cuda13_plugin": "0.11.2",
                "qwix": "0.1.8", "numpy": "2.0"}
    monkeypatch.setattr(envinfo, "package_versions", lambda names=envinfo.PACKAGES: dict(packages))
    return fake_maxtext


def test_maxtext_is_profiled_by_maxtext_and_read_as_our_jax_step(tmp_path, fake_maxtext_gpu, capsys):
    pytest.importorskip("jax")
    yaml = pytest.importorskip("yaml")
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    assert main(["profile", "--framework", "maxtext", "--recipe", "bf16", "--model", "tiny", "--batch-size", "2",
                 "--seq-len", "64", "--warmup", "3", "--steps", "2", "--output-dir", str(out), "--keep-trace"]) == 0
    said = capsys.readouterr()
    assert said.out.startswith("parallax profile: maxtext bf16: 50.50 ms/step, 2,535 tokens/s; ")
    # counted from MaxText's log, each step (its last, past the profiled ones, is not shown)
    assert progress_lines(said.err) == ["warm-up step 1/3", "warm-up step 2/3", "warm-up step 3/3", "timed step 1/2",
                                        "timed step 2/2", "profiled step 1/2", "profiled step 2/2"]
    record = json.loads((out / "profile.json").read_text())
    # without the profiler: the fake's step times of steps 3 and 4 (0.05 + 0.001 * (step % 3))
    assert record["timing"]["step_ms"] == pytest.approx((0.050 + 0.051) / 2 * 1e3)
    assert record["on_gpu"] is True and record["framework"]["tuning"] == "tuned"
    assert record["framework"]["hlo_described"] is True and record["framework"]["device"] == "cuda:0"
    kernels = fake_maxtext_gpu.FAKE_KERNELS
    assert record["busy"]["events_per_step"] == len(kernels)
    # the fake's kernels, 1 µs apart: busy 28 ms of a 50.5 ms step
    assert record["busy"]["ms_per_step"] == pytest.approx(sum(us for _, us, _ in kernels) / 1e3)
    rows = {r["class"]: r for r in record["classes"]}
    assert (rows["attention-bwd"]["ms_per_step"], rows["gemm-bf16"]["ms_per_step"], rows["elementwise"]["ms_per_step"],
            rows["memcpy"]["ms_per_step"], rows["host gaps"]["ms_per_step"]) == pytest.approx((5.0, 20.0, 2.5, 0.5, 22.5))
    # no CUDA driver behind the fake H200: the datasheet's peak, labelled; attention unmeasured here
    assert rows["gemm-bf16"]["limit"] == 989.0 and rows["gemm-bf16"]["limit_source"].startswith(
        "datasheet: dense bf16 peak, NVIDIA H200 datasheet (cuBLASLt did not run: ")
    assert rows["elementwise"]["limit"] == 4.8
    assert rows["attention-bwd"]["limit"] is None and rows["attention-bwd"]["limit_source"].startswith(
        "unknown: no attention backend ran at B×S×H×D 2×64×4×16 (jax: this process's JAX has no GPU 0")
    # MaxText's config with its profiler keys, where the profile keeps MaxText's files
    work = out / "maxtext"
    keys = yaml.safe_load((work / "maxtext-tiny-bf16.yml").read_text())
    assert (keys["profiler"], keys["skip_first_n_steps_for_profiler"], keys["profiler_steps"], keys["steps"],
            keys["jax_cache_dir"]) == ("xplane", 5, 2, 8, "")
    assert list((work / "output").rglob("*.xplane.pb")) and not (work / "hlo").exists()
    assert "completed step: 7" in (work / "train.log").read_text()
    import tarfile

    with tarfile.open(out / "trace.xplane.tar.gz") as tar:
        assert [n for n in tar.getnames() if n.endswith(".xplane.pb")] == [
            "profile/tensorboard/plugins/profile/2026_12_01_10_00_00/fakehost.xplane.pb"]
