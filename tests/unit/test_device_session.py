"""scripts/device/session.sh (a device lease's pipeline) on the CPU: its syntax, every part's command line as its dry
run prints it (each parallax command parsed by the real CLI), the capture's export-configs and direct MaxText run
executed against the fake MaxText, and the call protocol (start, wait) copying each call's bundles and packing."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device" / "session.sh"
SCRIPTS = sorted(SCRIPT.parent.glob("session*.sh"))  # it and its helpers
PARTS_IN_ORDER = [
    "install", "carry-mt", "versions",
    "capture-bf16", "capture-fp8", "capture-export", "capture-export-direct", "capture-direct",
    "capture-direct-read",
    "checkenv-te", "matrix", "matrix-report",
    "curves", "curves-report",
    "profile-jax", "profile-maxtext-bf16", "profile-compare-bf16",
]


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    """The pipeline's waits poll every POLL_S seconds (5 on the device); a test need not wait that long."""
    monkeypatch.setenv("POLL_S", "0.2")


def dry_run(session: Path, **env) -> list[tuple[str, int, list[str]]]:
    """(part, limit, argv) of every part the pipeline would run, in order."""
    proc = subprocess.run(["bash", str(SCRIPT), "pipeline"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DRY_RUN": "1", "SESSION_DIR": str(session), **env})
    assert proc.returncode == 0, proc.stderr
    parts = []
    for line in proc.stdout.splitlines():
        if line.startswith("DRY part "):
            _, _, name, limit, *argv = shlex.split(line)
            parts.append((name, int(limit), argv))
    assert (session / "setup.done").exists() and (session / "DONE").exists()
    return parts


@pytest.mark.parametrize("script", sorted(SCRIPT.parent.glob("*.sh")), ids=lambda p: p.name)
def test_the_device_scripts_parse_and_none_is_over_200_lines(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(script.read_text().splitlines()) <= 200


def test_usage_without_a_subcommand(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                          env={**os.environ, "SESSION_DIR": str(tmp_path)})
    assert proc.returncode == 2 and proc.stdout.startswith("usage: ")


def test_dry_run_lists_every_part_in_priority_order(tmp_path):
    parts = dry_run(tmp_path)
    assert [name for name, _, _ in parts] == PARTS_IN_ORDER
    limits = dict((name, limit) for name, limit, _ in parts)
    assert limits["matrix"] == 1440 - 2 * 200 - 60  # the budget less a reserve for curves and profile
    assert all(argv[0] in ("python3", "bash", "env") for _, _, argv in parts)


@pytest.mark.parametrize("chosen,expected", [
    ("capture", ["capture-bf16", "capture-fp8", "capture-export", "capture-export-direct", "capture-direct",
                 "capture-direct-read"]),
    ("capture kernels16", ["capture-bf16", "capture-fp8", "capture-export", "capture-export-direct",
                           "capture-direct", "capture-direct-read", "kernels16"]),
    ("matrix", ["checkenv-te", "matrix", "matrix-report"]),
    ("quantbench matrix", ["checkenv-te", "matrix", "matrix-report", "quantbench"]),
    ("profile curves", ["curves", "curves-report", "profile-jax", "profile-maxtext-bf16", "profile-compare-bf16"]),
])
def test_parts_picks_the_parts(tmp_path, chosen, expected):
    parts = [name for name, _, _ in dry_run(tmp_path, PARTS=chosen)]
    assert parts == ["install", "carry-mt", "versions", *expected]


def test_the_fp8_and_nvfp4_leftovers_run_around_the_matrix(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = dry_run(tmp_path, PARTS="matrix tejax nvfp4")
    assert [name for name, _, _ in parts] == [
        "install", "carry-mt", "versions", "checkenv-te", "tejax", "matrix", "matrix-report",
        "nvfp4-tests", "nvfp4-quantbench", "nvfp4-profile-torch", "nvfp4-profile-jax", "nvfp4-bench", "nvfp4-report"]
    limits = {name: limit for name, limit, _ in parts}
    assert limits["matrix"] == 1440 - 200 - 60  # a reserve for nvfp4, the one part after it
    argv = {name: a for name, _, a in parts}
    assert argv["tejax"][-1] == "tests/gpu/test_jax_te_gpu.py"
    assert argv["nvfp4-quantbench"] == ["env", f"OUT={tmp_path}/nvfp4/quantbench", "python3",
                                        "scripts/device/quant_bench.py"]
    assert (ROOT / argv["nvfp4-quantbench"][-1]).is_file()
    for name, framework in (("nvfp4-profile-torch", "torch"), ("nvfp4-profile-jax", "jax")):
        assert argv[name][3:8] == ["profile", "--framework", framework, "--recipe", "emulated-nvfp4"]
    assert argv["nvfp4-bench"][3:6] == ["benchmark", "--plan", "nvfp4-emulation"]
    params, cells = benchmark_cells(argv["nvfp4-bench"])
    assert cells == [("torch", "bf16"), ("torch", "emulated-nvfp4"), ("jax", "bf16"), ("jax", "emulated-nvfp4")]
    assert (params["repeats"], params["steps"], params["warmup"], params["batch_size"]) == (3, 60, 20, 32)


def test_the_bound_tests_run_after_te_and_before_the_matrix(tmp_path):
    parts = dry_run(tmp_path, PARTS="matrix boundtests crossover", BOUNDTESTS_S="150")
    assert [name for name, _, _ in parts][:6] == ["install", "carry-mt", "versions", "checkenv-te", "boundtests",
                                                  "matrix"]
    (name, limit, argv) = parts[4]
    assert limit == 150
    assert argv[-2:] == ["-s", "tests/gpu/test_layer_error_bounds_gpu.py"] and "gpu" in argv
    assert (ROOT / argv[-1]).is_file()


def test_kernels_run_first_and_the_nvfp4_part_skips_their_tests(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = dry_run(tmp_path, PARTS="kernels matrix nvfp4", NVFP4_BENCH_ARGS="--repeats 2")
    assert [name for name, _, _ in parts] == [
        "install", "carry-mt", "versions", "kernels", "checkenv-te", "matrix", "matrix-report",
        "nvfp4-quantbench", "nvfp4-profile-torch", "nvfp4-profile-jax", "nvfp4-bench", "nvfp4-report"]
    argv = {name: a for name, _, a in parts}
    assert argv["kernels"][-2:] == ["tests/gpu/test_quant_cuda_gpu.py", "tests/gpu/test_nvfp4_emulated_gpu.py"]
    params, _ = benchmark_cells(argv["nvfp4-bench"])
    assert params["repeats"] == 2


def test_ncu_profiles_the_kernels_of_the_benchmark_script(tmp_path):
    (_, limit, argv), = [p for p in dry_run(tmp_path, PARTS="ncu") if p[0] == "ncu"]
    assert argv[:3] == ["ncu", "--clock-control", "none"] and "regex:nvfp4|amax" in argv
    assert argv[-3:] == ["python3", "scripts/device/quant_bench.py", "--profile-only"] and limit == 150


def parallax_context(argv: list[str]):
    """The click context of ``python3 -m parallax SUB ARGS``: options parsed and checked by the real CLI."""
    from parallax.cli import cli

    assert argv[:3] == ["python3", "-m", "parallax"], argv
    command = cli.get_command(None, argv[3])
    return command.make_context(argv[3], argv[4:])


def test_every_parallax_command_parses_with_the_real_cli(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)  # --data must exist
    parts = {name: argv for name, _, argv in dry_run(tmp_path)}
    for name, argv in parts.items():
        if argv[:3] == ["python3", "-m", "parallax"]:
            parallax_context(argv)  # raises on an unknown option or a bad value
        if argv[3:5] == ["benchmark", "--plan"]:
            assert benchmark_runs(argv)  # and its plan loads and resolves
    train = parallax_context(parts["capture-bf16"]).params
    assert (train["framework"], train["precision"], train["synthetic"], train["steps"], train["model"]) == (
        "maxtext", "bf16", True, 30, "llama-100m")
    assert parallax_context(parts["capture-fp8"]).params["precision"] == "fp8"
    assert parallax_context(parts["capture-export"]).params["recipes"] == "all"


def benchmark_runs(argv: list[str]) -> list[dict]:
    """The options of each benchmark of ``python3 -m parallax benchmark --plan ...``, its plan resolved."""
    from parallax import plans

    ctx = parallax_context(argv)
    given = {k for k in ctx.params if ctx.get_parameter_source(k).name != "DEFAULT"} - {"plan"}
    options = {k: v for k, v in ctx.params.items() if k not in ("plan", "list_plans")}
    return plans.benchmark_runs(plans.load(ctx.params["plan"]), options, given)


def benchmark_cells(argv: list[str]) -> tuple[dict, list[tuple[str, str]]]:
    from parallax.cli.benchmark import split_list
    from parallax.spec import registry

    params, = benchmark_runs(argv)
    frameworks = split_list(params["frameworks"], "--frameworks")
    selectors = split_list(params["precisions"], "--precisions") + (
        split_list(params["recipes"], "--recipes") if params["recipes"] else ())
    return params, [(r.framework, r.name) for r in registry.select(frameworks, selectors)]


def test_the_matrix_is_the_three_framework_plan_and_the_curves_theirs(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = {name: argv for name, _, argv in dry_run(tmp_path)}
    assert parts["matrix"][3:] == ["benchmark", "--plan", "three-frameworks", "--data",
                                   str(tmp_path / "carry" / "tinystories"), "--output-dir",
                                   str(tmp_path / "matrix" / "bench")]
    params, cells = benchmark_cells(parts["matrix"])
    assert cells == [("torch", "bf16"), ("torch", "te-bf16"), ("torch", "te-fp8-delayed"), ("torch", "te-fp8-current"),
                     ("torch", "torchao-fp8-tensorwise"), ("torch", "torchao-fp8-rowwise"), ("jax", "bf16"),
                     ("jax", "te-bf16"), ("jax", "flax-fp8-delayed"), ("jax", "flax-fp8-direct"),
                     ("jax", "te-fp8-delayed"),
                     ("maxtext", "bf16"), ("maxtext", "fp8_gpu"), ("maxtext", "te_fp8_delayedscaling")]
    assert (params["model"], params["batch_size"], params["seq_len"], params["steps"], params["warmup"],
            params["repeats"], params["resume"], params["report"]) == ("llama-100m", 32, 1024, 60, 20, 1, True, True)
    assert params["timeout_per_run"] == 360
    assert params["data"] == str(tmp_path / "carry" / "tinystories")
    curves, cells = benchmark_cells(parts["curves"])
    assert cells == [("jax", "bf16"), ("maxtext", "bf16")]
    assert (curves["steps"], curves["data"], curves["repeats"], curves["report"]) == (
        300, params["data"], 1, True)
    assert parts["matrix-report"][3:] == ["compare", "--results-dir", str(tmp_path / "matrix" / "bench"),
                                          "--output-report", str(tmp_path / "matrix" / "bench" / "report.md")]


def test_a_parts_plan_and_options_come_from_the_environment(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = {name: argv for name, _, argv in dry_run(tmp_path, MATRIX_PLAN="fp8-matrix", MATRIX_ARGS="--repeats 2",
                                                     CURVES_ARGS="--steps 500")}
    params, cells = benchmark_cells(parts["matrix"])
    assert params["repeats"] == 2 and params["steps"] == 60
    assert cells == [("torch", "bf16"), ("torch", "te-bf16"), ("torch", "te-fp8-delayed"), ("torch", "te-fp8-current"),
                     ("torch", "torchao-fp8-tensorwise"), ("torch", "torchao-fp8-rowwise"), ("jax", "bf16"),
                     ("jax", "te-bf16"), ("jax", "flax-fp8-delayed"), ("jax", "flax-fp8-direct"),
                     ("jax", "te-fp8-delayed")]
    assert benchmark_cells(parts["curves"])[0]["steps"] == 500


def test_matrix_steps_and_the_per_run_limit_come_from_the_environment(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = {name: argv for name, _, argv in dry_run(tmp_path, MATRIX_ARGS="--steps 120 --timeout-per-run 300",
                                                     MATRIX_S="700")}
    params, _ = benchmark_cells(parts["matrix"])
    assert (params["steps"], params["warmup"], params["timeout_per_run"]) == (120, 20, 300)
    assert {name: limit for name, limit, _ in dry_run(tmp_path, MATRIX_S="700")}["matrix"] == 700


def test_the_profile_parts_run_parallax_profile(tmp_path):
    parts = {name: argv for name, _, argv in dry_run(tmp_path, PROFILE_MAXTEXT="bf16 bf16-defaults")}
    jax = parallax_context(parts["profile-jax"]).params
    mt = parallax_context(parts["profile-maxtext-bf16-defaults"]).params
    assert (jax["framework"], jax["recipe"], mt["framework"], mt["recipe"], mt["keep_trace"]) == (
        "jax", "bf16", "maxtext", "bf16-defaults", True)
    compare = parallax_context(parts["profile-compare-bf16-defaults"]).params
    assert compare["compare"] is True and compare["profiles"] == (
        f"{tmp_path}/profile/jax-bf16/profile.json", f"{tmp_path}/profile/maxtext-bf16-defaults/profile.json")
    assert compare["output_dir"] == f"{tmp_path}/profile/compare-maxtext-bf16-defaults"


def test_the_capture_exports_a_config_and_runs_it_as_it_is_on_the_fake_maxtext(tmp_path):
    pytest.importorskip("yaml")
    from fixtures import fake_maxtext

    site = fake_maxtext.install(tmp_path / "site")
    session = tmp_path / "session"
    parts = {name: argv for name, _, argv in dry_run(session)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])}
    env.pop("DECOUPLE_GCLOUD", None)
    done = {}
    for name in ("capture-export", "capture-export-direct", "capture-direct", "capture-direct-read"):
        argv = [sys.executable if a == "python3" else a for a in parts[name]]
        done[name] = proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
    base = site / "maxtext" / "configs" / "base.yml"
    assert " ".join(done["capture-export"].stderr.split()).endswith(f"keys checked against {base}")  # may wrap
    configs = sorted(p.name for p in (session / "capture" / "configs").iterdir())
    assert "maxtext-llama-100m-bf16-defaults.yml" in configs and len(configs) == 9
    metrics = [json.loads(line) for line in (session / "capture" / "direct" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "learning/loss" in m] == [float(k) for k in range(30)]
    assert {m["run_name"] for m in metrics} == {"direct"}
    assert proc.stdout.startswith("direct run: 30 steps, loss 9.200 -> ")


def fake_checkout(tmp_path: Path) -> Path:
    """A checkout holding the script, and .carry/ as call 1 carries it."""
    repo = tmp_path / "repo"
    (repo / "scripts" / "device").mkdir(parents=True)
    for script in SCRIPTS:
        shutil.copy(script, repo / "scripts" / "device" / script.name)
    for bundle, files in (("mt", ("install.sh", "maxtext_site.tar.xz")), ("tinystories", ("train.bin",))):
        (repo / ".carry" / bundle).mkdir(parents=True)
        for f in files:
            (repo / ".carry" / bundle / f).write_text(f"{bundle} {f}\n")
    return repo


def call(repo: Path, session: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    env = {**os.environ, "DRY_RUN": "1", "SESSION_DIR": str(session), "OUT": str(out), "WAIT_S": "30",
           "START_WAIT_S": "30"}
    proc = subprocess.run(["bash", str(repo / "scripts" / "device" / SCRIPT.name), *args], capture_output=True,
                          text=True, timeout=90, env=env, cwd=repo.parent)  # the script finds its checkout
    assert proc.returncode == 0, proc.stderr
    return proc


def test_each_call_copies_the_bundles_it_carries_and_packs_what_exists(tmp_path):
    repo, session, out = fake_checkout(tmp_path), tmp_path / "session", tmp_path / "out"
    first = call(repo, session, out, "start")
    assert "[session] copied .carry/mt" in first.stdout and "[session] copied .carry/tinystories" in first.stdout
    assert (session / "carry" / "mt" / "install.sh").read_text() == "mt install.sh\n"
    # call 2: the re-sync dropped .carry/mt and brought .carry/gpu
    shutil.rmtree(repo / ".carry" / "mt")
    (repo / ".carry" / "gpu").mkdir()
    (repo / ".carry" / "gpu" / "install.sh").write_text("gpu\n")
    second = call(repo, session, out, "wait")
    assert "[session] copied .carry/gpu" in second.stdout and "copied .carry/mt" not in second.stdout
    assert "[session] pipeline done" in second.stdout
    assert (session / "carry" / "mt").is_dir() and (session / "carry" / "gpu" / "install.sh").is_file()
    with tarfile.open(out / "session.tar.gz") as tar:
        names = tar.getnames()
    assert "session/pipeline.log" in names and "session/DONE" in names
    assert not [n for n in names if n.startswith(("session/carry", "session/out", "session/src"))]


def test_stage_takes_the_bundles_and_unpacks_the_tokens_tarball_without_starting_the_pipeline(tmp_path):
    """Call 1 of a session whose bundles no longer fit one call with the token folder: TE and the
    tokens as .carry/tinystories.tar.xz (a tarball of the folder itself)."""
    repo, session, out = fake_checkout(tmp_path), tmp_path / "session", tmp_path / "out"
    shutil.rmtree(repo / ".carry" / "mt")
    subprocess.run(["tar", "-cJf", "tinystories.tar.xz", "tinystories"], cwd=repo / ".carry", check=True)
    shutil.rmtree(repo / ".carry" / "tinystories")
    staged = call(repo, session, out, "stage")
    assert "[session] unpacked .carry/tinystories.tar.xz" in staged.stdout
    assert (session / "carry" / "tinystories" / "train.bin").read_text() == "tinystories train.bin\n"
    assert not (session / "pipeline.pid").exists() and not (session / "carry" / "tinystories.tmp").exists()
    again = call(repo, session, out, "stage")  # once per machine
    assert "unpacked" not in again.stdout


def test_the_pack_leaves_out_raw_traces_and_large_ones(tmp_path):
    repo, session, out = fake_checkout(tmp_path), tmp_path / "session", tmp_path / "out"
    call(repo, session, out, "start")
    profile = session / "profile"
    (profile / "maxtext_bf16" / "output").mkdir(parents=True)
    (profile / "maxtext_bf16" / "output" / "host.xplane.pb").write_bytes(b"x" * 1000)
    (profile / "trace_jax_bf16.tar.gz").write_bytes(b"small")
    (profile / "trace_maxtext_bf16.tar.gz").write_bytes(os.urandom(9 * 1024 * 1024))
    call(repo, session, out, "wait")
    with tarfile.open(out / "session.tar.gz") as tar:
        names = tar.getnames()
    assert "session/profile/trace_jax_bf16.tar.gz" in names
    assert not [n for n in names if n.endswith((".xplane.pb", "trace_maxtext_bf16.tar.gz"))]


# --- TE's bundle: installed in the background, waited for, or given up on -------------------------

def te_run(tmp_path: Path, script: str, build_s: float | None = None, **env) -> subprocess.CompletedProcess:
    """The script's functions sourced (SESSION_LIB=1), the parts stubbed, then ``script``;
    with ``build_s`` a fake .carry/gpu whose install.sh marks TE's core installed, then builds
    for ``build_s`` seconds."""
    session, site = tmp_path / "session", tmp_path / "site"
    if build_s is not None:
        gpu = session / "carry" / "gpu"
        gpu.mkdir(parents=True)
        (gpu / "install.sh").write_text(
            f'mkdir -p "{site}"; echo te_core_sm90.tar.xz >> "{site}/.installed"; sleep {build_s}; '
            f'echo "install.sh: carried packages installed in {build_s} s" >&2\n')
    prelude = (f"source {shlex.quote(str(SCRIPT))}; settings 1000; DRY=0; "
               "part() { echo \"part $1\"; }; ")
    return subprocess.run(["bash", "-c", prelude + script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SESSION_LIB": "1", "SESSION_DIR": str(session),
                               "CARRY_SITE": str(site), **env})


def test_te_installs_in_the_background_and_the_matrix_waits_for_it(tmp_path):
    proc = te_run(tmp_path, "te_state; maybe_start_te; te_state; wait_te; te_state", build_s=3)
    lines = proc.stdout.splitlines()
    assert lines[0] == "waiting" and "TE: installing .carry/gpu in the background" in lines[1]
    assert lines[2] == "building" and lines[-1] == "ready"
    assert any("TE: install.sh: carried packages installed in 3 s" in line for line in lines)
    assert "part checkenv-te" in lines


def test_without_te_by_gpu_by_the_te_cells_are_skipped(tmp_path):
    proc = te_run(tmp_path, "wait_te; te_state; cat \"$E/te.none\"", GPU_BY_S="0")
    assert proc.stdout.splitlines()[-2:] == ["none", "no .carry/gpu by 0s"]
    assert "the TE cells will be skipped" in proc.stdout and "part checkenv-te" not in proc.stdout


def test_a_bundle_that_comes_while_waiting_is_installed_then(tmp_path):
    session = tmp_path / "session"
    late = (f"(sleep 2; mkdir -p '{session}/carry/gpu.tmp'; "
            f"echo 'echo te_core_sm90.tar.xz >> \"$CARRY_SITE/.installed\"' > '{session}/carry/gpu.tmp/install.sh'; "
            f"mv '{session}/carry/gpu.tmp' '{session}/carry/gpu') & ")
    proc = te_run(tmp_path, late + "wait_te; te_state")
    assert proc.stdout.splitlines()[-1] == "ready", proc.stdout + proc.stderr
    assert "TE: installing .carry/gpu in the background" in proc.stdout


def test_a_te_build_past_te_wait_is_stopped(tmp_path):
    proc = te_run(tmp_path, "maybe_start_te; wait_te; te_state; cat \"$E/te.none\"; "
                            "sleep 1; kill -0 $(cat \"$E/te.pid\") 2>/dev/null && echo still-running || echo stopped",
                  build_s=60, TE_WAIT_S="1")
    assert proc.stdout.splitlines()[-3:] == ["none", "TE build stopped after waiting 1s", "stopped"]
    assert not (tmp_path / "session" / "te.ready").exists()


def test_the_pipeline_takes_a_bundle_from_the_live_checkout_once_it_stands_still(tmp_path):
    live = tmp_path / "live"
    (live / ".carry" / "gpu").mkdir(parents=True)
    (live / ".carry" / "gpu" / "install.sh").write_text("gpu\n")
    proc = te_run(tmp_path, f"LIVE={shlex.quote(str(live))}; poll_live; te_state; poll_live; te_state")
    lines = proc.stdout.splitlines()
    assert lines[0] == "waiting"  # first look: not taken yet (it may still be syncing)
    assert "[session] copied .carry/gpu" in lines[1]
    assert (tmp_path / "session" / "carry" / "gpu" / "install.sh").read_text() == "gpu\n"


def test_capture_train_0_keeps_only_the_export_and_the_direct_run(tmp_path):
    parts = [name for name, _, _ in dry_run(tmp_path, PARTS="capture", CAPTURE_TRAIN="0")]
    assert parts == ["install", "carry-mt", "versions", "capture-export", "capture-export-direct",
                     "capture-direct", "capture-direct-read"]


def test_kernels16_runs_the_16x1_gpu_tests_that_exist(tmp_path):
    (_, limit, argv), = [p for p in dry_run(tmp_path, PARTS="kernels16") if p[0] == "kernels16"]
    files = [a for a in argv if a.startswith("tests/")]
    assert files == ["tests/gpu/test_quant_cuda_gpu.py", "tests/gpu/test_nvfp4_emulated_gpu.py"]
    names = {name for f in files for name in re.findall(r"^def (test_\w+)", (ROOT / f).read_text(), re.M)}
    chosen = argv[argv.index("-k") + 1].split(" or ")
    assert all(any(k in name for name in names) for k in chosen)  # every -k word picks a test
    assert limit == 150


def test_matrix_args_replace_the_plans_recipes(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = {name: argv for name, _, argv in dry_run(tmp_path, MATRIX_ARGS="--recipes maxtext:te_fp8_delayedscaling")}
    _, cells = benchmark_cells(parts["matrix"])
    assert cells == [("torch", "bf16"), ("torch", "te-fp8-delayed"), ("jax", "bf16"), ("jax", "flax-fp8-delayed"),
                     ("maxtext", "bf16"), ("maxtext", "fp8_gpu"), ("maxtext", "te_fp8_delayedscaling")]


def test_matrix_from_resumes_a_committed_benchmark_and_matrix_args_extend_it(tmp_path):
    committed = tmp_path / "committed"
    (committed / "runs" / "maxtext-bf16-seed0-rep0").mkdir(parents=True)
    (committed / "matrix.json").write_text("{}")
    session = tmp_path / "session"
    (session / "carry" / "tinystories").mkdir(parents=True)
    parts = {name: argv for name, _, argv in dry_run(
        session, MATRIX_FROM=str(committed), MATRIX_ARGS="--recipes maxtext:te_fp8_delayedscaling,jax:te-fp8-delayed")}
    bench = session / "matrix" / "bench"
    assert (bench / "matrix.json").read_text() == "{}" and (bench / "runs" / "maxtext-bf16-seed0-rep0").is_dir()
    params, cells = benchmark_cells(parts["matrix"])
    assert params["output_dir"] == str(bench) and params["resume"]
    assert ("jax", "te-fp8-delayed") in cells and ("maxtext", "te_fp8_delayedscaling") in cells and len(cells) == 8


def test_profile_jax_adds_jax_recipes_each_compared_with_bf16_and_profile_maxtext_may_be_none(tmp_path):
    parts = {name: argv for name, _, argv in dry_run(tmp_path, PROFILE_JAX="flax-fp8-delayed flax-fp8-direct",
                                                     PROFILE_MAXTEXT="")}
    profiles = [n for n in parts if n.startswith("profile")]
    assert profiles == ["profile-jax", "profile-jax-flax-fp8-delayed", "profile-compare-jax-flax-fp8-delayed",
                        "profile-jax-flax-fp8-direct", "profile-compare-jax-flax-fp8-direct"]
    compare = parallax_context(parts["profile-compare-jax-flax-fp8-direct"]).params
    assert compare["profiles"] == (str(tmp_path / "profile" / "jax-bf16" / "profile.json"),
                                   str(tmp_path / "profile" / "jax-flax-fp8-direct" / "profile.json"))


def test_nvfp4long_resumes_a_committed_benchmark_with_more_seeds(tmp_path):
    committed = tmp_path / "committed"
    (committed / "runs").mkdir(parents=True)
    session = tmp_path / "session"
    (session / "carry" / "tinystories").mkdir(parents=True)
    parts = {name: argv for name, _, argv in dry_run(session, PARTS="nvfp4long", NVFP4LONG_FROM=str(committed),
                                                     NVFP4LONG_ARGS="--seeds 0,1,2,3")}
    assert (session / "nvfp4long" / "bench" / "runs").is_dir()
    params, cells = benchmark_cells(parts["nvfp4long"])
    assert params["seeds"] == "0,1,2,3" and params["steps"] == 1000 and params["concurrent"] == 8
    assert (params["eval_every"], params["eval_batches"], params["resume"], params["convergence"]) == (
        100, 5, True, True)
    assert cells == [("torch", "bf16"), ("torch", "emulated-nvfp4"), ("jax", "bf16"), ("jax", "emulated-nvfp4")]


def test_conv_runs_the_te_recipes_after_te_and_the_matrix_may_be_the_fp8_plan(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = dry_run(tmp_path, PARTS="kernels convbase conv matrix", MATRIX_PLAN="fp8-matrix")
    # a dry run's TE is ready from the start, so the bf16 twins run inside conv: convbase is then done
    assert [name for name, _, _ in parts] == [
        "install", "carry-mt", "versions", "kernels", "checkenv-te", "conv", "conv-report", "matrix", "matrix-report"]
    argv = {name: a for name, _, a in parts}
    limits = {name: limit for name, limit, _ in parts}
    assert limits["matrix"] == 1440 - 60  # nothing after it reserves time
    params, cells = benchmark_cells(argv["conv"])
    assert (params["steps"], params["eval_every"], params["eval_batches"], params["seeds"], params["resume"],
            params["report"], params["convergence"]) == (1000, 100, 5, "0,1", True, True, True)
    assert params["output_dir"] == str(tmp_path / "conv" / "bench")
    assert cells == [("jax", "bf16"), ("jax", "te-fp8-delayed")]
    _, cells = benchmark_cells(argv["matrix"])
    assert cells == [("torch", "bf16"), ("torch", "te-bf16"), ("torch", "te-fp8-delayed"), ("torch", "te-fp8-current"),
                     ("torch", "torchao-fp8-tensorwise"), ("torch", "torchao-fp8-rowwise"), ("jax", "bf16"),
                     ("jax", "te-bf16"), ("jax", "flax-fp8-delayed"), ("jax", "flax-fp8-direct"),
                     ("jax", "te-fp8-delayed")]  # the registry's order


def test_convbase_runs_the_bf16_twins_alone_into_the_benchmark_conv_resumes(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = dry_run(tmp_path, PARTS="convbase", CONVBASE_ARGS="--frameworks torch,jax --seeds 0,1")
    (name, limit, argv), = [p for p in parts if p[0] == "convbase"]
    params, cells = benchmark_cells(argv)
    assert params["output_dir"] == str(tmp_path / "conv" / "bench") and params["resume"]
    assert (params["seeds"], limit) == ("0,1", 400)
    assert cells == [("torch", "bf16"), ("jax", "bf16")]


def test_convbase_runs_while_te_builds_and_conv_after_it(tmp_path):
    proc = te_run(tmp_path, "maybe_start_te; run_parts; echo \"done:$DONE_PARTS\"", build_s=2,
                  PARTS="convbase conv matrix")
    parts = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("part ")]
    # (the stubbed parts write no report, so compare writes each)
    assert parts == ["convbase", "checkenv-te", "conv", "conv-report", "matrix", "matrix-report"], proc.stdout
    assert proc.stdout.splitlines()[-1].split() == ["done:", "convbase", "convbase", "conv", "matrix"]


def test_te_extensions_built_here_are_kept_for_later_sessions_and_handed_over(tmp_path):
    build_root = tmp_path / "tmp"
    for name, fw in (("tmp.aaa", "torch"), ("tmp.bbb", "jax")):
        out = build_root / name / "out"
        (out / f"transformer_engine_{fw}-2.20.2.dist-info").mkdir(parents=True)
        (out / f"transformer_engine_{fw}-2.20.2.dist-info" / "RECORD").write_text(fw)
        (out / f"transformer_engine_{fw}.cpython-312-x86_64-linux-gnu.so").write_bytes(fw.encode() * 100)
    (build_root / "tmp.ccc" / "out" / "something_else").mkdir(parents=True)  # another mktemp dir: not TE
    out_dir = tmp_path / "OUT"
    out_dir.mkdir()
    proc = te_run(tmp_path, "keep_te_builds; keep_te_builds; hand_over_kept; ls \"$OUT\"",
                  TE_BUILD_ROOT=str(build_root), OUT=str(out_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("TE: kept the built") == 2  # once each, not again on a second look
    session = tmp_path / "session"
    for fw in ("torch", "jax"):
        with tarfile.open(session / "keep" / f"te_{fw}_site.tar.xz") as tar:
            names = sorted(n.removeprefix("./") for n in tar.getnames() if n != ".")
        assert names == [f"transformer_engine_{fw}-2.20.2.dist-info", f"transformer_engine_{fw}-2.20.2.dist-info/RECORD",
                         f"transformer_engine_{fw}.cpython-312-x86_64-linux-gnu.so"]
    assert sorted(p.name for p in out_dir.iterdir()) == ["te_jax_site.tar.xz", "te_torch_site.tar.xz"]


def test_a_kept_file_over_15_mib_is_handed_over_in_pieces(tmp_path):
    keep = tmp_path / "session" / "keep"
    keep.mkdir(parents=True)
    big = keep / "te_torch_site.tar.xz"
    big.write_bytes(os.urandom(16 * 1024 * 1024 + 5))
    out_dir = tmp_path / "OUT"
    out_dir.mkdir()
    proc = te_run(tmp_path, "hand_over_kept", OUT=str(out_dir))
    assert proc.returncode == 0, proc.stderr
    pieces = sorted(out_dir.iterdir())
    assert [p.name for p in pieces] == ["te_torch_site.tar.xz.part-aa", "te_torch_site.tar.xz.part-ab"]
    assert pieces[0].stat().st_size == 15 * 1024 * 1024
    assert b"".join(p.read_bytes() for p in pieces) == big.read_bytes()


def test_crossover_runs_its_plans_presets_after_the_matrix(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = dry_run(tmp_path, PARTS="fp8tests matrix crossover")
    assert [name for name, _, _ in parts] == [
        "install", "carry-mt", "versions", "fp8tests-flax", "checkenv-te", "fp8tests", "matrix", "matrix-report",
        "crossover", "crossover-report"]
    limits = {name: limit for name, limit, _ in parts}
    argv = {name: a for name, _, a in parts}
    assert limits["matrix"] == 1440 - 200 - 60  # a reserve for the crossover after it
    assert limits["crossover"] == 1200
    # the Flax tests need no TE: they run first, while it builds
    assert argv["fp8tests-flax"][-1:] == ["tests/gpu/test_jax_fp8_gpu.py"]
    assert argv["fp8tests"][-2:] == ["tests/gpu/test_torch_fp8_gpu.py", "tests/gpu/test_jax_te_gpu.py"]
    assert all((ROOT / t).is_file() for t in argv["fp8tests"][-2:] + argv["fp8tests-flax"][-1:])
    runs = benchmark_runs(argv["crossover"])
    assert [(r["model"], r["output_dir"]) for r in runs] == [
        (m, str(tmp_path / "crossover" / m)) for m in ("llama-100m", "llama-330m", "llama-860m")]
    assert {(r["recipes"], r["synthetic"], r["steps"], r["warmup"], r["timeout_per_run"], r["resume"])
            for r in runs} == {("torch:te-bf16,torch:te-fp8-delayed", True, 30, 10, 240, True)}


def test_crossover_resumes_committed_presets_and_lines_up_with_a_given_base(tmp_path):
    committed = tmp_path / "committed"
    for preset in ("llama-330m", "llama-860m"):
        (committed / preset / "runs").mkdir(parents=True)
        (committed / preset / "matrix.json").write_text("{}")
    session = tmp_path / "session"
    parts = {name: argv for name, _, argv in dry_run(session, PARTS="crossover", CROSSOVER_FROM=str(committed),
                                                     CROSSOVER_BASE="docs/results/x/matrix")}
    assert (session / "crossover" / "llama-860m" / "runs").is_dir()  # copied in: --resume runs only the rest
    assert parts["crossover-report"][3:] == [
        "crossover", "docs/results/x/matrix", str(session / "crossover" / "llama-330m"),
        str(session / "crossover" / "llama-860m"), "--output-dir", str(session / "crossover" / "report")]


def test_crossover_may_run_only_the_cells_one_preset_lacks(tmp_path):
    """CROSSOVER_ARGS: --model narrows the plan to one preset, --recipes to the cells it lacks."""
    parts = {name: argv for name, _, argv in dry_run(
        tmp_path, PARTS="crossover", CROSSOVER_ARGS="--model llama-860m --recipes torch:torchao-fp8-rowwise")}
    run, = benchmark_runs(parts["crossover"])
    assert (run["model"], run["output_dir"], run["recipes"]) == (
        "llama-860m", str(tmp_path / "crossover" / "llama-860m"), "torch:torchao-fp8-rowwise")


def test_convbase_may_take_the_recipes_that_need_no_te_and_conv_adds_the_rest(tmp_path):
    session = tmp_path / "session"  # te_run's
    (session / "carry" / "tinystories").mkdir(parents=True)
    same = "--frameworks torch,jax --concurrent 8 --timeout-per-run 700"
    env = dict(PARTS="convbase conv", CONVBASE_ARGS=f"{same} --recipes torchao-fp8-tensorwise,flax-fp8-direct",
               CONV_ARGS=f"{same} --recipes torchao-fp8-tensorwise,flax-fp8-direct,te-fp8-delayed")
    # a dry run's TE is ready at once: conv runs everything, then convbase (done) does not run again
    parts = {name: argv for name, _, argv in dry_run(session, **env)}
    assert "convbase" not in parts
    conv, cells = benchmark_cells(parts["conv"])
    assert (conv["concurrent"], conv["timeout_per_run"], conv["seeds"]) == (8, 700, "0,1")
    assert cells == [("torch", "bf16"), ("torch", "te-fp8-delayed"), ("torch", "torchao-fp8-tensorwise"),
                     ("jax", "bf16"), ("jax", "flax-fp8-direct"), ("jax", "te-fp8-delayed")]
    # convbase (while TE builds): the same benchmark, only the recipes that need no TE
    proc = te_run(tmp_path, "part() { printf '%s\\n' \"$@\"; }; run_convbase", **env)
    name, limit, *argv = proc.stdout.splitlines()
    assert (name, limit) == ("convbase", "400")
    base, cells = benchmark_cells(argv)
    assert {k: base[k] for k in ("concurrent", "timeout_per_run", "seeds", "output_dir")} == {
        k: conv[k] for k in ("concurrent", "timeout_per_run", "seeds", "output_dir")}
    assert cells == [("torch", "bf16"), ("torch", "torchao-fp8-tensorwise"), ("jax", "bf16"), ("jax", "flax-fp8-direct")]


def test_kept_files_are_not_handed_over_where_they_would_not_fit_beside_the_calls_files(tmp_path):
    keep = tmp_path / "session" / "keep"
    keep.mkdir(parents=True)
    for name in ("te_torch_site.tar.xz", "te_jax_site.tar.xz"):
        with open(keep / name, "wb") as f:
            f.truncate(31 * 1024 * 1024)  # sparse: 62 MiB together, over the 60 MiB the call may add
    out_dir = tmp_path / "OUT"
    out_dir.mkdir()
    (out_dir / "session.tar.gz").write_bytes(b"x")
    proc = te_run(tmp_path, "hand_over_kept", OUT=str(out_dir))
    assert "the kept TE builds do not fit beside this call's files (62 MiB, 7 files)" in proc.stdout
    assert [p.name for p in out_dir.iterdir()] == ["session.tar.gz"]


def test_a_second_pack_in_one_call_hands_the_kept_files_over_again_without_counting_them_twice(tmp_path):
    keep = tmp_path / "session" / "keep"
    keep.mkdir(parents=True)
    for name in ("te_torch_site.tar.xz", "te_jax_site.tar.xz"):
        with open(keep / name, "wb") as f:
            f.truncate(20 * 1024 * 1024)  # 40 MiB together: room once, not twice
    out_dir = tmp_path / "OUT"
    out_dir.mkdir()
    proc = te_run(tmp_path, "hand_over_kept; hand_over_kept", OUT=str(out_dir))  # start, then wait
    assert "do not fit" not in proc.stdout
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "te_jax_site.tar.xz.part-aa", "te_jax_site.tar.xz.part-ab",
        "te_torch_site.tar.xz.part-aa", "te_torch_site.tar.xz.part-ab"]


def test_the_tuning_parts_profile_while_te_installs_then_sweep(tmp_path):
    (tmp_path / "carry" / "tinystories").mkdir(parents=True)
    parts = dry_run(tmp_path, PARTS="limits tuning feed fp8profiles", TUNING_ARGS="--tunings default,jax:lhs")
    assert [name for name, _, _ in parts] == [
        "install", "carry-mt", "versions", "limits-tests", "profile-torch-bf16", "profile-jax-bf16",
        "checkenv-te", "tuning", "tuning-report", "feed-maxtext-synthetic", "profile-torch-te-fp8-delayed",
        "profile-jax-te-fp8-delayed"]
    limits = {name: limit for name, limit, _ in parts}
    assert limits["tuning"] == 1440 - 2 * 200 - 30  # a reserve for feed and fp8profiles
    argv = {name: a for name, _, a in parts}
    assert argv["limits-tests"][-1] == "tests/gpu/test_copy_bandwidth_gpu.py"
    assert (ROOT / argv["limits-tests"][-1]).is_file()
    for name in ("profile-torch-bf16", "profile-jax-te-fp8-delayed", "feed-maxtext-synthetic"):
        parallax_context(argv[name])
    assert argv["profile-jax-te-fp8-delayed"][3:8] == ["profile", "--framework", "jax", "--recipe", "te-fp8-delayed"]
    train = parallax_context(argv["feed-maxtext-synthetic"]).params
    assert (train["framework"], train["synthetic"], train["steps"], train["warmup"]) == ("maxtext", True, 60, 20)
    params, = benchmark_runs(argv["tuning"])
    assert (params["steps"], params["warmup"], params["batch_size"], params["seq_len"]) == (60, 20, 32, 1024)
    assert params["tunings"] == "default,jax:lhs"
