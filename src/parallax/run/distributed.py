"""Several GPUs in one run: the rank a process is, the launcher, and how a failed rank is recorded.

A run with ``RunConfig.gpus`` > 1 of the torch engine is one process per GPU. ``parallax train
--gpus N`` (and a benchmark cell, which is ``parallax train --config``: one code path) starts
as the *launcher*: it checks the run (no GPU work), then re-executes the same command under
torch's own launcher, ``torch.distributed.run`` (torchrun) with ``--standalone
--nproc-per-node N``, in this process (``torch.distributed.run.run``: torchrun's ``main``
without its exit, so that the failures come back as objects). Each worker finds itself a rank
by torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK: ``rank_info``) and trains; rank 0
writes run.json and steps.jsonl, the other ranks write nothing. Started by an outer torchrun
(several hosts: docs/multi-gpu.md), ``parallax train`` is a rank from the start; the rank
that fails first then writes the failed run.json itself (``outer_failure``).

Failure: a rank that raises writes its error (type, message, traceback, time) to
``<output dir>/ranks/rank-<r>.json`` and exits non-zero; torchrun's elastic agent then ends the
other ranks (SIGTERM, then SIGKILL) and the launcher writes the run.json with the error of the
rank that failed first (a rank killed by a signal has no file: its exit code or signal from
torchrun is the error). A hung rank makes the others' collectives fail within
``RunConfig.dist_timeout_s`` (the process group's timeout), which ends the run the same way.
Workers die with the launcher (``lifeline``: PR_SET_PDEATHSIG), so a launcher killed by the
benchmark's timeout leaves no orphans (torchrun starts each worker in its own session, out of
reach of the runner's process-group kill).

The environment passes to every rank unchanged: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 where set are never unset
(``plan.world.KEPT_ENV``; each rank records what it saw).

Test hook: ``PARALLAX_TEST_FAULT`` (``plan.world.planted_fault``) plants a fault in one rank.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from parallax.errors import ParallaxError
from parallax.plan.world import RankInfo, rank_info
from parallax.store import files

RANKS_DIR = "ranks"  # inside the run's output directory: the launch config, rank errors, rank logs
RANK_ERRORS_ENV = "PARALLAX_RANK_ERRORS"  # the folder where each rank writes its failure record
TRACEBACK_LINES = 30
# Frameworks whose several GPUs are several processes that this module launches. JAX runs one
# process per host over all its devices (engines/jax), MaxText has no multi-GPU path here.
LAUNCHED = ("torch",)
MULTI_GPU_FRAMEWORKS = ("torch", "jax")


def check_parallel(plan) -> None:
    """Refuse, before any GPU work, a multi-GPU run (of a RunPlan) that this release cannot do
    (one line)."""
    run = plan.run
    if run.gpus == 1:
        return
    if run.framework not in MULTI_GPU_FRAMEWORKS:
        raise ParallaxError(f"--gpus {run.gpus}: the {run.framework} engine runs on one GPU here; "
                            f"several GPUs need --framework {' or '.join(MULTI_GPU_FRAMEWORKS)}")
    if run.framework == "torch":
        from parallax.engines.torch.parallel import check_run

        check_run(run, plan.recipe)


def precheck(plan) -> None:
    """What the ranks' engine check would refuse and the launcher can tell without a GPU (the
    native probe's capability): refused here, it is one line instead of one per rank."""
    from parallax.plan import capability

    run = plan.run
    platform = "cpu" if run.device == "cpu" else "gpu"
    gpu = None
    if platform == "gpu":
        from parallax.plan import machine

        devices = machine.devices()
        gpu = devices[0] if devices else None
        if gpu is None:  # "auto" on a machine without a GPU: the ranks run on the CPU
            platform = "cpu" if run.device == "auto" else platform
    capability.require(plan.recipe, platform, gpu and gpu.get("compute_capability"), (gpu or {}).get("name", ""))


def launched_here() -> bool:
    """Whether this rank's launcher is ``launch`` (it set where the ranks record failures)."""
    return bool(os.environ.get(RANK_ERRORS_ENV))


def needs_launch(run) -> bool:
    """Whether this process must start the run's ranks: a torch run of several GPUs that no
    launcher started."""
    return run.framework in LAUNCHED and run.gpus > 1 and rank_info() is None


# ----------------------------------------------------------------------------- the launcher

def launch(plan) -> dict:
    """Run the ranks of ``plan`` (a RunPlan) under torch.distributed.run and return its
    run.json: rank 0's, or the launcher's record of the rank that failed first. ParallaxError
    when a rank refused the run (bad input found on the device: nothing written)."""
    from parallax.native import lifeline
    from parallax.store.results import RUN_FILE, STEPS_FILE, atomic_write_json, load_run
    from parallax.store.results import writable_output_dir

    run = plan.run
    precheck(plan)
    run_dir = writable_output_dir(run.output_dir)
    ranks_dir = run_dir / RANKS_DIR
    _clear(ranks_dir)
    for stale in (RUN_FILE, STEPS_FILE):
        (run_dir / stale).unlink(missing_ok=True)
    config_path = ranks_dir / "config.json"
    atomic_write_json(config_path, run.to_dict())
    os.environ[RANK_ERRORS_ENV] = str(ranks_dir)
    os.environ.update(lifeline.name_runner({}))  # every rank dies with this process
    started, t0 = _now(), time.monotonic()
    failures = _run_torchrun(run.gpus, ranks_dir, ["-m", "parallax", "train", "--config", str(config_path)])
    for rank, failure in (failures or {}).items():
        failure["log_tail"] = rank_log_tail(ranks_dir, rank)
    if failures is None:
        try:
            result = load_run(run_dir)
            if result["status"] == "ok":
                return result
        except ParallaxError:
            pass
        failures = {0: {"exitcode": 0, "signal": None, "message": "exited 0 without writing an ok run.json"}}
    return write_launch_failure(plan, run_dir, ranks_dir, failures, started, time.monotonic() - t0)


def _run_torchrun(nproc: int, ranks_dir: Path, command: list[str]) -> dict | None:
    """torchrun's run in this process; None when every rank exited 0, else {rank: failure}.
    Local rank 0 keeps this console (its progress bar); the others' output goes to
    ``ranks/logs/.../<rank>/{stdout,stderr}.log``."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args
    from torch.distributed.run import run as torchrun

    quiet = ",".join(f"{r}:3" for r in range(1, nproc)) or "0"
    args = parse_args(["--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "0",
                       "--log-dir", str(ranks_dir / "logs"), "--redirects", quiet, *command])
    try:
        torchrun(args)
    except ChildFailedError as exc:
        return {rank: {"exitcode": f.exitcode, "signal": f.signal_name() if f.exitcode < 0 else None,
                       "message": f.message if isinstance(f.message, str) else json.dumps(f.message),
                       "timestamp": f.timestamp, "pid": f.pid}
                for rank, f in exc.failures.items()}
    return None


def rank_log_tail(ranks_dir: Path, rank: int, lines: int = 20) -> str:
    """The last lines of a rank's stderr log (ranks 1..N-1 log to files; rank 0 keeps the console)."""
    for path in sorted(Path(ranks_dir).glob(f"logs/*/attempt_*/{rank}/stderr.log")):
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
    return ""


def _clear(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    files.make_folder(folder, "--output-dir")


def _now() -> str:
    from parallax.store.timestamps import utc_now

    return utc_now()


def rank_errors(ranks_dir: Path) -> dict[int, dict]:
    """The failure records the ranks wrote (``record_failure``), by rank; inside a rank, only
    those of its own launch (a folder reused by an outer launcher keeps older records)."""
    found, run_id = {}, os.environ.get("TORCHELASTIC_RUN_ID")
    for path in sorted(Path(ranks_dir).glob("rank-*.json")):
        try:
            record = json.loads(path.read_text())
            if run_id and record.get("run_id") not in (None, run_id):
                continue
            found[int(record["rank"])] = record
        except (OSError, ValueError, KeyError):
            continue
    return found


# A rank's error that only says a peer is gone (it failed because another rank did first).
PEER_LOST = ("connection closed by peer", "connection reset by peer", "timed out", "broken pipe",
             "nccl communicator was aborted", "watchdog caught collective operation timeout",
             "remote process exited", "socket closed")
# Signals torchrun's agent sends when it tears a run down (a rank ended that way did not fail).
TEARDOWN_SIGNALS = ("SIGTERM", "SIGKILL", "SIGINT")


def root_cause(errors: dict[int, dict], failures: dict[int, dict]) -> tuple[int, dict]:
    """(rank, record) of the failure that came first, in this order: a rank's own error (not
    one that says a peer is gone), earliest first; a rank that died without a Python error and
    without torchrun's teardown (``os._exit``, a crash of the native code); a rank's error that
    a peer is gone (a hung rank leaves only those: the ranks waiting on it time out); else the
    first rank torchrun saw end."""
    def peer_lost(record: dict) -> bool:
        return any(p in str(record.get("message", "")).lower() for p in PEER_LOST)

    def silent(failure: dict) -> dict:
        how = f"killed by {failure['signal']}" if failure.get("signal") else f"exit code {failure.get('exitcode')}"
        hint = (" (NCCL's watchdog aborts a rank whose collective outlived --dist-timeout)"
                if failure.get("signal") == "SIGABRT" else "")
        return {"type": None, "message": f"{how} without a Python error{hint}", "oom": False,
                "traceback": failure.get("log_tail", "")}

    def first(ranks, times):
        return min(ranks, key=lambda r: (times(r) or 0, r))

    own = [r for r in errors if not peer_lost(errors[r])]
    if own:
        rank = first(own, lambda r: errors[r].get("time_unix"))
        return rank, errors[rank]
    died = [r for r, f in failures.items() if r not in errors and f.get("signal") not in TEARDOWN_SIGNALS]
    if died:
        rank = first(died, lambda r: failures[r].get("timestamp"))
        return rank, silent(failures[rank])
    if errors:
        rank = first(errors, lambda r: errors[r].get("time_unix"))
        return rank, errors[rank]
    rank = first(failures, lambda r: failures[r].get("timestamp"))
    return rank, silent(failures[rank])


def write_launch_failure(plan, run_dir: Path, ranks_dir: Path, failures: dict, started: str,
                         elapsed_s: float, launcher: dict | None = None) -> dict:
    """The launcher's run.json of ``plan`` (a RunPlan) when its ranks did not all succeed
    (status failed or oom), or a ParallaxError when the first failure was bad input (nothing
    written)."""
    from parallax.store.results import write_run
    from parallax.plan import machine
    from parallax.store.results import model_record

    run = plan.run
    errors = rank_errors(ranks_dir)
    rank, cause = root_cause(errors, failures)
    if cause.get("type") == "ParallaxError":
        raise ParallaxError(cause["message"])
    oom = bool(cause.get("oom"))
    where = f"rank {rank} of {run.gpus}" + (f" ({cause['host']})" if cause.get("host") else "")
    kind = f"{cause['type']}: " if cause.get("type") else ""
    error = f"{'out of memory: ' if oom else ''}{where}: {kind}{cause['message']}"
    error += _aftermath(rank, errors, failures)
    result = {
        "status": "oom" if oom else "failed",
        "error": error,
        "traceback": cause.get("traceback", ""),
        "config": run.to_dict(),
        "model": model_record(run),
        "recipe": plan.recipe.to_dict(),
        "environment": machine.environment(),
        "parallel": {**launch_record(run), **(launcher or {}), "failed_rank": rank,
                     "rank_failures": [{"rank": r, **_failure_summary(errors.get(r), failures.get(r))}
                                       for r in sorted(set(errors) | set(failures))]},
        "started_at": started,
        "finished_at": _now(),
        "elapsed_s": round(elapsed_s, 3),
    }
    write_run(run_dir, result, [])
    return result


def _aftermath(first: int, errors: dict, failures: dict) -> str:
    """What the other ranks did: failed after the first (their peer was gone), or reported
    nothing and were stopped by torchrun (a rank that hung looks like that)."""
    failed = sorted(set(errors) - {first})
    silent = sorted(r for r in failures if r != first and r not in errors)
    parts = []
    if failed:
        parts.append(f"then rank{_s(failed)} {_join(failed)} failed too")
    if silent:
        parts.append(f"rank{_s(silent)} {_join(silent)} reported no error and {'were' if len(silent) > 1 else 'was'} "
                     "stopped by the launcher (hung, or waiting on a collective)")
    return f" ({'; '.join(parts)})" if parts else ""


def _s(items) -> str:
    return "s" if len(items) > 1 else ""


def _join(items) -> str:
    return ", ".join(map(str, items))


def _failure_summary(error: dict | None, failure: dict | None) -> dict:
    out = {}
    if failure is not None:
        out.update({"exitcode": failure.get("exitcode"), "signal": failure.get("signal")})
    if error is not None:
        out.update({"error": f"{error.get('type')}: {error.get('message')}", "at": error.get("time"),
                    "step": error.get("step"), "host": error.get("host")})
    return out


def launch_record(run) -> dict:
    """The ``parallel`` record's launch facts (the per-rank part comes from the ranks)."""
    return {"gpus": run.gpus, "processes": run.gpus, "hosts": 1, "sharding": run.sharding,
            "per_gpu_batch": run.batch_size, "global_batch": run.global_batch,
            "launcher": "torch.distributed.run", "backend": "gloo" if run.device == "cpu" else "nccl"}


# ----------------------------------------------------------------------------- inside a rank

def record_failure(exc: BaseException, rank: RankInfo, step: int | None = None,
                   folder: str | Path | None = None) -> None:
    """Write this rank's failure record into ``folder`` (default: where the launcher looks,
    ``RANK_ERRORS_ENV``)."""
    folder = folder or os.environ.get(RANK_ERRORS_ENV)
    if not folder:
        return
    from parallax.store.results import is_out_of_memory

    lines = str(exc).strip().splitlines()
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip().splitlines()
    record = {"rank": rank.rank, "world": rank.world, "host": rank.host, "pid": os.getpid(),
              "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
              "type": type(exc).__name__, "message": lines[0] if lines else "", "oom": is_out_of_memory(exc),
              "step": step, "time": _now(), "time_unix": time.time(),
              "traceback": "\n".join(tail[-TRACEBACK_LINES:])}
    try:
        files.write_json(Path(folder) / f"rank-{rank.rank}.json", record)
    except ParallaxError as refused:
        _cannot_record(rank, refused)


def _cannot_record(rank: RankInfo, refused: ParallaxError) -> None:
    """The writer's one line for a record a failing rank could not write, on stderr: not raised,
    for the rank's own failure, on its way out, stays the run's error."""
    print(f"parallax: rank {rank.rank}: {refused}", file=sys.stderr)


def _first_failure(ranks_dir: Path, rank: RankInfo) -> bool:
    """Whether this rank is the first of its launch to fail: the one that makes the marker
    (O_EXCL, ``files.open_in_place``). A folder that cannot take it is the writer's line on
    stderr, and this rank writes no run.json."""
    marker = ranks_dir / f".first-failure-{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}"
    try:
        fd = files.open_in_place(marker, "--output-dir", exclusive=True)
    except ParallaxError as refused:
        _cannot_record(rank, refused)
        return False
    if fd is None:
        return False  # another rank failed first
    os.close(fd)
    return True


def outer_failure(plan, rank: RankInfo, exc: BaseException, step: int | None = None) -> None:
    """A rank started by an outer torchrun (several hosts, a hand-started launch): no launcher
    of ours waits for the ranks, so the rank that fails first writes the run's run.json (the
    folder shared by the hosts), as the launcher would from what the ranks recorded by then;
    later failures (the peers that lost it) only add their records."""
    run = plan.run
    ranks_dir = Path(run.output_dir) / RANKS_DIR
    try:
        files.make_folder(ranks_dir, "--output-dir")
    except ParallaxError as refused:
        return _cannot_record(rank, refused)
    record_failure(exc, rank, step, ranks_dir)
    if isinstance(exc, ParallaxError) or not _first_failure(ranks_dir, rank):
        return
    hosts = max(1, rank.world // max(1, rank.local_world))
    try:
        write_launch_failure(plan, Path(run.output_dir), ranks_dir, {rank.rank: {"exitcode": 1, "signal": None}},
                             _now(), 0.0, launcher={"hosts": hosts, "launcher": "torch.distributed.run (outer)"})
    except ParallaxError:
        pass  # another rank refused the run first: bad input, nothing to write
