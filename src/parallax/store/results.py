"""The one result schema (``run.json`` + ``steps.jsonl``), atomic writes, and loading.

``run.json`` is a versioned JSON object (``schema`` = SCHEMA) with these top-level keys:

  status        ok | failed | oom | timeout | skipped | interrupted
  error         one-line reason when status is not ok (and the log tail for failed runs)
  signal, steps_done  an interrupted run (Ctrl-C or SIGTERM): the signal's name and the steps it
                did; its timing, throughput and loss cover those steps (step_ms and throughput
                None when none was past the warm-up), steps.jsonl holds them (grad_norm None)
  log_tail      a failed run of an engine that runs another program (MaxText): its last lines
  config        the RunConfig that ran
  model         preset name, parameter count, shape
  precision     PrecisionInfo: precision, backend, recipe, native (False = emulated), details
  framework     engine name, versions, device, attention backend, compiled
  environment   the native GPU probe and library versions (``parallax.plan.envinfo``)
  tuning        the knob set (spec/tuning.py): name (as asked, e.g. "tuned"), knob_set (what ran),
                knobs (xla_flags, compile_mode, inductor, maxtext_keys: those set); absent in runs
                written before tuning existed: read them as "default"
  timing        method, warmup, compile_s, step_ms summary over measured steps; data_wait (median,
                mean, total ms and fraction of step time; None: not recorded); concurrent_runs
                (set by the runner, above 1) when the run shared its GPU with other runs: its
                step times are then not a throughput measurement; setup_s: seconds before the
                first step by phase (imports, check, data, environment)
  throughput    tokens_per_s (from the median step; GLOBAL: every GPU's tokens), tokens_per_s_mean,
                tokens_per_s_per_gpu (tokens_per_s / gpus)
  flops         every FLOPs accounting with TFLOP/s and MFU against every denominator; MFU is per
                GPU (tokens_per_s_per_gpu against one GPU's peak)
  memory        peak_allocated_bytes, peak_reserved_bytes: the largest rank's
  parallel      how many GPUs and processes ran and how (absent in runs made before it: read them
                as one GPU, ``parallel_of``):
                  gpus, processes, hosts, sharding (ddp | fsdp), per_gpu_batch, global_batch
                  (= gpus × per_gpu_batch), launcher (single | torch.distributed.run | jax-local |
                  jax.distributed), backend (nccl | gloo | xla; None: one torch process, no group),
                  per_rank [{rank, host, device, step_ms_median, peak_allocated_bytes, ...}];
                  a failed launch adds failed_rank (the rank that failed first) and
                  rank_failures [{rank, exitcode, signal, error, step, ...}].
                ``timing.step_ms`` then summarises, step by step, the SLOWEST rank's time (each
                step's per-rank times are steps.jsonl's ``rank_step_ms``).
  loss          first, final, final_smoothed
  eval          [{step, loss, perplexity, batch_losses}] (loss: the mean of the batches' losses)
  started_at, finished_at (ISO 8601, UTC)

``steps.jsonl`` holds one object per step: step, loss, step_ms, lr, measured (False during
warmup); several ranks add rank_step_ms (each rank's time of the step; step_ms is the largest);
data_wait_ms: the host time the step spent getting its batch ready (docs/timing.md; absent
where the engine does not record it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from parallax.store import files
from parallax.store.archive import read_record
from parallax.errors import ParallaxError

SCHEMA = "parallax.run/1"
STATUSES = ("ok", "failed", "oom", "timeout", "skipped", "interrupted")
REQUIRED_KEYS = ("schema", "status", "config")
REQUIRED_OK_KEYS = ("precision", "framework", "timing", "throughput", "flops", "memory", "loss")
RUN_FILE = "run.json"
STEPS_FILE = "steps.jsonl"

# The layout of a benchmark output directory (``runner`` writes it, ``compare`` reads it):
#   matrix.json, environment.json, index.json, runs/<cell id>/{config.json, run.json, steps.jsonl, run.log}
MATRIX_FILE = "matrix.json"
INDEX_FILE = "index.json"
INDEX_SCHEMA = "parallax.index/2"
ENVIRONMENT_FILE = "environment.json"
RUNS_DIR = "runs"
CONFIG_FILE = "config.json"
LOG_FILE = "run.log"
# RunConfig fields that name a cell rather than the benchmark; they are not part of matrix.json.
CELL_FIELDS = ("framework", "precision", "recipe", "seed", "output_dir", "gpus", "tuning")


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through the one writer (``store/files.py``): readers see the old
    file or the new one, never half; a full or read-only disk is one line naming the path."""
    files.write_text(path, text)


def atomic_write_json(path: Path, value, **dumps_options) -> None:
    """``value`` as indented JSON with a final newline, written with ``atomic_write_text``."""
    files.write_json(path, value, **dumps_options)


def _json_safe(value):
    """NaN and infinities become None: JSON has no spelling for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_run(run_dir: Path, run: dict, steps: list[dict] | None = None) -> Path:
    """Validate and atomically write ``run.json`` (and ``steps.jsonl``) into ``run_dir``."""
    run = {"schema": SCHEMA, **run}
    validate_run(run, source=str(run_dir))
    run_dir = Path(run_dir)
    path = run_dir / RUN_FILE
    if steps is None:
        atomic_write_json(path, _json_safe(run))
        return path
    lines = "".join(json.dumps(_json_safe(s)) + "\n" for s in steps)
    atomic_write_text(run_dir / STEPS_FILE, lines)
    try:
        atomic_write_json(path, _json_safe(run))
    except ParallaxError:  # steps without their run.json would be half a record
        (run_dir / STEPS_FILE).unlink(missing_ok=True)
        raise
    return path


def validate_run(run: dict, source: str = "run.json") -> dict:
    """Raise ParallaxError naming ``source`` when ``run`` does not follow the schema."""
    if not isinstance(run, dict):
        raise ParallaxError(f"{source}: not a JSON object; delete it or re-run the cell")
    missing = [k for k in REQUIRED_KEYS if k not in run]
    if missing:
        raise ParallaxError(f"{source}: missing keys {missing}; delete it or re-run the cell")
    if run["schema"] != SCHEMA:
        raise ParallaxError(
            f"{source}: schema '{run['schema']}' is not '{SCHEMA}'; re-run with this Parallax version"
        )
    if run["status"] not in STATUSES:
        raise ParallaxError(f"{source}: unknown status '{run['status']}'")
    if run["status"] == "ok":
        missing = [k for k in REQUIRED_OK_KEYS if k not in run]
        if missing:
            raise ParallaxError(f"{source}: an ok run lacks {missing}; delete it or re-run the cell")
    return run


def load_run(path: Path) -> dict:
    """Read and validate a ``run.json`` (or the ``run.json`` inside a run directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / RUN_FILE
    try:
        run = json.loads(path.read_text())
    except FileNotFoundError:
        raise ParallaxError(f"{path}: no such result file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ParallaxError(
            f"{path}: corrupt or truncated JSON ({exc.msg if hasattr(exc, 'msg') else exc}); "
            "delete it or re-run the cell"
        ) from None
    return validate_run(run, source=str(path))


def load_steps(run_dir: Path) -> list[dict]:
    """Read ``steps.jsonl``, plain or packed (``parallax.store.archive``); a truncated last line (a
    killed writer) is an error naming the file."""
    path = Path(run_dir) / STEPS_FILE
    steps = []
    for number, line in enumerate(read_record(run_dir, STEPS_FILE).decode().splitlines(), start=1):
        try:
            steps.append(json.loads(line))
        except json.JSONDecodeError:
            raise ParallaxError(f"{path}:{number}: corrupt line; delete the run and re-run it") from None
    return steps


def parallel_of(run: dict) -> dict:
    """A run.json's ``parallel`` record; a run made before it existed ran on one GPU."""
    found = run.get("parallel")
    if found:
        return found
    config = run.get("config") or {}
    batch = config.get("batch_size")
    return {"gpus": 1, "processes": 1, "hosts": 1, "sharding": config.get("sharding", "ddp"),
            "per_gpu_batch": batch, "global_batch": batch, "launcher": "single", "backend": None, "per_rank": []}


def differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """'key old → new' for every (nested) key whose value differs between ``a`` and ``b``."""
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += differences(va, vb, f"{prefix}{key}.")
        elif va != vb:
            out.append(f"{prefix}{key} {va!r} → {vb!r}")
    return out


def writable_output_dir(path: str | Path, option: str = "--output-dir") -> Path:
    """Prove that ``path`` can hold new files, creating nothing (``files.prove_writable``: a
    probe file is written and removed): a command creates its folder when it first writes, so a
    refusal leaves no empty folder behind. ParallaxError naming ``path`` and the ``option``."""
    return files.prove_writable(path, option)


def writable_report(path: str | Path, option: str) -> Path:
    """A file that a command writes at its end (a report, a JSON export): its folder is created
    and proved writable now, so that bad input fails before the work."""
    path = Path(path)
    if path.is_dir():
        raise ParallaxError(f"{option} '{path}' is a directory; pass a file name, e.g. {path / 'report.md'}")
    try:
        files.prove_writable(path.parent, option)
    except ParallaxError:
        raise ParallaxError(f"{option} '{path}' cannot be written (its folder '{path.parent}' is not writable); "
                            f"pass {option} with a writable path") from None
    return path


def model_record(run: RunConfig) -> dict:
    m = run.model_config
    return {
        "name": m.name, "parameters": m.param_count(), "n_layers": m.n_layers, "d_model": m.d_model,
        "n_heads": m.n_heads, "head_dim": m.head_dim, "d_ff": m.d_ff, "vocab_size": m.vocab_size,
        "max_seq_len": m.max_seq_len, "rope_theta": m.rope_theta, "norm_eps": m.norm_eps,
    }


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's OutOfMemoryError, or an allocator's out-of-memory message (XLA: RESOURCE_EXHAUSTED)."""
    text = str(exc)
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text.lower() \
        or "RESOURCE_EXHAUSTED" in text
