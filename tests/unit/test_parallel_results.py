"""run.json of a run on several GPUs, from known per-rank numbers: each step is the slowest
rank's, throughput global and per GPU, MFU per GPU, memory the largest rank's; a 1-GPU run gets
the single-launcher record; the launcher's record of a failed launch names the first failure."""

from __future__ import annotations

import pytest

from parallax.plan import world
from parallax.run import distributed, train
from parallax.store import results
from parallax.spec.config import RunConfig
from parallax.engines.base import Engine, EngineOutput, Plan, StepRecord
from parallax.spec.precision import PrecisionInfo
from parallax.spec import registry
from parallax.plan.resolve import planned

BF16 = PrecisionInfo("bf16", "fake", "fake recipe", True)
RANK_MS = [[50.0, 10.0, 12.0, 10.0, 11.0], [40.0, 11.0, 10.0, 14.0, 10.0]]  # rank 0, rank 1


class TwoRankEngine(Engine):
    """What the torch engine's rank 0 returns after gathering: per-rank step times and memory."""

    name = "fake"

    def check(self, run):
        return Plan(recipe=registry.get("torch", "bf16"), precision=BF16, device="cuda:0")

    def train(self, run, plan, batches, progress):
        steps = [StepRecord(k, 5.0 - 0.1 * k, RANK_MS[0][k], 1e-4, 0.5) for k in range(5)]
        per_rank = [{"rank": r, "host": "h", "device": f"cuda:{r}", "step_ms": RANK_MS[r], "loss": [0.0] * 5,
                     "peak_allocated_bytes": [100, 300][r], "peak_reserved_bytes": [400, 200][r]} for r in (0, 1)]
        return EngineOutput(steps=steps, precision=BF16,
                            framework={"name": "fake", "device": "cuda:0", "device_name": "NVIDIA H200",
                                       "compute_capability": "9.0"},
                            timing_method="fake", compile_s=1.0, peak_allocated_bytes=100, peak_reserved_bytes=400,
                            extra={"parallel": {"gpus": 2, "processes": 2, "hosts": 1, "launcher": "torch.distributed.run",
                                                "backend": "nccl", "per_rank": per_rank, "sharding_detail": "x"}})

    def reference_trainer(self, *args):
        raise NotImplementedError


def two_gpu_run(tmp_path, **changes) -> RunConfig:
    base = dict(model="tiny", batch_size=2, seq_len=16, steps=5, warmup=1, compile=False, gpus=2,
                device="cpu", output_dir=str(tmp_path / "run"))
    return RunConfig(**{**base, **changes})


def summarize(run, engine) -> dict:
    out = engine.train(run, engine.check(planned(run)), None, None)
    env = {"gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0", "uuid": None}]}
    return train.summarize(planned(run), out, env, {"source": "fake"}, "t0"), train.step_rows(run, out.steps)


def test_each_step_is_the_slowest_ranks_and_throughput_is_global_and_per_gpu(tmp_path):
    run = two_gpu_run(tmp_path)
    result, rows = summarize(run, TwoRankEngine())
    slowest = [max(a, b) for a, b in zip(*RANK_MS)]
    assert result["per_step"]["step_ms"] == slowest
    assert [r["rank_step_ms"] for r in rows] == [list(p) for p in zip(*RANK_MS)]
    assert result["timing"]["step_ms"]["median"] == pytest.approx(11.5)  # of 11, 12, 14, 11
    tput = result["throughput"]
    assert tput["tokens_per_step"] == 2 * 2 * 16  # global batch 4 x 16
    assert tput["tokens_per_s"] == pytest.approx(64 * 1e3 / 11.5)
    assert tput["tokens_per_s_per_gpu"] == pytest.approx(tput["tokens_per_s"] / 2)
    # TFLOP/s and MFU are one GPU's: its share of the tokens against one H200's dense bf16 peak
    spec = result["flops"]["accountings"]["spec"]
    assert spec["tflops"] == pytest.approx(tput["tokens_per_s_per_gpu"] * spec["flops_per_token"] / 1e12)
    assert spec["mfu_precision_peak"] == pytest.approx(spec["tflops"] / 989.0, rel=1e-3)
    assert result["memory"] == {"peak_allocated_bytes": 300, "peak_reserved_bytes": 400}
    par = result["parallel"]
    assert {k: par[k] for k in ("gpus", "processes", "hosts", "sharding", "per_gpu_batch", "global_batch",
                                "launcher", "backend")} == {
        "gpus": 2, "processes": 2, "hosts": 1, "sharding": "ddp", "per_gpu_batch": 2, "global_batch": 4,
        "launcher": "torch.distributed.run", "backend": "nccl"}
    assert par["sharding_detail"] == "x"
    assert [(r["rank"], r["step_ms_median"]) for r in par["per_rank"]] == [(0, 10.5), (1, 10.5)]
    assert all("step_ms" not in r and "loss" not in r for r in par["per_rank"])
    results.validate_run({"schema": results.SCHEMA, **result})


def test_a_one_gpu_run_gets_the_single_launcher_record(tmp_path, monkeypatch):
    from test_train import FakeEngine, tiny_run

    monkeypatch.setattr(train, "get_engine", lambda name: FakeEngine(step_ms=[9.0, 1.0, 2.0, 3.0, 4.0, 5.0]))
    result = train.run_training(tiny_run(tmp_path))
    par = result["parallel"]
    assert {k: par[k] for k in ("gpus", "processes", "hosts", "launcher", "backend", "global_batch")} == {
        "gpus": 1, "processes": 1, "hosts": 1, "launcher": "single", "backend": None, "global_batch": 2}
    assert par["per_rank"][0]["rank"] == 0 and par["per_rank"][0]["step_ms_median"] == 3.5
    assert result["throughput"]["tokens_per_s_per_gpu"] == result["throughput"]["tokens_per_s"]


def test_a_run_from_before_the_parallel_record_reads_as_one_gpu():
    old = {"config": {"batch_size": 32}, "status": "ok"}
    assert results.parallel_of(old)["gpus"] == 1 and results.parallel_of(old)["global_batch"] == 32
    assert results.parallel_of({"parallel": {"gpus": 4}}) == {"gpus": 4}


def test_the_first_failure_is_the_ranks_own_error_before_a_peers_complaint():
    errors = {0: {"rank": 0, "message": "Connection closed by peer [127.0.0.1]:1", "time_unix": 1.0},
              1: {"rank": 1, "message": "planted", "time_unix": 2.0}}
    failures = {0: {"exitcode": 1, "signal": None}, 1: {"exitcode": 1, "signal": None}}
    assert distributed.root_cause(errors, failures)[0] == 1
    # a rank that died without a Python error beats the peers that then lost it
    died = {0: {"exitcode": 1, "signal": None}, 1: {"exitcode": 7, "signal": None}}
    rank, cause = distributed.root_cause({0: errors[0]}, died)
    assert (rank, cause["message"]) == (1, "exit code 7 without a Python error")
    # a hung rank leaves only the others' timeouts; torchrun's SIGTERM is no failure of its own
    hung = {0: {"exitcode": 1, "signal": None}, 1: {"exitcode": -15, "signal": "SIGTERM"}}
    timeout = {0: {"rank": 0, "message": "Timed out waiting 4000ms for recv", "time_unix": 5.0}}
    assert distributed.root_cause(timeout, hung)[0] == 0
    assert "rank 1 reported no error and was stopped" in distributed._aftermath(0, timeout, hung)


def test_a_rank_refusing_the_run_is_bad_input_and_nothing_is_written(tmp_path):
    from parallax.errors import ParallaxError

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank-0.json").write_text('{"rank": 0, "type": "ParallaxError", "message": "no such GPU", "time_unix": 1}')
    with pytest.raises(ParallaxError, match="no such GPU"):
        distributed.write_launch_failure(planned(two_gpu_run(tmp_path)), tmp_path, ranks, {0: {"exitcode": 2}}, "t",
                                         1.0)
    assert not (tmp_path / "run.json").exists()


def test_the_planted_fault_hook_acts_only_at_its_rank_and_step(monkeypatch):
    monkeypatch.setenv(world.FAULT_ENV, "raise:1:2")
    world.planted_fault(0, 2)
    world.planted_fault(1, 1)
    with pytest.raises(RuntimeError, match="planted failure"):
        world.planted_fault(1, 2)
    monkeypatch.setenv(world.FAULT_ENV, "nonsense")
    with pytest.raises(RuntimeError, match="KIND:RANK:STEP"):
        world.planted_fault(0, 0)


def test_the_communication_share_is_ncclS_part_of_the_profiled_kernel_time():
    from parallax.engines.torch import parallel

    events = [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300.0), ("nvjet_tst_128x256", 600.0),
              ("triton_poi_fused_mul_silu_0", 100.0)]
    record = parallel.communication_record(events, step=3)
    assert record == {"step": 3, "kernel_ms": 1.0, "communication_ms": 0.3, "share": pytest.approx(0.3)}
    ranks = [{"communication": record}, {"communication": {**record, "share": 0.4}}]
    summary = parallel.communication_summary(None, "cuda", ranks)
    assert summary["communication_share"] == 0.4 and "NCCL" in summary["communication_method"]
    assert parallel.communication_summary(None, "cuda", [{"communication": None}])["communication_share"] is None
    assert "--warmup 2" in parallel.communication_summary(None, "cuda", [{}])["communication_method"]
