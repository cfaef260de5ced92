"""The run's world: which rank this process is, and how many GPUs ``--gpus N|all`` means here.

``resolve_gpus`` is the one place where ``--gpus`` becomes a count, checked against the visible
GPUs with one set of messages; ``plan.resolve`` calls it once per process for every run (the
command line's, a ``--config`` file's, a benchmark cell's). A torch run of several GPUs is one
process per GPU under torchrun, whose environment (RANK, WORLD_SIZE, LOCAL_RANK) says which rank
a process is (``rank_info``); a JAX run of several hosts is one process per host, counted from
``PARALLAX_NUM_PROCESSES`` or a Slurm step (``process_count_from_env``).

Test hook: ``PARALLAX_TEST_FAULT=KIND:RANK:STEP`` plants a fault in rank RANK before step STEP
(``planted_fault``): ``raise`` (a RuntimeError), ``oom`` (torch's OutOfMemoryError), ``exit``
(``os._exit(7)``: death without a Python error) or ``hang`` (sleeps forever before the step's
collectives). Only tests set it.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from parallax.errors import ParallaxError
from parallax.plan import machine
from parallax.spec.config_schema import RANGES

# Multicast/NVLS stay off on the machines this project runs on; never unset, also in children.
KEPT_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
# A JAX run of several processes (engines/jax/parallel.py): their count, set by hand or by Slurm.
NUM_PROCESSES_ENV = "PARALLAX_NUM_PROCESSES"
FAULT_ENV = "PARALLAX_TEST_FAULT"
SLURM_STEP_ENV = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a torchrun launch (torchrun's environment variables)."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    host: str
    launcher: str  # "torch.distributed.run"


def rank_info() -> RankInfo | None:
    """The rank this process is, when a torch launcher started it (RANK and WORLD_SIZE set); else None."""
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local_rank = int(env.get("LOCAL_RANK", rank))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    except ValueError:
        raise ParallaxError(f"RANK={env['RANK']!r}, WORLD_SIZE={env['WORLD_SIZE']!r}: not integers; "
                            "start ranks with torch.distributed.run") from None
    return RankInfo(rank, world, local_rank, local_world, socket.gethostname(), "torch.distributed.run")


def kept_env() -> dict:
    """The NVLS/multicast switches as this process sees them (None: not set)."""
    return {name: os.environ.get(name) for name in KEPT_ENV}


# ----------------------------------------------------------------------------- --gpus

def visible_gpus() -> int:
    """GPUs this process may use: the native probe's devices (the CUDA driver's count honours
    CUDA_VISIBLE_DEVICES), no GPU work."""
    return len(machine.devices())


def resolve_gpus(value, device: str | None, option: str = "--gpus") -> int:
    """The count of ``--gpus N|all`` for a run on ``device``: checked against the visible GPUs
    (on ``--device cpu`` N CPU ranks, any N >= 1); a one-line ParallaxError otherwise."""
    text = str(value).strip().lower()
    on_cpu = device == "cpu"
    rank = rank_info()
    if rank is not None and rank.world > 1:  # an outer torchrun started this rank: --gpus counts its world
        return _world_gpus(text, rank, on_cpu, option)
    if text == "all":
        if on_cpu:
            raise ParallaxError(f"{option} all counts GPUs; with --device cpu give the number of CPU ranks, "
                                f"e.g. {option} 2")
        found = visible_gpus()
        if not found:
            raise ParallaxError(f"{option} all: no NVIDIA GPU is visible; use --device cpu {option} N "
                                "for N CPU ranks")
        return found
    try:
        count = int(text)
    except ValueError:
        raise ParallaxError(f"{option} must be a number of GPUs or 'all', got {value!r}") from None
    if RANGES["gpus"].refusal(count):  # the range a configuration file's 'gpus' is held to
        raise ParallaxError(f"{option} must be at least 1 (or 'all'), got {count}")
    if on_cpu or count == 1:
        return count
    found = visible_gpus() * process_count_from_env()
    if count > found:
        fix = (f"use {option} {found} or fewer, or {option} all" if found else
               f"use --device cpu {option} {count} for {count} CPU ranks")
        raise ParallaxError(f"{option} {count}: only {found} GPU{'' if found == 1 else 's'} visible; {fix}")
    return count


def _world_gpus(text: str, rank: RankInfo, on_cpu: bool, option: str) -> int:
    """``--gpus`` inside a launch of ``rank.world`` ranks (several hosts): all of them, or 'all'."""
    if text != "all" and text != str(rank.world):
        raise ParallaxError(f"{option} {text}: torch.distributed.run started {rank.world} ranks "
                            f"({rank.local_world} on this host); give {option} {rank.world} or {option} all")
    found = 0 if on_cpu else visible_gpus()
    if not on_cpu and rank.local_world > found:
        raise ParallaxError(f"{rank.local_world} ranks on this host but only {found} GPU{'' if found == 1 else 's'} "
                            "visible; lower --nproc-per-node")
    return rank.world


# ----------------------------------------------------------------------------- processes

def int_env(environ, name: str) -> int:
    value = environ.get(name, "")
    try:
        return int(value)
    except ValueError:
        raise ParallaxError(f"{name}={value!r} is not an integer") from None


def process_count_from_env(environ=None) -> int:
    """How many processes this run has, from the environment alone (``distributed_args``):
    1 unless a several-process launch is set up. The CLI multiplies the visible GPUs by it."""
    environ = os.environ if environ is None else environ
    for name, given in ((NUM_PROCESSES_ENV, bool(environ.get(NUM_PROCESSES_ENV))),
                        ("SLURM_NTASKS", all(n in environ for n in SLURM_STEP_ENV))):
        if given:
            count = int_env(environ, name)
            if not 1 <= count <= 2**16:
                raise ParallaxError(f"{name}={count} must be a process count from 1 to 65536; unset it for one "
                                    "process")
            return count
    return 1


# ----------------------------------------------------------------------------- the test hook

def planted_fault(rank: int, step: int) -> None:
    """The test hook (``FAULT_ENV``): act when this is the planted rank and step; else nothing."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    try:
        kind, at_rank, at_step = spec.split(":")
        at_rank, at_step = int(at_rank), int(at_step)
    except ValueError:
        raise RuntimeError(f"{FAULT_ENV}={spec!r}: expected KIND:RANK:STEP") from None
    if (rank, step) != (at_rank, at_step):
        return
    if kind == "raise":
        raise RuntimeError(f"planted failure ({FAULT_ENV}) in rank {rank} at step {step}")
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError(f"planted out of memory ({FAULT_ENV}) in rank {rank} at step {step}")
    if kind == "exit":
        os._exit(7)
    if kind == "hang":
        while True:
            time.sleep(3600)
    raise RuntimeError(f"{FAULT_ENV}={spec!r}: unknown kind {kind!r} (raise, oom, exit, hang)")
