"""The torch engine on two CPU processes (gloo), through the real command line: the same global
batch of real tokens trains to the same losses as one process, ddp and fsdp (each run launched
once: the ddp run is also the real-token test's; the synthetic source's rank slices are
test_data_slicing's, and the fault tests train on it); a planted rank failure, death, OOM
or hang ends the run within its timeout with the failing rank's error recorded and no process
left behind. Each two-process run takes ~15-25 s on a 2-core machine (torch imports thrice)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from parallax.plan.world import FAULT_ENV  # noqa: E402
from parallax.store.results import load_run, load_steps  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# tiny at batch 8 x 32: the global batch; two ranks take 4 rows each. grad_clip 0.05 makes
# every step clip (tiny's gradient norm is ~0.8), so the global norm must be the 1-GPU one.
STEPS, WARMUP = 4, 1


def config(out: Path, per_gpu: int, gpus: int, **changes) -> Path:
    from parallax.spec.config import OptimConfig, RunConfig

    run = RunConfig(framework="torch", model="tiny", batch_size=per_gpu, seq_len=32, steps=STEPS, warmup=WARMUP,
                    compile=False, device="cpu", gpus=gpus, eval_every=2, eval_batches=2, output_dir=str(out),
                    optim=OptimConfig(grad_clip=0.05), **changes)
    out.mkdir(parents=True, exist_ok=True)
    path = out.parent / f"{out.name}.config.json"
    path.write_text(json.dumps(run.to_dict()))
    return path


def train(path: Path, timeout: float = 240, fault: str | None = None, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", **env}
    environment.pop(FAULT_ENV, None)
    if fault:
        environment[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "parallax", "train", "--config", str(path)], cwd=ROOT,
                          env=environment, capture_output=True, text=True, timeout=timeout)


def leftovers(marker: str) -> list[int]:
    """Live processes whose command line mentions ``marker`` (the run's folder)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def real_tokens(prepared) -> dict:
    return {"synthetic": False, "data": str(prepared.directory)}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, prepared):
    out = tmp_path_factory.mktemp("one") / "run"
    proc = train(config(out, 8, 1, **real_tokens(prepared)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_run(out)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, prepared):
    """The two-process run of each sharding on the same tokens, launched once for the tests
    that read it: ``two_processes("ddp")`` is (the finished process, its output folder)."""
    runs = {}

    def run(sharding: str):
        if sharding not in runs:
            out = tmp_path_factory.mktemp(sharding) / "run"
            runs[sharding] = train(config(out, 4, 2, sharding=sharding, **real_tokens(prepared))), out
        return runs[sharding]

    return run


@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_two_processes_train_the_global_batch_to_the_one_process_losses(one_process, two_processes, sharding):
    proc, out = two_processes(sharding)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = load_run(out)
    assert two["status"] == "ok"
    assert two["per_step"]["loss"] == pytest.approx(one_process["per_step"]["loss"], rel=1e-5)
    assert [e["loss"] for e in two["eval"]] == pytest.approx([e["loss"] for e in one_process["eval"]], rel=1e-5)
    steps = load_steps(out)
    # clipped every step by the global gradient norm (bf16 weight gradients: ~1e-4 apart)
    assert [s["grad_norm"] for s in steps] == pytest.approx(one_process_grad_norms(one_process), rel=1e-3)
    assert min(s["grad_norm"] for s in steps) > 0.05

    par = two["parallel"]
    assert {k: par[k] for k in ("gpus", "processes", "hosts", "sharding", "per_gpu_batch", "global_batch",
                                "launcher", "backend")} == {
        "gpus": 2, "processes": 2, "hosts": 1, "sharding": sharding, "per_gpu_batch": 4, "global_batch": 8,
        "launcher": "torch.distributed.run", "backend": "gloo"}
    assert [r["rank"] for r in par["per_rank"]] == [0, 1]
    assert par["communication_share"] is None and "gloo runs on the host" in par["communication_method"]
    assert all(r["step_ms_median"] > 0 and r["device"] == "cpu" for r in par["per_rank"])
    # the NVLS / multicast switches reach every rank unchanged
    assert all(r["env"]["NCCL_NVLS_ENABLE"] == "0" and r["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
               for r in par["per_rank"])
    # each step's time is the slowest rank's; throughput is global, and per GPU its half
    assert all(s["step_ms"] == max(s["rank_step_ms"]) and len(s["rank_step_ms"]) == 2 for s in steps)
    assert two["throughput"]["tokens_per_step"] == 8 * 32
    assert two["throughput"]["tokens_per_s_per_gpu"] == pytest.approx(two["throughput"]["tokens_per_s"] / 2)
    assert two["config"]["gpus"] == 2 and one_process["parallel"]["launcher"] == "single"
    assert not (out / "ranks" / "rank-0.json").exists()  # no rank failed
    assert "parallax train: torch bf16 tiny" in proc.stdout  # rank 0's summary; the launcher prints nothing


def one_process_grad_norms(run: dict) -> list[float]:
    return [s["grad_norm"] for s in load_steps(Path(run["config"]["output_dir"]))]


def test_two_processes_on_real_tokens_read_the_ranks_slices_of_the_same_batches(one_process, two_processes):
    """--data: the native loader serves each rank its rows; the eval set is the global one."""
    proc, out = two_processes("ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = one_process, load_run(out)
    assert a["config"]["data"] == b["config"]["data"] and not b["config"]["synthetic"]
    assert b["per_step"]["loss"] == pytest.approx(a["per_step"]["loss"], rel=1e-5)
    assert [e["loss"] for e in b["eval"]] == pytest.approx([e["loss"] for e in a["eval"]], rel=1e-5)
    assert b["data"]["source"].endswith("rows 0:4 of 8")  # rank 0's description


def test_a_rank_that_raises_fails_the_run_with_its_error_and_leaves_nothing_running(tmp_path):
    out = tmp_path / "run"
    proc = train(config(out, 4, 2), fault="raise:1:2")
    assert proc.returncode == 1
    result = load_run(out)
    assert result["status"] == "failed"
    assert result["error"].startswith("rank 1 of 2 (")
    assert "RuntimeError: planted failure (PARALLAX_TEST_FAULT) in rank 1 at step 2" in result["error"]
    assert "then rank 0 failed too" in result["error"] or "rank 0 reported no error" in result["error"]
    assert result["parallel"]["failed_rank"] == 1 and "planted failure" in result["traceback"]
    assert result["recipe"]["name"] == "bf16"  # the launcher's RunPlan's
    failures = {f["rank"]: f for f in result["parallel"]["rank_failures"]}
    assert failures[1]["exitcode"] == 1 and failures[1]["step"] == 2
    assert "rank 1 of 2" in proc.stdout  # the launcher's summary names it
    assert leftovers(str(out)) == []


@pytest.mark.parametrize("kind, status, code, says", [
    ("exit", "failed", 1, "rank 1 of 2: exit code 7 without a Python error"),
    ("oom", "oom", 3, "out of memory: rank 1 of 2"),
])
def test_a_rank_that_dies_or_runs_out_of_memory_is_recorded(tmp_path, kind, status, code, says):
    out = tmp_path / "run"
    proc = train(config(out, 4, 2), fault=f"{kind}:1:1")
    assert proc.returncode == code, proc.stderr[-2000:]
    result = load_run(out)
    assert result["status"] == status and result["error"].startswith(says), result["error"]
    assert leftovers(str(out)) == []


def test_a_hung_rank_fails_the_run_within_the_collective_timeout(tmp_path):
    out = tmp_path / "run"
    started = time.monotonic()
    proc = train(config(out, 4, 2, dist_timeout_s=4.0), fault="hang:1:2", timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1
    result = load_run(out)
    assert result["status"] == "failed" and result["parallel"]["failed_rank"] == 0
    assert "Timed out" in result["error"] and "4000ms" in result["error"]
    assert "rank 1 reported no error and was stopped by the launcher" in result["error"]
    assert elapsed < 90
    assert leftovers(str(out)) == []


def test_a_benchmark_cell_of_two_gpus_ends_at_its_timeout_with_no_orphan(tmp_path, monkeypatch):
    """The runner's timeout: rank 1 hangs, the collective timeout is far away, the cell's is
    not. The runner kills the launcher's process group; torchrun started the ranks in their own
    sessions, and they die with their launcher (lifeline)."""
    from fixtures.fake_runs import tiny_config

    from parallax.run.runner import Matrix, run_matrix

    monkeypatch.setenv(FAULT_ENV, "hang:1:1")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    base = tiny_config(steps=3, warmup=1, dist_timeout_s=600.0)
    matrix = Matrix(("torch",), ("bf16",), base=base, gpus=(2, 1))
    results = run_matrix(matrix, tmp_path, timeout_s=18, environment=lambda: {}, poll_s=0.2)  # the 1-GPU cell took ~10 s on 2 cores
    status = {r.cell.id: r.status for r in results}
    assert status == {"torch-bf16-g2-seed0-rep0": "timeout", "torch-bf16-seed0-rep0": "ok"}  # the matrix goes on
    hung = load_run(tmp_path / "runs" / "torch-bf16-g2-seed0-rep0")
    assert hung["error"].startswith("exceeded --timeout-per-run of 18 s")
    assert hung["config"]["gpus"] == 2
    time.sleep(1.0)
    assert leftovers(str(tmp_path / "runs" / "torch-bf16-g2-seed0-rep0")) == []


@pytest.mark.parametrize("fault", [None, "raise:1:2"])
def test_ranks_started_by_an_outer_torchrun_train_and_the_first_failure_writes_the_result(tmp_path, fault):
    """How several hosts start the ranks (a Slurm step or a hand-started torchrun per host):
    ``parallax train`` is then a rank from the start, with no launcher of ours around it."""
    out = tmp_path / "run"
    path = config(out, 4, 2)
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0"}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "parallax", "train", "--config", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    result = load_run(out)
    if fault is None:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert result["status"] == "ok" and result["parallel"]["launcher"] == "torch.distributed.run"
        assert not (out / "ranks").exists()
    else:
        assert proc.returncode != 0
        assert result["status"] == "failed" and result["error"].startswith("rank 1 of 2 (")
        assert "planted failure" in result["error"]
        assert result["parallel"]["launcher"] == "torch.distributed.run (outer)"
        assert result["recipe"]["name"] == "bf16"  # the failing rank's RunPlan's
        assert (out / "ranks" / "rank-1.json").exists()
    assert leftovers(str(out)) == []
