"""The JAX engine on 2 GPUs (run on the device; skipped with fewer than 2 NVIDIA GPUs): tiny on
1 GPU (batch 8) and on 2 GPUs (4 each, the same global batch) trains to the same losses, bf16
and Flax fp8 (delayed), ddp and fsdp; XLA puts NCCL collectives in the step; every GPU
reports its peak memory; two processes of one GPU each over a localhost rendezvous (NCCL
across processes) train like one.

Each recipe runs in a fresh interpreter (``tests/fixtures/jax_parallel_run.py``): XLA reads the
fp8 recipe's flags when JAX starts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:The Fp8DotGeneralOp is deprecated:DeprecationWarning")]

pytest.importorskip("jax")


def _gpu_count() -> int:
    from parallax.plan import envinfo

    return len(envinfo.probe_gpus().get("devices") or [])


if _gpu_count() < 2:
    pytest.skip("needs 2 NVIDIA GPUs", allow_module_level=True)

DRIVER = Path(__file__).resolve().parents[1] / "fixtures" / "jax_parallel_run.py"
LOSS_TOL = 2e-3  # bf16 sums in another order across 2 GPUs (tests/unit/test_jax_parallel.py)
BASE = {"device": "gpu", "seq_len": 128, "steps": 8, "warmup": 2}
RECIPES = ("bf16", "flax-fp8-delayed")


def drive(specs: list[dict], env: dict | None = None) -> list[dict]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PARALLAX_", "SLURM_"))}, **(env or {})}
    proc = subprocess.run([sys.executable, str(DRIVER), json.dumps([{**BASE, **s} for s in specs])],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(ln[len("RESULT "):]) for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]


@pytest.fixture(scope="module", params=RECIPES)
def trained(request) -> tuple[str, dict]:
    recipe = request.param
    one, ddp, fsdp = drive([{"recipe": recipe}, {"recipe": recipe, "gpus": 2, "batch_size": 4},
                            {"recipe": recipe, "gpus": 2, "batch_size": 4, "sharding": "fsdp"}])
    return recipe, {"1": one, "ddp": ddp, "fsdp": fsdp}


@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_two_gpus_train_like_one(trained, sharding):
    recipe, runs = trained
    one, two = runs["1"], runs[sharding]
    np.testing.assert_allclose(two["loss"], one["loss"], atol=LOSS_TOL, rtol=0)
    np.testing.assert_allclose(two["eval"], one["eval"], atol=LOSS_TOL, rtol=0)
    assert two["loss"][-1] < two["loss"][0]
    record = two["parallel"]
    assert (record["gpus"], record["launcher"], record["collectives"]) == (2, "jax-local", "NCCL (XLA:GPU)")
    assert [r["device"] for r in record["per_rank"]] == ["gpu:0", "gpu:1"]
    peaks = [r["peak_allocated_bytes"] for r in record["per_rank"]]
    assert all(p and p > 0 for p in peaks) and two["peak_allocated_bytes"] == max(peaks)


def test_the_step_holds_the_collectives_of_its_sharding(trained):
    _, runs = trained
    assert runs["1"]["collectives"] == {}
    assert runs["ddp"]["collectives"].get("all-reduce", 0) >= 1
    fsdp = runs["fsdp"]["collectives"]
    assert fsdp.get("all-gather", 0) >= 1 and fsdp.get("reduce-scatter", 0) + fsdp.get("all-reduce", 0) >= 1


def test_two_processes_of_one_gpu_each_train_like_one(trained):
    recipe, runs = trained
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = json.dumps([{**BASE, "recipe": recipe, "gpus": 2, "batch_size": 4}])
    procs = []
    for index in range(2):
        env = {**os.environ, "PARALLAX_NUM_PROCESSES": "2", "PARALLAX_PROCESS_ID": str(index),
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_LOCAL_DEVICE_IDS": str(index)}
        procs.append(subprocess.Popen([sys.executable, str(DRIVER), spec], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        ended = [(p.communicate(timeout=600), p.returncode) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for (out, err), code in ended:
        assert code == 0, err[-3000:]
        result = json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:])
        np.testing.assert_allclose(result["loss"], runs["1"]["loss"], atol=LOSS_TOL, rtol=0)
        assert result["parallel"]["launcher"] == "jax.distributed" and result["parallel"]["processes"] == 2
