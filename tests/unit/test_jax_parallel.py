"""The JAX engine on several devices and processes, on the CPU: XLA:CPU devices from
``--xla_force_host_platform_device_count`` stand in for GPUs, gloo for NCCL.

- the environment → ``jax.distributed.initialize`` arguments, FSDP's choice of dimension, the
  rank slices of the synthetic batches (exact), the configuration's checks;
- tiny trained on 1 device (batch 8) and on 2 devices (4 each, the same global batch) gives the
  same losses and evaluation loss within float tolerance: bf16 and Flax fp8 (delayed), ddp and
  fsdp; the emulated NVFP4 recipe too; the parameters really are replicated or sharded;
- two processes joined by a real ``jax.distributed`` rendezvous on localhost (gloo collectives)
  give the same losses, and a failure planted in one ends both, the error in its log.
Runs that need a device count or several processes run in fresh interpreters (XLA reads its
flags when JAX starts): ``tests/fixtures/jax_parallel_run.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from parallax.spec.config import RunConfig  # noqa: E402
from parallax.data.source import make_batch_source  # noqa: E402
from parallax.data.synthetic import rank_rows  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines.jax import parallel  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402
from parallax.plan.resolve import planned  # noqa: E402

DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "jax_parallel_run.py"
# bf16 compute: 1 and 2 devices sum the gradient in another order. Measured on tiny (5 steps,
# lr 1e-2): at most 4e-4 (bf16) and 6e-4 (flax fp8) apart; training on half the global batch
# instead moves the losses by 6e-3..1.3e-2, so this tolerance tells the two apart.
LOSS_TOL = 1.5e-3
# Emulated NVFP4 rounds stochastically: a gradient that differs in its last bits flips roundings.
NVFP4_TOL = 5e-3


def drive_side_by_side(groups: list[list[dict]], devices: int = 2, env: dict | None = None,
                       timeout: int = 900) -> list[list[dict]]:
    """``drive`` of each group in its own interpreter, all at once: XLA compiles the runs' steps on
    one core each, so two groups take about the time of one on the 2-core CI machine. Losses do
    not depend on what runs beside them."""
    procs = [subprocess.Popen([sys.executable, str(DRIVER), json.dumps(specs)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=driver_env(devices, env)) for specs in groups]
    try:
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err[-4000:]
            results.append([json.loads(line[len("RESULT "):]) for line in out.splitlines()
                            if line.startswith("RESULT ")])
        return results
    finally:  # a failed or timed-out group leaves none of the others running on the CI's two cores
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def driver_env(devices: int, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")
           and not k.startswith(("PARALLAX_", "SLURM_", "JAX_COORDINATOR", "JAX_LOCAL"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", **(extra or {}))
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the environment, FSDP's dimensions, the rank slices ----------------------------------------

def test_one_process_needs_no_rendezvous():
    assert parallel.distributed_args(2, {}) is None
    assert parallel.process_count_from_env({}) == 1 and parallel.launch_kind({}) == "single"
    # A Slurm job step of one task is one process too.
    one = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0"}
    assert parallel.distributed_args(8, one) is None


def test_hand_started_processes_name_the_coordinator_count_and_id():
    env = {"PARALLAX_NUM_PROCESSES": "2", "PARALLAX_PROCESS_ID": "1", "JAX_COORDINATOR_ADDRESS": "h0:1234"}
    args = parallel.distributed_args(4, env)
    assert args["coordinator_address"] == "h0:1234" and args["num_processes"] == 2 and args["process_id"] == 1
    assert args["cluster_detection_method"] == "deactivate"  # our variables, not a cluster's guess
    assert args["local_device_ids"] == [0, 1]  # gpus / processes of the visible ones
    assert args["shutdown_timeout_seconds"] == parallel.SHUTDOWN_TIMEOUT_S
    assert parallel.distributed_args(4, {**env, "JAX_LOCAL_DEVICE_IDS": "2,3"})["local_device_ids"] == [2, 3]
    assert parallel.launch_kind(env) == "PARALLAX_NUM_PROCESSES"


@pytest.mark.parametrize("env, message", [
    ({"PARALLAX_NUM_PROCESSES": "2", "PARALLAX_PROCESS_ID": "0"}, "needs JAX_COORDINATOR_ADDRESS"),
    ({"PARALLAX_NUM_PROCESSES": "2", "JAX_COORDINATOR_ADDRESS": "h:1"}, "needs PARALLAX_PROCESS_ID"),
    ({"PARALLAX_NUM_PROCESSES": "2", "PARALLAX_PROCESS_ID": "2", "JAX_COORDINATOR_ADDRESS": "h:1"}, "outside 0 .. 1"),
    ({"PARALLAX_NUM_PROCESSES": "two"}, "is not an integer"),
    ({"PARALLAX_NUM_PROCESSES": "3", "PARALLAX_PROCESS_ID": "0", "JAX_COORDINATOR_ADDRESS": "h:1"},
     "does not split over 3 processes"),
])
def test_a_bad_rendezvous_environment_is_a_one_line_error(env, message):
    with pytest.raises(ParallaxError, match=message) as info:
        parallel.distributed_args(4, env)
    assert "\n" not in str(info.value)


def test_slurm_tasks_get_their_share_of_the_node_gpus():
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
             "SLURM_LOCALID": "0"}
    args = parallel.distributed_args(16, slurm)
    # JAX detects coordinator, count and id from Slurm; we only override its one GPU per task.
    assert "coordinator_address" not in args and "num_processes" not in args
    assert args["local_device_ids"] == list(range(8))
    # Two tasks per node without per-task binding: task L takes GPUs [L·k, (L+1)·k) ...
    two = {**slurm, "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    assert parallel.distributed_args(16, two)["local_device_ids"] == [4, 5, 6, 7]
    # ... and with Slurm's binding (--gpus-per-task) all of its visible GPUs.
    bound = {**two, "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert parallel.distributed_args(16, bound)["local_device_ids"] == [0, 1, 2, 3]
    assert parallel.process_count_from_env(two) == 4 and parallel.launch_kind(two) == "slurm"
    # PARALLAX_NUM_PROCESSES=1 runs one process inside a Slurm step of several tasks.
    assert parallel.distributed_args(16, {**two, "PARALLAX_NUM_PROCESSES": "1"}) is None


@pytest.mark.parametrize("shape, n, dim", [
    ((10_000, 768), 8, 0), ((768, 10_000), 8, 1), ((768, 2048), 2, 1), ((64, 64), 2, 0), ((768,), 4, 0),
    ((), 2, None), ((3, 5), 2, None), ((6, 4), 4, 1), ((1,), 2, None), ((64, 64), 1, None),
])
def test_fsdp_shards_the_largest_dimension_the_device_count_divides(shape, n, dim):
    assert parallel.fsdp_dim(shape, n) == dim


def test_rank_slices_are_the_rows_of_the_same_global_batch():
    one = RunConfig(model="tiny", batch_size=8, seq_len=16, seed=3, framework="jax")
    two = one.replace(batch_size=4, gpus=2)
    four = one.replace(batch_size=2, gpus=4)
    assert two.global_batch == four.global_batch == 8 and two.tokens_per_step == 8 * 16
    for k, full in zip(range(3), make_batch_source(one)):
        # 1 GPU: today's batches, unchanged.
        assert np.array_equal(full, synthetic_batch(3, k, 8, 16, one.model_config.vocab_size))
    for run, world in ((two, 2), (four, 4), (four, 2)):  # a process per GPU, or per two GPUs
        parts = [next(iter(make_batch_source(run, rank, world))) for rank in range(world)]
        assert all(p.shape == (8 // world, 17) for p in parts)
        assert np.array_equal(np.concatenate(parts), next(iter(make_batch_source(one))))
        # Evaluation batches are sliced the same way: the ranks' rows together are the 1-GPU batch.
        rows = 8 // world
        assert all(np.array_equal(a, b[rows:2 * rows]) for a, b in zip(make_batch_source(run, 1, world).eval_batches(),
                                                                       make_batch_source(one).eval_batches()))
    assert rank_rows(four.global_batch, 3, 4) == (6, 8) and rank_rows(four.global_batch, 1, 2) == (4, 8)
    with pytest.raises(ParallaxError, match="does not split into 3 equal slices"):
        make_batch_source(four, 0, 3)


@pytest.mark.parametrize("changes, message", [
    ({"gpus": 0}, r"--gpus must be at least 1 \(or .all.\), got 0"),
    ({"sharding": "zero3"}, "--sharding must be one of ddp, fsdp"),
])
def test_run_config_checks_gpus_and_sharding(changes, message):
    from parallax.plan.resolve import resolve

    with pytest.raises(ParallaxError, match=message):  # --gpus: counted by plan.world, once
        resolve(RunConfig(model="tiny", batch_size=8, seq_len=16, steps=3, warmup=1, **changes))


def test_te_jax_recipes_refuse_several_devices():
    from parallax.spec import registry

    run = RunConfig(framework="jax", recipe="te-bf16", precision=None, model="tiny", gpus=2)
    with pytest.raises(ParallaxError, match="runs on one GPU in Parallax") as info:
        registry.get("jax", "te-bf16").load_hooks().check_parallel(run)
    assert "\n" not in str(info.value)


def test_an_explicit_device_index_with_several_devices_is_refused():
    run = RunConfig(framework="jax", model="tiny", device="cpu:1", gpus=2)
    with pytest.raises(ParallaxError, match="names one device; with --gpus 2 use --device cpu"):
        parallel.mesh_devices(run)


# --- 1 device against 2: the same global batch, the same losses ------------------------------------

RUNS = {
    "1": {}, "ddp": {"gpus": 2, "batch_size": 4}, "fsdp": {"gpus": 2, "batch_size": 4, "sharding": "fsdp"},
}


@pytest.fixture(scope="module")
def trained() -> dict:
    """{(recipe, "1" | "ddp" | "fsdp"): driver result} for bf16 and flax-fp8-delayed, and
    {("emulated-nvfp4-all", "1" | "ddp"): ...}, in processes with 2 CPU devices (the 1-device
    runs use the first)."""
    # one interpreter per recipe with XLA flags: flax-fp8-delayed's (--xla_allow_excess_precision=false
    # changes the CPU's numerics too) apply only in a process where they are set before JAX
    # starts, as in a real run; the three runs of a recipe then share them. The emulated NVFP4
    # recipe has none: its two runs follow bf16's, so that the two interpreters take about as
    # long (~50 s each on 2 cores) and the second core is not idle while one of them runs alone.
    groups = [[("bf16", name) for name in RUNS] + [("emulated-nvfp4-all", name) for name in ("1", "ddp")],
              [("flax-fp8-delayed", name) for name in RUNS]]
    results = drive_side_by_side([[{"recipe": recipe, **RUNS[name]} for recipe, name in g] for g in groups])
    return {key: result for g, rs in zip(groups, results) for key, result in zip(g, rs, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["bf16", "flax-fp8-delayed"])
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_two_devices_train_like_one_on_the_same_global_batch(trained, recipe, sharding):
    one, two = trained[(recipe, "1")], trained[(recipe, sharding)]
    assert len(two["loss"]) == 5 and np.all(np.isfinite(two["loss"]))
    np.testing.assert_allclose(two["loss"], one["loss"], atol=LOSS_TOL, rtol=0)
    assert two["loss"][0] == pytest.approx(one["loss"][0], abs=1e-5)  # before any update: the same forward
    np.testing.assert_allclose(two["eval"], one["eval"], atol=LOSS_TOL, rtol=0)
    assert len(two["eval"]) == 1


@pytest.mark.slow
def test_ddp_replicates_and_fsdp_shards_the_parameters(trained):
    assert set(trained[("bf16", "ddp")]["shardings"].values()) == {"P()"}
    assert trained[("bf16", "fsdp")]["shardings"] == {
        "tok_embeddings/embedding": "P('data', None)",  # [10000, 64]: the vocabulary
        "layers_0/wq/kernel": "P('data', None)",  # [64, 64]: the first of equals
        "layers_0/w_down/kernel": "P('data', None)",  # [128, 64]
        "norm/scale": "P('data',)",
    }
    assert trained[("bf16", "fsdp")]["parallel"]["replicated_parameters"] == []  # tiny: all divide by 2
    # AdamW's moments follow their parameters; its step count is replicated.
    assert trained[("bf16", "ddp")]["optimizer"] == {"moment_specs": ["P()"], "scalar_specs": ["P()"]}
    fsdp = trained[("bf16", "fsdp")]["optimizer"]
    assert set(fsdp["moment_specs"]) == {"P('data',)", "P('data', None)", "P(None, 'data')"}
    assert fsdp["scalar_specs"] == ["P()"]
    assert trained[("bf16", "1")]["shardings"]["norm/scale"] == "single"  # 1 device: the path of old
    # XLA put the collectives in: the gradient all-reduce; FSDP's parameter all-gathers too.
    assert trained[("bf16", "1")]["collectives"] == {}
    assert trained[("bf16", "ddp")]["collectives"].get("all-reduce", 0) >= 1
    assert "all-gather" not in trained[("bf16", "ddp")]["collectives"]
    assert trained[("bf16", "fsdp")]["collectives"].get("all-gather", 0) >= 1


@pytest.mark.slow
def test_the_parallel_record_says_what_ran(trained):
    one, two = trained[("bf16", "1")]["parallel"], trained[("flax-fp8-delayed", "fsdp")]["parallel"]
    assert {k: one[k] for k in ("gpus", "processes", "hosts", "launcher", "per_gpu_batch", "global_batch")} == \
        {"gpus": 1, "processes": 1, "hosts": 1, "launcher": "single", "per_gpu_batch": 8, "global_batch": 8}
    assert {k: two[k] for k in ("gpus", "processes", "hosts", "sharding", "launcher", "backend",
                                "per_gpu_batch", "global_batch")} == \
        {"gpus": 2, "processes": 1, "hosts": 1, "sharding": "fsdp", "launcher": "jax-local", "backend": "xla",
         "per_gpu_batch": 4, "global_batch": 8}
    assert [(r["rank"], r["device"]) for r in two["per_rank"]] == [(0, "cpu:0"), (1, "cpu:1")]
    assert all(r["peak_allocated_bytes"] is None and r["step_ms_median"] > 0 for r in two["per_rank"])
    assert trained[("bf16", "ddp")]["framework"]["devices"] == ["cpu:0", "cpu:1"]
    assert trained[("bf16", "ddp")]["plan"]["rows"] == [0, 8]  # one process holds the whole global batch


@pytest.mark.slow
def test_emulated_nvfp4_trains_on_two_devices(trained):
    one, two = trained[("emulated-nvfp4-all", "1")], trained[("emulated-nvfp4-all", "ddp")]
    assert (one["spec"], two["spec"]) == ({"recipe": "emulated-nvfp4-all"},
                                          {"recipe": "emulated-nvfp4-all", "gpus": 2, "batch_size": 4})
    assert two["loss"][0] == pytest.approx(one["loss"][0], abs=1e-5)
    np.testing.assert_allclose(two["loss"], one["loss"], atol=NVFP4_TOL, rtol=0)


def test_two_cpu_devices_in_a_process_that_started_jax_with_one_is_a_one_line_error():
    code = ("import jax; jax.devices()\n"
            "from parallax.spec.config import RunConfig\n"
            "from parallax.engines import get_engine\n"
            "from parallax.plan.resolve import planned\n"
            "from parallax.errors import ParallaxError\n"
            "try:\n"
            "    get_engine('jax').check(planned(RunConfig(framework='jax', model='tiny', batch_size=4, seq_len=16,"
            " steps=3, warmup=1, device='cpu', gpus=2).validate()))\n"
            "except ParallaxError as e:\n"
            "    print('ERROR', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=driver_env(1))
    assert "ERROR --gpus on the CPU needs 2 CPU devices in this process but JAX already started with 1" \
        in proc.stdout, proc.stderr[-2000:]


# --- two processes, one rendezvous --------------------------------------------------------------------

def start_processes(spec: dict, count: int = 2) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for index in range(count):
        env = driver_env(1, {"PARALLAX_NUM_PROCESSES": str(count), "PARALLAX_PROCESS_ID": str(index),
                             "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}"})
        procs.append(subprocess.Popen([sys.executable, str(DRIVER), json.dumps([spec])], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str, str]]:
    deadline = time.monotonic() + timeout
    try:
        ended = []
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            ended.append((p.returncode, out, err))
        return ended
    finally:
        for p in procs:  # never leave one behind
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_two_processes_over_a_real_rendezvous_train_like_one(trained):
    spec = {"gpus": 2, "batch_size": 4}
    ended = finish(start_processes(spec), timeout=600)
    results = []
    for index, (code, out, err) in enumerate(ended):
        assert code == 0, f"process {index}: {err[-3000:]}"
        results.append(json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:]))
    one = trained[("bf16", "1")]
    for index, result in enumerate(results):
        assert result["plan"]["process_index"] == index and result["plan"]["process_count"] == 2
        assert result["plan"]["rows"] == [4 * index, 4]  # its rows of the global batch
        np.testing.assert_allclose(result["loss"], one["loss"], atol=LOSS_TOL, rtol=0)
        np.testing.assert_allclose(result["eval"], one["eval"], atol=LOSS_TOL, rtol=0)
    # Both processes report the same steps: each the slowest process's time.
    assert results[0]["step_ms"] == results[1]["step_ms"] and results[0]["loss"] == results[1]["loss"]
    record = results[0]["parallel"]
    assert {k: record[k] for k in ("gpus", "processes", "hosts", "launcher", "collectives")} == \
        {"gpus": 2, "processes": 2, "hosts": 1, "launcher": "jax.distributed", "collectives": "gloo (XLA:CPU)"}
    assert [(r["rank"], r["process"]) for r in record["per_rank"]] == [(0, 0), (1, 1)]
    assert max(results[0]["step_ms"][1:]) >= max(r["step_ms_median"] for r in record["per_rank"])


@pytest.mark.slow
def test_a_failing_process_ends_both_with_its_error_in_its_log():
    timeout_s = 5  # jax.distributed's shutdown barrier: the healthy process ends this long after the failure
    t0 = time.monotonic()
    # The rendezvous test's run (5 steps) but for the failure: its steps come from the session's
    # JAX compilation cache, so both processes reach the failure ~7 s sooner.
    ended = finish(start_processes({"gpus": 2, "batch_size": 4, "fail_at": [1, 3],
                                    "shutdown_timeout_s": timeout_s}), timeout=300)
    elapsed = time.monotonic() - t0
    (code0, out0, err0), (code1, _, err1) = ended
    assert "RuntimeError: planted failure in process 1 before step 3" in err1
    # The healthy process was waiting for its peer inside a collective: JAX's coordination service
    # ends it once the failed process's shutdown barrier times out. Neither finished its run.
    assert code0 != 0 and code1 != 0 and "RESULT" not in out0
    assert "another task died" in err0 or "fatal errors" in err0 or "Barrier" in err0, err0[-2000:]
    assert elapsed < 200, f"the processes took {elapsed:.0f} s to end"
