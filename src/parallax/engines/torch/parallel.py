"""The torch engine on several processes: the process group, DDP or FSDP2, and the ranks' records.

One process per GPU (``parallax.run.distributed`` launches them under torch.distributed.run).
Each rank joins the process group (NCCL on GPUs, gloo on the CPU) with the run's finite
timeout (``RunConfig.dist_timeout_s``), builds the same model from the same seeded weights
(``weights.init_weights``: every rank starts equal, DDP checks it by broadcasting rank 0's
anyway) and trains on its rows of each global batch (``data.source``).

Sharding (``RunConfig.sharding``):
  ddp   ``DistributedDataParallel`` over the recipe's model, then torch.compile of the wrapper
        (as today's whole-model compile; dynamo splits the graph at DDP's gradient buckets so
        the all-reduces overlap the backward). Every recipe runs under it. Gradients are
        averaged over the ranks, so the clipped norm and the update are one GPU's on the
        global batch.
  fsdp  FSDP2 ``fully_shard`` of every decoder block, then of the root (embedding, final
        norm, lm_head), then torch.compile of the model. Parameters are all-gathered in
        float32, the recipe's master weights, and autocast casts them as on one GPU (a bf16
        ``MixedPrecisionPolicy`` would halve the all-gather but change the numerics: not
        used); gradients are reduce-scattered in float32. The global gradient norm is one
        all-reduce of the shards' squared norms.
        Recipes: those whose ``Recipe.fsdp`` says how their weights travel (the plain bf16
        recipe; torchao tensorwise with torchao's float8 all-gather, the block linears' weights
        in fp8; torchao rowwise gathering float32, torchao has no rowwise float8 all-gather;
        the emulated NVFP4 recipes). Refused: the TransformerEngine recipes (TE's modules under
        FSDP2 are not wired here; they run under ddp). docs/precision.md has the table.

CUDA graphs (``--cuda-graphs``, TE recipes) are off with several GPUs: the graphs would be
captured without DDP's gradient hooks and FSDP's gathers. ``auto`` turns them off (recorded),
``on`` is refused.

TransformerEngine's DelayedScaling under DDP keeps one amax history per rank (no amax
reduction over ranks): each rank scales by what it saw; the weights stay equal because the
gradients are all-reduced.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from parallax.native.gpu import gpu_uuid
from parallax.plan.world import RankInfo, kept_env
from parallax.errors import ParallaxError

TEARDOWN_S = 60.0  # a rank whose process group does not come apart in this long exits anyway
GRAPHS_OFF = "not with several GPUs: the graphs would hold no DDP gradient hooks or FSDP gathers"


def check_run(run, recipe) -> None:
    """Refuse a multi-GPU torch run of ``recipe`` this engine cannot do, before any GPU work (no
    torch import)."""
    if run.cuda_graphs == "on":
        raise ParallaxError(f"--cuda-graphs on with --gpus {run.gpus}: CUDA graphs are {GRAPHS_OFF}; "
                            "use --cuda-graphs auto or off")
    if run.sharding == "fsdp" and not recipe.fsdp:
        from parallax.spec import registry

        sharded = [r.name for r in registry.of_framework("torch") if r.fsdp and r.implemented]
        raise ParallaxError(f"recipe '{recipe.name}' does not run with --sharding fsdp (TransformerEngine modules "
                            f"under FSDP2 are not wired here); use --sharding ddp, or one of {', '.join(sharded)}")
    kind, _, index = run.device.partition(":")
    if index:
        raise ParallaxError(f"--device {run.device} names one GPU; with --gpus {run.gpus} rank r takes GPU r "
                            "(CUDA_VISIBLE_DEVICES picks which): use --device cuda or auto")


@dataclass
class Group:
    """This rank in its process group."""

    rank: RankInfo
    backend: str
    sharding: str
    torch: object = field(repr=False)

    @property
    def dist(self):
        import torch.distributed as dist

        return dist

    @property
    def world(self) -> int:
        return self.rank.world

    def average(self, values):
        """The mean over the ranks of a float32 tensor (in place; gloo has no AVG)."""
        self.dist.all_reduce(values)
        return values.div_(self.world)

    def sum_(self, values):
        self.dist.all_reduce(values)
        return values

    def gather(self, record: dict) -> list[dict]:
        """Every rank's ``record``, in rank order, on every rank."""
        out = [None] * self.world
        self.dist.all_gather_object(out, record)
        return out

    def close(self, watchdog_s: float = TEARDOWN_S) -> None:
        """Leave the group once the result is written. A barrier first, so that the worker
        threads have dropped the last collectives' tensors; then, with the DDP module gone
        (gc), ``destroy_process_group`` drops the group's last reference from Python, whose
        destructor releases the GIL. (Destroyed from DDP's Reducer instead, gloo's destructor
        joins its worker threads holding the GIL while a worker waits for it to free a tensor:
        a deadlock seen here, pytorch#56297.) Should the teardown hang anyway, the rank exits
        after ``watchdog_s``: its part is done."""
        import gc
        import os
        import sys
        import threading

        dist = self.dist
        if not dist.is_initialized():
            return
        dist.barrier()
        import torch._dynamo

        torch._dynamo.reset()  # compiled frames may hold the DDP module
        gc.collect()
        done = threading.Event()

        def watchdog():
            if not done.wait(watchdog_s):
                print(f"parallax: rank {self.rank.rank}: leaving the process group hung for {watchdog_s:g} s; "
                      "exiting (the result is written)", file=sys.stderr, flush=True)
                os._exit(0)

        threading.Thread(target=watchdog, daemon=True, name="parallax-teardown").start()
        dist.destroy_process_group()
        done.set()


def device_of(torch, spec: str, rank: RankInfo):
    """The device of local rank ``rank``: its own GPU (cuda:LOCAL_RANK) or the CPU."""
    if spec == "cpu" or (spec == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ParallaxError(f"--device {spec}: torch sees no CUDA GPU; use --device cpu for CPU ranks")
    if rank.local_rank >= torch.cuda.device_count():
        raise ParallaxError(f"rank {rank.rank} is local rank {rank.local_rank} but only "
                            f"{torch.cuda.device_count()} CUDA device(s) are visible; lower --gpus")
    return torch.device("cuda", rank.local_rank)


def join(torch, run, rank: RankInfo, device) -> Group:
    """Join the run's process group (NCCL on a GPU, gloo on the CPU) with its timeout."""
    import torch.distributed as dist

    if rank.world != run.gpus:
        raise ParallaxError(f"{rank.launcher} started {rank.world} ranks but the run asks for --gpus {run.gpus}; "
                            "give --gpus the launcher's world size")
    cuda = device.type == "cuda"
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=run.dist_timeout_s),
                                **({"device_id": device} if cuda else {}))
    return Group(rank, backend, run.sharding, torch)


def wrap(torch, model, group: Group, device):
    """The module the step calls: ``model`` under DDP, or sharded in place by FSDP2."""
    if group.sharding == "ddp":
        import inspect

        from torch.nn.parallel import DistributedDataParallel

        # The RoPE tables are constant buffers: no broadcast before every forward (torch 2.13
        # renamed the switch; both leave the sync at construction, which the tables survive).
        no_sync = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                   else "broadcast_buffers")
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                       gradient_as_bucket_view=True, **{no_sync: False})
    from torch.distributed.fsdp import fully_shard

    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    return model


def local(tensor):
    """A DTensor's shard on this rank (FSDP2's gradients), else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None else tensor


def record(group: Group, device, step_ms: list[float], losses: list[float], peak_allocated, peak_reserved,
           communication: dict | None = None) -> dict:
    """What this rank contributes to the run's ``parallel`` record."""
    torch = group.torch
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"rank": group.rank.rank, "local_rank": group.rank.local_rank, "host": group.rank.host,
            "device": f"{device} ({name})" if device.type == "cuda" else str(device),
            "device_uuid": gpu_uuid(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else None,
            "step_ms": step_ms, "loss": losses,
            "peak_allocated_bytes": peak_allocated, "peak_reserved_bytes": peak_reserved,
            "communication": communication, "env": kept_env()}


COMMUNICATION_METHOD = ("torch.profiler over the last warmup step of each rank: the summed time of NCCL's kernels "
                        "over the summed time of all GPU kernels (under DDP the all-reduces overlap the backward, "
                        "so this is the collectives' share of kernel time, not the step time they add)")
NO_COMMUNICATION = {"cpu": "gloo runs on the host: the GPU profiler sees no collectives",
                    "warmup": "needs --warmup 2 or more (the first step compiles; measured steps stay unprofiled)"}


def communication_record(events: list[tuple], step: int) -> dict:
    """The collectives' share of a profiled step's GPU kernel time, from (name, µs) events
    (``profiling.torch_kernel_events``), NCCL's kernels by ``profiling.classify``."""
    from parallax.engines.profiling import classify

    total = sum(e[1] for e in events)
    comm = sum(e[1] for e in events if classify(e[0]) == "communication")
    return {"step": step, "kernel_ms": total / 1e3, "communication_ms": comm / 1e3,
            "share": comm / total if total else None}


def communication_summary(run, device_type: str, ranks: list[dict]) -> dict:
    """The run's ``communication_share`` (the largest rank's) and how it was had, or why not."""
    shares = [r["communication"]["share"] for r in ranks if r.get("communication") and
              r["communication"].get("share") is not None]
    if shares:
        return {"communication_share": max(shares), "communication_method": COMMUNICATION_METHOD}
    why = NO_COMMUNICATION["cpu"] if device_type != "cuda" else NO_COMMUNICATION["warmup"]
    return {"communication_share": None, "communication_method": why}


def parallel_extra(run, recipe, group: Group, ranks: list[dict]) -> dict:
    """The engine's ``extra["parallel"]`` (``train.parallel_record`` completes it)."""
    return {"gpus": run.gpus, "processes": group.world, "hosts": len({r["host"] for r in ranks}),
            "sharding": run.sharding, "per_gpu_batch": run.batch_size, "global_batch": run.global_batch,
            "launcher": group.rank.launcher, "backend": group.backend,
            **communication_summary(run, "cuda" if group.backend == "nccl" else "cpu", ranks),
            "sharding_detail": ("DistributedDataParallel (gradient all-reduce), torch.compile of the wrapper"
                                if run.sharding == "ddp" else
                                f"FSDP2 fully_shard per block + root: {recipe.fsdp}"),
            "per_rank": ranks}
