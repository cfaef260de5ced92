"""``MaxTextEngine.train``: write the config (and the data files), run MaxText, read it back.

The subprocess is ``python -m maxtext.trainers.pre_train.train <run>/maxtext/<name>.yml`` with
``DECOUPLE_GCLOUD=TRUE`` (no Google Cloud packages) and only the chosen GPU visible. Its
output goes to ``<run>/maxtext/train.log``; each ``completed step`` line moves our progress
display. When it ends, its metrics file becomes our step records: step time, loss, learning
rate, gradient norm before clipping. Before it, ``initial_weights.py`` writes our initial weights
(``parallax.engines.weights``, the run's seed) as the checkpoint the config's ``load_parameters_path``
names, so MaxText starts where our engines start. MaxText's own TFLOP/s and tokens/s, its parameter count
(logged, and exact from ``count_params.py`` run after it) and memory lines are recorded beside
ours (``engine_extra.maxtext``). A MaxText run that
fails raises ``MaxTextFailed`` carrying the log's tail, which the result records. Every file
written here goes through ``store/files.py``: the logs are streamed or written beside their
names and renamed over them, and a full or read-only disk is one line naming the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from parallax.spec.config import RunConfig
from parallax.spec.recipe import Recipe
from parallax.engines.base import EngineOutput, Plan, Progress, StepRecord
from parallax.engines.maxtext import config, feed, metrics
from parallax.engines.maxtext.child import TENSORBOARD_ENV
from parallax.native.gpu import pip_cudnn_folder
from parallax.engines.maxtext.recipes import MAXTEXT_TE
from parallax.errors import ParallaxError
from parallax.store import files
from parallax.store.cache import CACHE_DIR_ENV

TIMING_METHOD = ("maxtext perf/step_time_seconds: host clock between consecutive iterations of MaxText's "
                 "training loop, each step's loss fetched while the next runs")
LOG_TAIL_LINES = 40
CHILD_MODULE = "parallax.engines.maxtext.child"
MEMORY_METHOD = ("peak_bytes_in_use and peak_pool_bytes of jax.local_devices()[0].memory_stats() in MaxText's "
                 "process once its training has ended (engines/maxtext/child.py), as our jax engine reads them")
COUNT_TIMEOUT_S = 600  # MaxText's imports and an abstract model: about 20 s of CPU time for llama-100m
WEIGHTS_TIMEOUT_S = 600  # MaxText's imports, an abstract model, our weights, one Orbax save: ~20 s for tiny
WEIGHTS_CACHE = "maxtext-weights"  # under the cache root
WEIGHTS_CACHE_KEEP = 8  # checkpoints kept, most recently used first (llama-100m: ~0.4 GB each)
WEIGHTS_DONE = "parallax-weights.txt"  # written last: a checkpoint without it is incomplete
WEIGHTS_METHOD = ("initial_weights.py: parallax.engines.weights.init_weights(model, seed) converted to MaxText's tree "
                  "(parallax.engines.maxtext.weights: query kernel / sqrt(head_dim), RoPE half-split as ours), "
                  "checked path by path against MaxText's abstract model and saved by its save_params_to_path; "
                  "MaxText loads it with load_parameters_path")
PARAMETERS_METHOD = ("count_params.py (or initial_weights.py, which builds the same abstract model before "
                     "training): MaxText's model built abstractly from the run's config "
                     "(create_nnx_abstract_model), its nnx.Param leaves counted by its "
                     "calculate_num_params_from_pytree, as its TensorBoard num_model_parameters is")
OUTPUT = "--output-dir"  # the option that chose the folder of a run's MaxText files, for a refusal


class MaxTextFailed(RuntimeError):
    """MaxText did not produce the run it was asked for; ``log_tail`` holds its last lines."""

    def __init__(self, message: str, log_tail: str):
        super().__init__(message)
        self.log_tail = log_tail


@dataclass(frozen=True)
class Layout:
    """Where a run's MaxText files go, under the run's output directory."""

    run_dir: Path

    @property
    def root(self) -> Path:
        return self.run_dir / "maxtext"

    @property
    def output(self) -> Path:
        return self.root / "output"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def data(self) -> Path:
        return self.root / "data"


def maxtext_index_hash(prefix: str, num_samples: int, seq_len: int, seed: int) -> str:
    """The name MaxText gives the index files of this dataset, by MaxText's own functions
    (the argument flow of ``_mmap_datasource._ensure_npy_indices`` in 0.2.5)."""
    from maxtext.input_pipeline import _mmap_index_utils as u

    prefixes = sorted(u.resolve_shard_prefixes(prefix))
    tokens = u.get_total_tokens(prefixes)
    epochs = u.compute_num_epochs(tokens, num_samples, seq_len, 1)
    separate = u.should_separate_last_epoch(epochs, tokens, num_samples, seq_len, 1)
    return u.compute_index_hash(input_paths=prefixes, num_epochs=epochs, separate_final_epoch=separate, seed=seed,
                                seq_length=seq_len, split=None, split_index=0, add_extra_token=1)


def verify_cache_hit(spec: str, num_samples: int, seq_len: int, seed: int) -> None:
    """Ask MaxText whether it will read our index files; if it would build its own (another
    order), stop: that run would not train on our batches."""
    from maxtext.input_pipeline import _mmap_datasource as ds

    npy_dir, bin_paths = ds._parse_mmap_npy_spec(spec)
    _, built = ds._ensure_npy_indices(npy_dir, bin_paths, num_samples, seq_len, seed=seed)
    if built is not None:
        raise RuntimeError(f"MaxText does not pick up Parallax's index files in {npy_dir} (its index hash "
                           "differs from the one computed); it would train in its own order")


def data_keys(run: RunConfig, batches, where: Layout, grain: bool) -> tuple[dict, dict, dict]:
    """(MaxText data keys, what the result records about them, the child's environment for them):
    real tokens from Parallax's loader (feed.py), or through MaxText's Grain where ``grain``."""
    from parallax.engines.maxtext import data

    if run.synthetic:
        return config.synthetic_keys(), {
            "maxtext_input": "dataset_type=synthetic: MaxText's own generated batch, the same one every step, "
                             "not Parallax's synthetic(seed) batches"}, {}
    if not grain:
        spec = feed.spec(batches, run)
        return config.synthetic_keys(), {"maxtext_input": f"{feed.DESCRIPTION}: {spec['directory']}"}, \
            {feed.FEED_ENV: json.dumps(spec)}
    keys = data.write(batches.data.path("train"), where.data, run, maxtext_index_hash)
    verify_cache_hit(keys["grain_train_files"], run.steps * run.batch_size, run.seq_len, run.seed)
    return keys, {"maxtext_input": f"grain mmap_npy in Parallax's batch order: {where.data}"}, {}


def child_env(device_index: int) -> dict:
    env = dict(os.environ)
    env["DECOUPLE_GCLOUD"] = "TRUE"
    env["PYTHONUNBUFFERED"] = "1"
    visible = [v for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    env["CUDA_VISIBLE_DEVICES"] = visible[device_index] if device_index < len(visible) else str(device_index)
    env.update(one_cudnn(env))
    return env


def one_cudnn(env: dict) -> dict:
    """The variables that make every libcudnn*.so.9 in MaxText's process pip's copy, the one JAX's
    CUDA plugin loads. TE's JAX extension (the te_* modes) loads libcudnn from CUDNN_HOME,
    CUDNN_PATH, CUDA_HOME, then the system's search path, before pip's: with a system cuDNN beside
    pip's, MaxText's te_fp8_delayedscaling dies with ``libcudnn_heuristic.so.9:
    undefined symbol ... version libcudnn_graph.so.9`` (the system's sub-library against pip's,
    already loaded). CUDNN_PATH points TE at pip's copy, LD_LIBRARY_PATH makes the sub-libraries
    it opens by name pip's too. A user's own CUDNN_HOME or CUDNN_PATH is left alone."""
    folder = None if env.get("CUDNN_HOME") or env.get("CUDNN_PATH") else pip_cudnn_folder()
    if folder is None:
        return {}
    path = [folder, *[p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != folder]]
    return {"CUDNN_PATH": os.path.dirname(folder), "LD_LIBRARY_PATH": os.pathsep.join(path)}


def output_keys(run: RunConfig) -> dict:
    """Where MaxText writes; its own TensorBoard scalars only where the run is watched in
    TensorBoard (``tensorboard_folder``): otherwise MaxText, finding tensorboardX installed,
    would write them into its installation (``child.point_tensorboard`` says why)."""
    where = Layout(Path(run.output_dir))
    return {"run_name": "parallax", "base_output_directory": str(where.output.resolve()),
            "metrics_file": str(where.metrics.resolve()), "enable_tensorboard": tensorboard_folder(run) is not None}


# ``--log`` as the command line hands it to the driver (parallax.run.live_log.ENV_VAR); the
# engines sit below run/ and read the variable itself.
LOG_ENV = "PARALLAX_LOG"


def tensorboard_folder(run: RunConfig) -> Path | None:
    """``<run dir>/tensorboard/maxtext`` where ``--log tensorboard`` asks for TensorBoard: MaxText's
    own scalars beside ours (``tensorboard --logdir`` shows them as the run's ``maxtext``)."""
    sinks = [s.strip() for s in os.environ.get(LOG_ENV, "").split(",")]
    return (Path(run.output_dir) / "tensorboard" / "maxtext").resolve() if "tensorboard" in sinks else None


def train(run: RunConfig, plan: Plan, batches, progress: Progress) -> EngineOutput:
    where = Layout(Path(run.output_dir))
    files.make_folder(where.root, OUTPUT)
    where.metrics.unlink(missing_ok=True)
    progress.phase("writing the MaxText config")
    knobs = plan.handles["knobs"]  # --tuning: config keys, the child's XLA flags, Grain or our loader
    data, data_facts, feed_env = data_keys(run, batches, where, knobs.maxtext_grain)
    tuning = plan.details["tuning"]
    recipe = plan.recipe
    checkpoint = weights_cache_dir(run, recipe, tuning)
    sections = config.sections(run, recipe, tuning, data=data, output=output_keys(run),
                               weights=config.weights_keys(checkpoint), knobs=knobs.maxtext_keys)
    yml = write_config(where.root, run, recipe, sections, tuning)
    env = child_env(int(plan.device.split(":")[1]))
    if knobs.xla_flags:
        env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", ""), *knobs.xla_flags]).strip()
    if tensorboard_folder(run) is not None:
        env[TENSORBOARD_ENV] = str(tensorboard_folder(run))
    progress.phase(f"writing parallax.engines.weights (seed {run.seed}) as MaxText's checkpoint")
    initial = cached_initial_weights(run, recipe, yml, where, checkpoint, env)
    command = [sys.executable, "-m", CHILD_MODULE, str(yml)]  # MaxText's trainer, then its peak memory
    facts = stream(command, {**env, **feed_env}, where.log, progress)
    if feed_env and (why := feed.fed(facts.fed, run.steps)):
        raise MaxTextFailed(f"{why}; the run is not kept", log_tail(where.log))
    progress.phase("counting MaxText's parameters")
    counted = cached_count(run, recipe, lambda: count_parameters(yml, env, where.root / "count_params.log"))
    return output(run, plan, where, facts, command, data_facts, counted, initial)


def write_config(folder: Path, run: RunConfig, recipe: Recipe, sections: list, tuning: str) -> Path:
    """``<folder>/<config.file_name>``: the MaxText config of ``sections``, with its header."""
    path = folder / config.file_name(run, recipe)
    files.write_text(path, config.render(sections, config.header(run, recipe, path.name, tuning)), OUTPUT)
    return path


def weights_cache_dir(run: RunConfig, recipe: Recipe, tuning: str) -> Path:
    """Where the checkpoint of this run's initial weights is kept: one per model, quantization
    mode (the fp8 modes' scales are part of it), layer layout (scan or not), seed and versions,
    under the cache root, so that a benchmark's repeats convert once and results stay small
    (llama-100m's fp32 weights are ~0.4 GB)."""
    from parallax import __version__

    return keyed_cache_path(WEIGHTS_CACHE, {"model": config.model_keys(run), "mode": config.mode_keys(recipe),
                                            "scan_layers": config.TUNINGS[tuning]["scan_layers"], "seed": run.seed,
                                            "maxtext": config.installed_version(), "parallax": __version__})


def keyed_cache_path(folder: str, key: dict) -> Path:
    """``<cache root>/<folder>/<hash of key>``: where what depends only on ``key`` is kept."""
    import hashlib
    import json

    from parallax.store.cache import cache_root

    text = json.dumps(key, sort_keys=True, default=str)
    return cache_root() / folder / hashlib.sha256(text.encode()).hexdigest()[:24]


def cached_initial_weights(run: RunConfig, recipe: Recipe, yml: Path, where: Layout, checkpoint: Path,
                           env: dict) -> dict:
    """The record of ``checkpoint``: written now (initial_weights.py into a temporary folder,
    renamed when complete), or kept from an earlier run with the same key. Afterwards the oldest
    checkpoints beyond WEIGHTS_CACHE_KEEP are removed."""
    if (checkpoint / WEIGHTS_DONE).exists():
        os.utime(checkpoint)  # most recently used
        record = {**written_record(run, checkpoint, where), "cached_from": str(checkpoint)}
        files.write_text(where.root / "initial_weights.log", f"kept from an earlier run: {checkpoint}\n", OUTPUT)
        return record
    partial = checkpoint.with_name(f"{checkpoint.name}.tmp-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        parameters = write_initial_weights(run, recipe, yml, where, partial, env)
        if parameters is not None:  # the same abstract model count_params.py would build after training
            keep_count(run, recipe, parameters, "initial_weights.py")
        files.write_text(partial / WEIGHTS_DONE,
                         f"parallax.engines.weights.init_weights({run.model}, seed {run.seed})\n", CACHE_DIR_ENV)
        shutil.rmtree(checkpoint, ignore_errors=True)
        try:
            os.replace(partial, checkpoint)
        except OSError as exc:
            raise files.refusal(checkpoint, exc, CACHE_DIR_ENV) from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    evict_weights(checkpoint.parent, WEIGHTS_CACHE_KEEP)
    return written_record(run, checkpoint, where)


def evict_weights(root: Path, keep: int) -> None:
    """Remove all but the ``keep`` most recently used complete checkpoints under ``root``."""
    done = sorted((d for d in root.iterdir() if (d / WEIGHTS_DONE).exists()), key=lambda d: d.stat().st_mtime,
                  reverse=True)
    for old in done[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def written_record(run: RunConfig, checkpoint: Path, where: Layout) -> dict:
    return {"source": "parallax.engines.weights.init_weights", "seed": run.seed, "load_parameters_path": str(checkpoint),
            "method": WEIGHTS_METHOD, "log_file": str(where.root / "initial_weights.log"), "cached_from": None}


def weights_env(recipe: Recipe, env: dict) -> dict:
    """The environment of initial_weights.py: the CPU, except for the modes of TE's JAX extension.
    Their scales and amax histories come from a concrete init, which runs TE's quantize on the
    device, and TE's primitives have no CPU lowering (``MLIR translation rule for primitive
    'te_dbias_quantize_ffi' not found for platform cpu``). Those run on the
    run's GPU, before MaxText starts there, without JAX's preallocation."""
    if recipe.backend.name == MAXTEXT_TE.name:
        return {**env, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    return {**env, "JAX_PLATFORMS": "cpu"}


def write_initial_weights(run: RunConfig, recipe: Recipe, yml: Path, where: Layout, out_dir: Path,
                          env: dict) -> int | None:
    """Run initial_weights.py (MaxText's abstract model, our weights converted and checked against
    it, saved by MaxText's own checkpoint writer; on the CPU, see ``weights_env``) into
    ``out_dir``; return the parameter count it printed (None if it printed none). A failure stops
    the run: MaxText would train from other weights."""
    from parallax.engines.maxtext import initial_weights

    log_path = where.root / "initial_weights.log"
    command = [sys.executable, "-m", "parallax.engines.maxtext.initial_weights", str(yml),
               str(out_dir.resolve()), run.model, str(run.seed)]
    try:
        done = subprocess.run(command, env=weights_env(recipe, env), capture_output=True, text=True,
                              timeout=WEIGHTS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MaxTextFailed(f"initial_weights.py did not finish in {WEIGHTS_TIMEOUT_S} s", "") from None
    files.write_text(log_path, done.stdout + done.stderr, OUTPUT)
    if done.returncode != 0 or f"{initial_weights.PREFIX} " not in done.stdout:
        tail = log_tail(log_path)
        raise MaxTextFailed(f"writing Parallax's initial weights for MaxText failed (status {done.returncode}): "
                            f"{failure_line(tail)[:300]}", tail)
    return printed_count(done.stdout)


@dataclass(frozen=True)
class Counted:
    """MaxText's exact parameter count (count_params.py), or why there is none."""

    parameters: int | None
    reason: str | None = None
    cached_from: str | None = None  # the count of an earlier run of the same model (cached_count)


def count_cache_file(run: RunConfig, recipe: Recipe) -> Path:
    """Where the count of this model, quantization mode and MaxText version is kept: a benchmark's
    repeats and the recipes that share a model count once (~20 s of CPU each, after training)."""
    path = keyed_cache_path("maxtext-parameters", {"model": config.model_keys(run), "mode": config.mode_keys(recipe),
                                                   "maxtext": config.installed_version()})
    return path.with_name(path.name + ".json")


def cached_count(run: RunConfig, recipe: Recipe, count) -> Counted:
    """``count()``'s result, or the one an earlier run of the same model kept; only exact counts
    are kept (a failure is retried next time)."""
    import json

    path = count_cache_file(run, recipe)
    try:
        kept = json.loads(path.read_text())
        return Counted(int(kept["parameters"]), cached_from=f"{path}, counted by {kept.get('counted_by', 'count_params.py')}")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    counted = count()
    if counted.parameters is not None:
        keep_count(run, recipe, counted.parameters, "count_params.py")
    return counted


def keep_count(run: RunConfig, recipe: Recipe, parameters: int, counted_by: str) -> None:
    """Keep an exact count for this run and the later runs of the same model (cached_count reads
    it); a cache that cannot take it costs a recount, nothing else: its refusal is not raised."""
    try:
        files.write_json(count_cache_file(run, recipe), {"parameters": parameters, "counted_by": counted_by},
                         CACHE_DIR_ENV)
    except ParallaxError:
        pass


def printed_count(stdout: str) -> int | None:
    """The ``count_params.PREFIX N`` line of a child's output, if there is one."""
    import re

    from parallax.engines.maxtext import count_params

    found = re.search(rf"^{re.escape(count_params.PREFIX)} (\d+)$", stdout, re.MULTILINE)
    return int(found[1]) if found else None


def count_parameters(yml: Path, env: dict, log_path: Path) -> Counted:
    """Run count_params.py on the config just trained, on the CPU (an abstract model: nothing is
    allocated, the GPU is not touched); its output goes to ``log_path``."""
    command = [sys.executable, "-m", "parallax.engines.maxtext.count_params", str(yml)]
    try:
        done = subprocess.run(command, env={**env, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                              timeout=COUNT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Counted(None, f"count_params.py did not finish in {COUNT_TIMEOUT_S} s")
    files.write_text(log_path, done.stdout + done.stderr, OUTPUT)
    parameters = printed_count(done.stdout)
    if done.returncode != 0 or parameters is None:
        last = failure_line(done.stdout + done.stderr)
        return Counted(None, f"count_params.py exited with status {done.returncode}: {last[:300]}")
    return Counted(parameters)


def stream(command: list[str], env: dict, log_path: Path, progress: Progress) -> metrics.LogFacts:
    """Run MaxText, its output into ``log_path`` (streamed beside it, renamed over it when MaxText
    ends, however it ends: ``files.streaming``), each step line to ``progress``."""
    facts = metrics.LogFacts()
    progress.phase("starting MaxText (compiling)")
    with files.streaming(log_path, OUTPUT) as log, subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            preexec_fn=die_with_parent) as proc:
        try:
            for line in proc.stdout:
                log.write(line)
                seen = facts.read(line, time.perf_counter())
                if seen is not None:
                    step, loss, seconds = seen
                    progress.step(step, loss, seconds * 1e3)
        except BaseException:
            proc.kill()
            raise
        code = proc.wait()
    if code != 0:
        tail = log_tail(log_path)
        raise MaxTextFailed(f"MaxText exited with status {code}: {failure_line(tail)[:300]}", tail)
    return facts


# "OSError: ...", "jax.errors.JaxRuntimeError: ...", "pydantic_core._pydantic_core.ValidationError: ..."
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*")
# what Python and JAX print after the exception
NOT_THE_CAUSE = re.compile(r"^(-+|For simplicity, JAX has removed its internal frames.*)$")


def failure_line(tail: str) -> str:
    """The line of ``tail`` that says why MaxText failed: its last exception line, else its
    last line that is not JAX's traceback-filtering note."""
    lines = [l.strip() for l in tail.splitlines() if l.strip()]
    found = next((l for l in reversed(lines) if EXCEPTION_LINE.match(l)), None)
    return found or next((l for l in reversed(lines) if not NOT_THE_CAUSE.match(l)), "no output")


def die_with_parent() -> None:
    """In the MaxText child, before exec: SIGKILL when this process dies (a killed benchmark
    cell must not leave MaxText holding the GPU). A preexec_fn is safe here: this process has
    not imported JAX (lifeline.py says why that matters)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    from parallax.native.lifeline import PR_SET_PDEATHSIG

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def output(run: RunConfig, plan: Plan, where: Layout, facts: metrics.LogFacts, command: list[str],
           data_facts: dict, counted: Counted, initial: dict) -> EngineOutput:
    from parallax.spec import flops

    steps = metrics.read_metrics(where.metrics)
    if len(steps) != run.steps or [s.step for s in steps] != list(range(run.steps)):
        raise MaxTextFailed(f"MaxText's metrics file {where.metrics} holds {len(steps)} training steps, "
                            f"not the {run.steps} asked for", log_tail(where.log))
    parameters = parameters_record(run, facts, counted, where)
    measured = [s for s in steps if s.step >= run.warmup]
    ours_per_step = flops.flops_per_token_maxtext(run.model_config, run.seq_len) * run.tokens_per_step / 1e12
    device = plan.handles["device"]
    return EngineOutput(
        steps=[StepRecord(step=s.step, loss=s.loss, step_ms=s.step_s * 1e3, lr=s.lr if s.lr is not None else float("nan"),
                          grad_norm=s.raw_grad_norm, data_wait_ms=wait)
               for s, wait in zip(steps, step_waits(facts, len(steps)))],
        precision=plan.precision,
        framework={
            "name": "maxtext", "version": plan.handles["version"], "device": plan.device, "platform": "gpu",
            "device_name": device.get("name"), "compute_capability": device.get("compute_capability"),
            "device_uuid": device.get("uuid"),
            # attention_backend: the key every engine writes (progress, report); attention: as before
            "attention_backend": plan.attention, "attention": plan.attention,
            "attention_reason": f"MaxText's attention key, tuning '{plan.details['tuning']}'", "compiled": True,
            "tuning": plan.details["tuning"], "settings": plan.details["settings"],
            # the knob set's (--tuning): config keys over the settings, and the child's XLA flags
            "knob_keys": dict(plan.handles["knobs"].maxtext_keys),
            "xla_flags": " ".join(plan.handles["knobs"].xla_flags),
            "config_file": str(where.root / config.file_name(run, plan.recipe)), "command": command,
            "base_yml": plan.handles["base_yml"], "initial_weights": initial,
        },
        timing_method=TIMING_METHOD,
        compile_s=time_to_first_step(facts, steps[0]),
        peak_allocated_bytes=(facts.peak or {}).get("peak_bytes_in_use"),
        peak_reserved_bytes=(facts.peak or {}).get("peak_pool_bytes"),
        extra={
            "data": data_facts,
            "maxtext": {
                **parameters,
                "tflops_per_step": steps[-1].tflops_per_step,
                "parallax_maxtext_accounting_tflops_per_step": ours_per_step,
                "tflops_per_s_median": metrics.finite_median([s.tflops_per_s for s in measured]),
                "tokens_per_s_median": metrics.finite_median([s.tokens_per_s for s in measured]),
                "wallclock_tokens_per_s": metrics.wallclock_tokens_per_s(facts.step_arrivals, run.warmup,
                                                                         run.tokens_per_step),
                "wallclock_tokens_per_s_median": metrics.wallclock_tokens_per_s_median(
                    facts.step_arrivals, run.warmup, run.tokens_per_step),
                "bytes_in_use_after_init_gb": facts.bytes_in_use_gb,
                "memory_method": MEMORY_METHOD,
                "bytes_limit_gb": facts.bytes_limit_gb,
                "estimated_memory_gb": facts.estimated_memory_gb,
                "compile": compile_record(facts, steps[0]),
                "log_file": str(where.log),
                "metrics_file": str(where.metrics),
            },
        },
    )


def step_waits(facts: metrics.LogFacts, steps: int) -> list[float | None]:
    """Each step's data wait as the child printed it (``child.DATA_WAIT_TAG``); None for every
    step where the count is not one a step (a MaxText whose DataLoader the child did not find)."""
    if len(facts.data_waits) != steps:
        return [None] * steps
    return list(facts.data_waits)


def time_to_first_step(facts: metrics.LogFacts, first: metrics.MaxTextStep) -> float | None:
    """``timing.compile_s`` as our jax engine defines it (ahead-of-time compile plus the first
    step): MaxText's AOT window plus its step 0, whose first call of the step sets up cuDNN
    (docs/maxtext.md#timing-and-what-is-recorded)."""
    if facts.compile_s is None:
        return None
    return round(facts.compile_s + first.step_s, 6)


def compile_record(facts: metrics.LogFacts, first: metrics.MaxTextStep | None = None) -> dict:
    """How ``timing.compile_s`` was measured, or why it is null."""
    if facts.compile_s is None:
        return {"seconds": None, "reason": "MaxText logged no '[train] Total estimated memory size' line after a "
                                           "timestamped one (no ahead-of-time compile of its train step)"}
    record = {"seconds": facts.compile_s, "method": metrics.COMPILE_METHOD, "compile_from": facts.compile_from}
    if first is not None:
        record |= {"first_step_seconds": first.step_s, "time_to_first_step_s": time_to_first_step(facts, first),
                   "timing_compile_s": "time_to_first_step_s: this AOT window plus step 0, as the jax engine's "
                                       "compile_s is its AOT compile plus its first step"}
    return record


def parameters_record(run: RunConfig, facts: metrics.LogFacts, counted: Counted, where: Layout) -> dict:
    """MaxText's parameter count beside ours; a count that differs fails the run (the exported
    keys would not give our model). Exact where count_params.py ran, else the logged figure at
    its three decimals of a billion."""
    ours = run.model_config.param_count()
    logged_agree = metrics.parameters_agree(ours, facts.parameters_billion)
    if counted.parameters is not None and counted.parameters != ours:
        raise MaxTextFailed(f"MaxText built a model of {counted.parameters:,} parameters; {run.model} has "
                            f"{ours:,}: the exported keys do not give our model", log_tail(where.log))
    if logged_agree is False:
        raise MaxTextFailed(f"MaxText built a model of {facts.parameters_billion:.3f} billion parameters; "
                            f"{run.model} has {ours:,}: the exported keys do not give our model",
                            log_tail(where.log))
    exact = None if counted.parameters is None else counted.parameters == ours
    return {"parameters": counted.parameters, "parameters_exact_agree": exact,
            "parameters_method": (PARAMETERS_METHOD + (f"; kept for this model ({counted.cached_from})"
                                                       if counted.cached_from else "")
                                  if counted.parameters is not None else None),
            "parameters_reason": counted.reason,
            "parameters_logged_billion": facts.parameters_billion, "parameters_agree": logged_agree}
