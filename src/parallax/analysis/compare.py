"""The comparison record: every number of a benchmark report, computed once from the run files.

``build_comparison(results_dir, baseline_dir)`` reads every ``run.json`` / ``steps.jsonl``
under ``results_dir`` and returns one JSON-ready dict that every renderer (terminal, Markdown,
plots, CSV/JSON) draws from, so the numbers in all of them agree by construction.

A file that cannot be read (corrupt, truncated, wrong schema, an ok run without its steps) is
named in ``problems`` and ``corrupt`` and left out — never averaged in; a run folder of the
matrix whose file is corrupt shows its cell as ``corrupt`` (not ``pending``). ``parallax
compare`` warns for each and exits 2 after writing what it can. ``index.json`` is derived from
the run folders and never read for numbers: a corrupt one is a warning only. Runs whose configurations differ
(other than framework, recipe, seed and GPU count) are refused: they are not one benchmark.

Per cell (framework × recipe × GPUs; the recipe's format is the cell's precision) over its ok
runs (seeds and repeats). The GPU count is run.json's ``parallel.gpus`` (``config.gpus`` where
there is no ``parallel`` record; neither, as in runs from before several GPUs: 1):
  step_ms          median, p10, p90 of the measured (post-warmup) steps of all runs pooled; on
                   several GPUs each step is the slowest rank's (steps.jsonl records that)
  tokens_per_s     global batch·seq / median step time, with a hierarchical block-bootstrap CI;
                   tokens_per_s_per_gpu is it ÷ GPUs
  flops            TFLOP/s and MFU per GPU (tokens/s per GPU against one GPU's peak) under each
                   FLOPs accounting and denominator (run.json's); tflops_all_gpus beside it
  memory           the highest peak allocated / reserved bytes of the runs (per GPU: the
                   largest rank's)
  compile_s        the median compile time of the runs
  final_loss       mean of the last SMOOTH_WINDOW losses (averaged over runs), with a CI
  eval_loss, perplexity   the last evaluation of each run, averaged; perplexity = exp(loss)
Across cells: speedups (each recipe over its framework's bf16 recipe, and over the bf16 recipe
of its own backend where there is one, e.g. te-fp8-delayed over te-bf16; each framework's
default recipe over torch's within a format) and loss deltas (loss − loss_bf16) with CIs,
always between cells of the same GPU count: a 2-GPU cell trains on twice the global batch of a
1-GPU one (the per-GPU batch is the matrix's), so neither its speed nor its loss compares with
a 1-GPU cell's. Across GPU counts: ``scaling``, per framework × recipe, each GPU count's
tokens/s against N × the 1-GPU cell's of the same matrix (scaling efficiency, with a CI).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from parallax.analysis import comparability, stats
from parallax.analysis import tuning as tuning_report
from parallax.analysis.tuning import split_tuned, tuned_name
from parallax.native import topology
from parallax.store.archive import CorruptArchive
from parallax.spec.config import FRAMEWORKS, PRECISIONS, RunConfig
from parallax.errors import ParallaxError
from parallax.plan import capability as cap
from parallax.spec.flops import ACCOUNTINGS, PRIMARY_ACCOUNTING, achieved_tflops, flops_per_token, mfu
from parallax.spec import registry, tuning
from parallax.store.results import (CELL_FIELDS, ENVIRONMENT_FILE, INDEX_FILE, INDEX_SCHEMA, MATRIX_FILE, RUN_FILE, RUNS_DIR,
                              differences, load_run, load_steps)

SCHEMA = "parallax.comparison/1"
THROUGHPUT, CONVERGENCE = "throughput", "convergence"  # a benchmark's mode (matrix.json "mode")
CORRUPT = "corrupt"  # the status of a matrix run whose result file cannot be read
SMOOTH_WINDOW = 10
BASELINE_FRAMEWORK = "torch"
BASELINE_PRECISION = "bf16"
DENOMINATORS = ("precision_peak", "bf16_peak", "measured_ceiling")
PER_CELL = CELL_FIELDS + ("compile", "cuda_graphs", "gpus")
CONFIG_KEYS = ("framework", "precision", "batch_size", "seq_len", "model")  # what grouping and rates need


def cell_key(config: dict, parallel: dict | None = None) -> tuple[str, str, int]:
    """(framework, recipe, GPUs) of a run's config and ``parallel`` record; runs written before
    recipes existed name only their format, which was then the framework's bf16 recipe (the
    only one that ran), and runs from before several GPUs ran on one. A run of a knob set other
    than default (``--tuning``) is a cell of its own: its recipe reads 'bf16+lhs' (``tuned_name``)."""
    recipe = config.get("recipe") or config["precision"]
    return config["framework"], tuned_name(recipe, config.get("tuning")), gpus_of(config, parallel)


def gpus_of(config: dict, parallel: dict | None = None) -> int:
    """The GPU count of a run: ``parallel.gpus``, else ``config.gpus``, else 1."""
    value = (parallel or {}).get("gpus") or config.get("gpus") or 1
    return int(value)


def cell_name(framework: str, recipe: str, gpus: int) -> str:
    """'torch bf16', and 'torch bf16 ×2 GPUs' for a cell of several GPUs."""
    return f"{framework} {recipe}" + (f" ×{gpus} GPUs" if gpus > 1 else "")


STATS_METHOD = (
    "Step times are the measured (post-warmup) steps of every ok run of a cell, pooled; on "
    "several GPUs a step's time is the slowest rank's. Tokens/s is the global batch (per-GPU "
    "batch × GPUs) × sequence length ÷ the median step time. Its 95% interval is a "
    "percentile bootstrap ({n_boot} replicates) that resamples the runs (seeds × repeats) with "
    "replacement and, inside each run, blocks of ceil(n^(1/3)) consecutive steps (a moving-block "
    "bootstrap), because successive GPU step times are autocorrelated and resampling single "
    "steps would understate the uncertainty. The final loss is the mean of the last "
    f"{SMOOTH_WINDOW} training losses, averaged over runs (its interval resamples runs, so it "
    "needs two or more). ΔLoss = loss − loss_bf16 is taken step by step between runs of the "
    "same seed (same initial weights, same batches, so batch noise and the downward trend "
    "cancel) over that final window, and bootstrapped over seeds and blocks of steps; it is an "
    "early-training difference of the runs here, not what a format costs at convergence. The "
    "validation ΔLoss (the convergence penalty in a convergence benchmark) is the recipe's "
    "validation loss minus bf16's, taken per seed (same weights, same batches, same held-out "
    "batches) and averaged over seeds, with a Student's t interval over seeds; one seed has no "
    "interval. With one run per cell, speed intervals cover step-to-step variation only, not "
    "run-to-run or seed-to-seed variation: use --repeats and --seeds for that. Every ratio is "
    "between cells alike in machine, software, data and what the framework chose (parallax."
    "comparability). Speedups whose interval includes 1 and deltas whose interval includes 0 "
    "are reported as not distinguishable."
)


@dataclass
class LoadedRun:
    run_dir: Path
    run: dict
    steps: list[dict] | None = None

    @property
    def status(self) -> str:
        return self.run["status"]

    @property
    def config(self) -> dict:
        return self.run["config"]

    @property
    def parallel(self) -> dict:
        """run.json's ``parallel`` record; {} for runs from before several GPUs."""
        value = self.run.get("parallel")
        return value if isinstance(value, dict) else {}

    @property
    def key(self) -> tuple[str, str, int]:
        return cell_key(self.config, self.parallel)


@dataclass
class CellData:
    """One framework × recipe × GPU count: its runs and the bootstrap replicates other cells need."""

    framework: str
    recipe: str
    precision: str  # the recipe's format
    runs: list[LoadedRun]
    expected_runs: int = 0
    root: Path = Path(".")  # the results directory; run folders are shown relative to it
    record: dict = field(default_factory=dict)
    tps_reps: np.ndarray | None = None
    loss_windows: dict[int, list[np.ndarray]] | None = None  # seed -> final windows of its runs
    gpus: int = 1
    facts: dict | None = None  # comparability.facts of its first ok run (its runs agree on them)
    machines: dict[str, list[LoadedRun]] = field(default_factory=dict)  # machine label -> ok runs
    fallback: str | None = None  # why its attention is not the engine's first choice
    input_bound: str | None = None  # comparability.input_bound of its first input-bound run

    @property
    def kept_out(self) -> str | None:
        """Why its speed is kept out of every ratio (attention fallback, input-bound), or None."""
        return f"attention fell back ({self.fallback})" if self.fallback else self.input_bound

    @property
    def machine(self) -> str | None:
        """Its machine's label; 'mixed: A, B' where its runs span machines (--cross-machine only)."""
        if not self.machines:
            return None
        return next(iter(self.machines)) if len(self.machines) == 1 else "mixed: " + ", ".join(self.machines)

    @property
    def name(self) -> str:
        return cell_name(self.framework, self.recipe, self.gpus)

    @property
    def ok(self) -> list[LoadedRun]:
        return [r for r in self.runs if r.status == "ok"]


# ----------------------------------------------------------------------------- loading

@dataclass
class Corrupt:
    """A result file that could not be used, and the run folder it belongs to."""

    run_dir: Path
    message: str  # names the file; also one of the comparison's ``problems``


def load_results(results_dir: Path) -> tuple[list[LoadedRun], list[Corrupt]]:
    """Every readable run under ``results_dir``, and every file that was left out."""
    runs, corrupt = [], []
    for path in sorted(Path(results_dir).rglob(RUN_FILE)):
        try:
            run = load_run(path)
        except ParallaxError as exc:
            corrupt.append(Corrupt(path.parent, f"{exc}; left out"))
            continue
        missing = [k for k in CONFIG_KEYS if k not in (run["config"] if isinstance(run["config"], dict) else {})]
        if missing:
            corrupt.append(Corrupt(path.parent, f"{path}: config lacks {missing}; left out"))
            continue
        loaded = LoadedRun(path.parent, run)
        if run["status"] == "ok":
            try:
                loaded.steps = load_steps(path.parent)
            except CorruptArchive:
                raise  # one error for the benchmark, not one per run
            except (ParallaxError, FileNotFoundError) as exc:
                reason = exc if isinstance(exc, ParallaxError) else f"{exc.filename}: missing"
                corrupt.append(Corrupt(path.parent, f"{reason}; the ok run is left out"))
                continue
            if not _measured(loaded):
                corrupt.append(Corrupt(path.parent, f"{path.parent / 'steps.jsonl'}: no measured steps; "
                                                    "the ok run is left out"))
                continue
        runs.append(loaded)
    return runs, corrupt


def _read_json(path: Path, corrupt: list[Corrupt]) -> dict | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        corrupt.append(Corrupt(path.parent, f"{path}: corrupt or truncated JSON; left out"))
        return None


def _index_problem(results_dir: Path) -> str | None:
    """index.json is derived from the run folders (the runner rewrites it); say when it is
    unreadable, since nothing else reads it."""
    path = results_dir / INDEX_FILE
    if not path.exists():
        return None
    try:
        index = json.loads(path.read_text())
        if isinstance(index, dict) and index.get("schema") == INDEX_SCHEMA:
            return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return (f"{path}: corrupt or not a Parallax index; ignored (the report is built from the run folders, "
            "and 'parallax benchmark --resume' rewrites it)")


# A run folder of the matrix: runs/<framework>-<recipe>[-g<GPUs>]-seed<N>-rep<M> (runner.Cell.id;
# -g<GPUs> only above one GPU); framework names have no '-', recipe names may.
CELL_DIR = re.compile(r"^(?P<framework>[^-]+)-(?P<recipe>.+?)(?:-g(?P<gpus>\d+))?-seed(?P<seed>\d+)"
                      r"-rep(?P<repeat>\d+)$")


def _corrupt_run(item: Corrupt, root: Path) -> LoadedRun | None:
    """A stand-in run of status ``corrupt`` for a matrix run folder whose file is corrupt, so
    that its cell shows it instead of counting it pending."""
    match = CELL_DIR.match(item.run_dir.name)
    if match is None or item.run_dir.parent != root / RUNS_DIR:
        return None
    config = {"framework": match["framework"], "recipe": match["recipe"],
              "precision": _format_of(match["framework"], match["recipe"]), "seed": int(match["seed"]),
              "gpus": int(match["gpus"] or 1)}
    return LoadedRun(item.run_dir, {"status": CORRUPT, "config": config, "error": item.message})


def shared_config(runs: list[LoadedRun], results_dir: Path) -> dict:
    """The configuration common to every run; ParallaxError when runs disagree.

    ``compile`` may differ between frameworks (JAX always compiles; --no-compile is torch's)
    but not within one: ``compiled`` maps each framework to its setting. Whether the blocks
    replayed CUDA graphs (``framework.cuda_graphs`` of the runs that got that far; absent in
    runs from before the option, which were eager) may differ between recipes but not within one.
    The GPU count is a cell's; the sharding (ddp, fsdp) must agree among the runs on several GPUs
    and is not asked of the 1-GPU ones (one GPU shards nothing)."""
    configs, compiled, graphs, shardings = {}, {}, {}, {}
    for r in runs:
        mine = {k: v for k, v in r.config.items() if k not in PER_CELL and k != "sharding"}
        if gpus_of(r.config, r.parallel) > 1:
            shardings.setdefault(r.config.get("sharding") or r.parallel.get("sharding") or "ddp", r.run_dir)
        key = json.dumps(mine, sort_keys=True)
        configs.setdefault(key, r.run_dir)
        compiled.setdefault(r.config["framework"], set()).add(r.config.get("compile"))
        if isinstance(r.run.get("framework"), dict):
            cell = f"{r.config['framework']} {r.config.get('recipe')}"
            graphs.setdefault(cell, set()).add(bool(r.run["framework"].get("cuda_graphs", False)))
    mixed = [fw for fw, values in compiled.items() if len(values) > 1]
    if mixed:
        raise ParallaxError(f"{results_dir} mixes compiled and eager runs of {mixed[0]}; "
                            "compare them from separate directories")
    mixed = [cell for cell, values in graphs.items() if len(values) > 1]
    if mixed:
        raise ParallaxError(f"{results_dir} mixes runs of {mixed[0]} with and without CUDA graphs "
                            "(--cuda-graphs); compare them from separate directories")
    if len(shardings) > 1:
        (a, dir_a), (b, dir_b) = list(shardings.items())[:2]
        raise ParallaxError(f"{results_dir} mixes --sharding {a} ({dir_a}) and {b} ({dir_b}) runs; "
                            "compare them from separate directories")
    if len(configs) > 1:
        (a, dir_a), (b, dir_b) = list(configs.items())[:2]
        diff = [k for k in json.loads(a) if json.loads(a)[k] != json.loads(b).get(k)]
        raise ParallaxError(
            f"{results_dir} mixes runs of different configurations ({dir_a} and {dir_b} differ in "
            f"{', '.join(diff)}); compare them from separate directories")
    if not configs:
        return {}
    shared = {**json.loads(next(iter(configs))), "compiled": {fw: v.pop() for fw, v in compiled.items()}}
    if shardings:
        shared["sharding"] = next(iter(shardings))
    return shared


# ----------------------------------------------------------------------------- one cell

def _measured(run: LoadedRun) -> list[float]:
    warmup = run.config.get("warmup", 0)
    return [float(s["step_ms"]) for i, s in enumerate(run.steps or [])
            if s.get("measured", i >= warmup) and s.get("step_ms") is not None]


def _losses(run: LoadedRun) -> np.ndarray:
    return np.array([np.nan if s.get("loss") is None else float(s["loss"]) for s in run.steps],
                    dtype=np.float64)


def _cell_seed(*parts: str) -> int:
    return zlib.crc32("/".join(parts).encode())


def _gpu_part(cell: CellData) -> tuple[str, ...]:
    """What sets a cell of several GPUs' bootstrap seed apart from its 1-GPU twin's (whose seed
    is as it was before GPU counts), so that the two are resampled independently."""
    return (f"g{cell.gpus}",) if cell.gpus > 1 else ()


def _ordered_ok(cell: CellData) -> list[LoadedRun]:
    """Ok runs ordered by seed then folder, so that two cells' runs pair up by seed."""
    return sorted(cell.ok, key=lambda r: (r.config.get("seed", 0), str(r.run_dir)))


def _regraded_notes(cell: CellData, ok: list[LoadedRun]) -> list[str]:
    """A note for each run whose numerics-guard verdict was changed after it ran (``guards.regraded``)."""
    out = []
    for r in ok:
        was = ((r.run.get("guards") or {}).get("regraded")) or {}
        if was:
            out.append(f"{_relative(r.run_dir, cell.root)}: its guard verdict was regraded from "
                       f"'{was.get('was_status')}' by {was.get('by')} on {str(was.get('at'))[:10]} "
                       f"(was: {str(was.get('was_error') or '')[:120]})")
    return out


def _check_runs(cell: CellData, ok: list[LoadedRun], cross_machine: bool) -> None:
    """Set the cell's facts, machines and attention fallback; refuse runs that differ in a fact
    (their pooled figure would mix two things), machines excepted with ``cross_machine``."""
    cell.facts = comparability.facts(ok[0].run)
    for r in ok:
        cell.machines.setdefault(comparability.machine_label(r.run), []).append(r)
        found = comparability.differences(cell.facts, comparability.facts(r.run))
        found = [d for d in found if not (cross_machine and d.scope == comparability.MACHINE)]
        if found:
            raise comparability.refusal(
                f"to pool the runs of {cell.name} ({_relative(ok[0].run_dir, cell.root)} and "
                f"{_relative(r.run_dir, cell.root)})", found, cross_machine)
    cell.fallback = next((why for why in map(comparability.attention_fallback, (r.run for r in ok)) if why), None)
    cell.input_bound = next((why for why in map(comparability.input_bound, (r.run for r in ok)) if why), None)


def analyse_cell(cell: CellData, n_boot: int, level: float, cross_machine: bool = False) -> None:
    """Fill ``cell.record`` (and the replicates) from its runs."""
    ok = _ordered_ok(cell)
    cell.record = _cell_header(cell)
    if not ok:
        return
    _check_runs(cell, ok, cross_machine)
    first = ok[0].run
    shared = max(int((r.run.get("timing") or {}).get("concurrent_runs") or 1) for r in ok)
    cell.record.update({
        "memory": _cell_memory(ok),
        "compile_s": _median_or_none([r.run.get("timing", {}).get("compile_s") for r in ok]),
        "notes": sorted({w for r in ok for w in (r.run.get("flops") or {}).get("warnings") or []}),
        "precision_info": first.get("precision"),
        "framework_info": first.get("framework"),
        "timing_method": (first.get("timing") or {}).get("method"),
        "loss_curve": _loss_curve(ok),
        "eval_curve": _eval_curve(ok),
        "parallel": _cell_parallel(cell, ok),
        "machine": cell.machine,
        "machines": {label: len(runs) for label, runs in cell.machines.items()},
        "epochs": _median_or_none([epochs_seen(r) for r in ok]),
        "attention_fallback": cell.fallback,
        "input_bound": cell.input_bound,
        "data_wait": _cell_data_wait(ok),
    })
    cell.record["notes"] += _regraded_notes(cell, ok)
    if cell.fallback:
        cell.record["notes"].append(f"{cell.name}: attention fell back ({cell.fallback}); its speed measures the "
                                    "fallback and is kept out of every speedup")
    if cell.input_bound:
        cell.record["notes"].append(f"{cell.name}: {cell.input_bound}; its speed measures the data feeding and is "
                                    "kept out of every speedup")
    if shared > 1:
        cell.record["notes"].append(f"throughput not measured: up to {shared} runs shared the device "
                                    f"(benchmark --concurrent {shared}); its loss is unaffected")
    else:
        cell.record.update(_cell_speed(cell, ok, n_boot, level))
    cell.record.update(_cell_loss(cell, ok, n_boot, level))
    cell.record.update(_cell_eval(ok))
    if cell.framework == "maxtext":
        cell.record["maxtext_own"] = _maxtext_own(ok)


def _cell_data_wait(ok: list[LoadedRun]) -> dict | None:
    """The median over its runs of each run's data-wait fraction and mean wait (``timing.data_wait``);
    None where no run recorded one."""
    waits = [(r.run.get("timing") or {}).get("data_wait") for r in ok]
    waits = [w for w in waits if isinstance(w, dict) and w.get("fraction") is not None]
    if not waits:
        return None
    return {"fraction": _median_or_none([w["fraction"] for w in waits]),
            "mean_ms": _median_or_none([w["mean_ms"] for w in waits]), "runs": len(waits)}


def _run_speed(run: LoadedRun) -> float:
    """One run's tokens/s: its tokens per step over the median of its measured steps."""
    return float(stats.tokens_per_s_from_ms(tokens_per_step(run), np.median(_measured(run))))


def epochs_seen(run: LoadedRun) -> float | None:
    """How many passes over its training tokens a run made (None on synthetic tokens)."""
    train = (run.run.get("data") or {}).get("train_tokens")
    if not train or run.config.get("synthetic"):
        return None
    return len(run.steps or []) * tokens_per_step(run) / float(train)


def tokens_per_step(run: LoadedRun) -> int:
    """Global tokens per step: the global batch (``parallel.global_batch``, else per-GPU batch ×
    GPUs) × sequence length. ``config.batch_size`` is the per-GPU batch."""
    cfg = run.config
    batch = run.parallel.get("global_batch") or cfg["batch_size"] * gpus_of(cfg, run.parallel)
    return int(batch) * int(cfg["seq_len"])


def _cell_parallel(cell: CellData, ok: list[LoadedRun]) -> dict:
    """How the cell's runs were spread: run.json's ``parallel`` record of its first run (1 GPU,
    one process, 'single' where there is none), and per rank the median over runs of each
    rank's median step time and the largest peak allocated bytes."""
    first = ok[0]
    par = first.parallel
    per_gpu = first.config["batch_size"]
    out = {"gpus": cell.gpus, "processes": par.get("processes", 1), "hosts": par.get("hosts", 1),
           "sharding": par.get("sharding", first.config.get("sharding", "ddp")),
           "per_gpu_batch": par.get("per_gpu_batch", per_gpu),
           "global_batch": par.get("global_batch", per_gpu * cell.gpus),
           "launcher": par.get("launcher", "single"), "backend": par.get("backend"), "per_rank": []}
    ranks: dict[int, dict] = {}
    for r in ok:
        for entry in r.parallel.get("per_rank") or []:
            slot = ranks.setdefault(int(entry.get("rank", 0)), {"step_ms": [], "peak": [], "host": entry.get("host"),
                                                                 "device": entry.get("device")})
            if entry.get("step_ms_median") is not None:
                slot["step_ms"].append(float(entry["step_ms_median"]))
            if entry.get("peak_allocated_bytes") is not None:
                slot["peak"].append(int(entry["peak_allocated_bytes"]))
    for rank in sorted(ranks):
        slot = ranks[rank]
        out["per_rank"].append({"rank": rank, "host": slot["host"], "device": slot["device"],
                                "step_ms_median": _median_or_none(slot["step_ms"]),
                                "peak_allocated_bytes": max(slot["peak"]) if slot["peak"] else None})
    medians = [e["step_ms_median"] for e in out["per_rank"] if e["step_ms_median"] is not None]
    out["rank_step_ms_spread"] = max(medians) / min(medians) if len(medians) > 1 and min(medians) > 0 else None
    return out


def _cell_speed(cell: CellData, ok: list[LoadedRun], n_boot: int, level: float) -> dict:
    """Step time and tokens/s over the measured steps of every run, with a bootstrap CI; on
    several GPUs the step is the slowest rank's and the tokens are the global batch's."""
    first = ok[0].run
    tokens = tokens_per_step(ok[0])
    series = [_measured(r) for r in ok]
    pooled = [x for s in series for x in s]
    summary = stats.percentile_summary(pooled)
    reps = stats.bootstrap_replicates(series, stats.row_median, n_boot,
                                      seed=_cell_seed(cell.framework, cell.recipe, *_gpu_part(cell), "step"))
    cell.tps_reps = stats.tokens_per_s_from_ms(tokens, reps)
    tps = float(stats.tokens_per_s_from_ms(tokens, summary["median"]))
    tps_ci = stats.percentile_ci(cell.tps_reps, level)
    per_gpu, per_gpu_ci = tps / cell.gpus, tuple(x / cell.gpus for x in tps_ci)
    return {
        "tokens_per_step": tokens,
        "step_ms": {k: summary[k] for k in ("median", "p10", "p90", "mean", "count")},
        "tokens_per_s": {"value": tps, "ci": list(tps_ci)},
        "tokens_per_s_per_gpu": {"value": per_gpu, "ci": list(per_gpu_ci)},
        "tokens_per_s_runs": [_run_speed(r) for r in ok],
        "flops": _cell_flops(first, per_gpu, per_gpu_ci, cell.gpus),
    }


def _cell_header(cell: CellData) -> dict:
    counts: dict[str, int] = {}
    for r in cell.runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    pending = max(0, cell.expected_runs - len(cell.runs))
    if pending:
        counts["pending"] = pending
    return {
        "framework": cell.framework, "recipe": cell.recipe, "precision": cell.precision, "gpus": cell.gpus,
        "status": _status_text(counts), "counts": counts,
        "runs": [{"dir": _relative(r.run_dir, cell.root), "seed": r.config.get("seed"), "status": r.status,
                  "error": (r.run.get("error") or "").splitlines()[0] if r.run.get("error") else None}
                 for r in cell.runs],
        "n_ok": counts.get("ok", 0), "n_runs": len(cell.runs) + pending,
        "tokens_per_s": None, "tokens_per_s_per_gpu": None, "step_ms": None, "flops": None, "memory": None,
        "parallel": None, "input_bound": None, "data_wait": None,
        "compile_s": None, "final_loss": None, "eval_loss": None, "perplexity": None,
        "precision_info": None, "framework_info": None, "timing_method": None,
        "loss_curve": None, "eval_curve": None, "machine": None, "machines": {}, "attention_fallback": None,
        "epochs": None,
        "notes": [],
    }


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _status_text(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    if len(counts) == 1:
        return next(iter(counts))
    ok = counts.get("ok", 0)
    rest = ", ".join(f"{n} {s}" for s, n in counts.items() if s != "ok")
    return f"{ok}/{total} ok ({rest})"


def _cell_flops(run: dict, tps: float, tps_ci: tuple[float, float], gpus: int = 1) -> dict:
    """TFLOP/s and MFU of one GPU's tokens/s (``tps``: the cell's ÷ GPUs), with the run's own
    FLOPs/token and (one GPU's) peaks; ``tflops_all_gpus`` is the whole cell's."""
    table = _flops_table(run)
    out = {}
    for name, row in table.items():
        per_token = row["flops_per_token"]
        tflops = achieved_tflops(tps, per_token)
        entry = {"flops_per_token": per_token, "tflops": tflops,
                 "tflops_ci": [achieved_tflops(x, per_token) for x in tps_ci],
                 "tflops_all_gpus": tflops * gpus}
        for den in DENOMINATORS:
            peak = row["peaks"].get(den)
            entry[f"mfu_{den}"] = mfu(tflops, peak)
            entry[f"peak_{den}"] = peak
        out[name] = entry
    return out


def _flops_table(run: dict) -> dict:
    """Per accounting: FLOPs/token and the peaks (TFLOP/s) behind the run's MFU values.

    The peaks are run.json's ``flops.denominators_tflops``; a run without them gives the peak
    as its TFLOP/s ÷ MFU. Where the run has no flops table, FLOPs/token comes from
    ``parallax.spec.flops`` and every MFU is None."""
    flops = run.get("flops") if isinstance(run.get("flops"), dict) else {}
    stored = flops.get("accountings", flops)
    denominators = flops.get("denominators_tflops")
    cfg = _run_config(run["config"])
    computed = flops_per_token(cfg.model_config, cfg.seq_len)
    table = {}
    for name in ACCOUNTINGS:
        row = stored.get(name) if isinstance(stored.get(name), dict) else {}
        peaks = {}
        for den in DENOMINATORS:
            fraction, tflops = row.get(f"mfu_{den}"), row.get("tflops")
            if isinstance(denominators, dict):
                peaks[den] = denominators.get(den)
            else:
                peaks[den] = tflops / fraction if fraction and tflops else None
        table[name] = {"flops_per_token": row.get("flops_per_token", computed[name]), "peaks": peaks}
    return table


def _run_config(config: dict) -> RunConfig:
    """The RunConfig of a run's config, without the fields this version does not know (a run
    written by a newer Parallax still yields its model and sequence length)."""
    known = {f.name for f in dataclasses.fields(RunConfig)}
    return RunConfig.from_dict({k: v for k, v in config.items() if k in known})


def _cell_memory(ok: list[LoadedRun]) -> dict:
    out = {}
    for key in ("peak_allocated_bytes", "peak_reserved_bytes"):
        values = [r.run.get("memory", {}).get(key) for r in ok]
        values = [v for v in values if v is not None]
        out[key] = max(values) if values else None
    return out


# engine_extra.maxtext: what MaxText itself logged and our own clock of the same runs
MAXTEXT_OWN = ("tokens_per_s_median", "wallclock_tokens_per_s_median", "tflops_per_step",
               "parallax_maxtext_accounting_tflops_per_step", "tflops_per_s_median", "parameters")


def _maxtext_own(ok: list[LoadedRun]) -> dict:
    """The medians over a maxtext cell's runs of MaxText's own figures (its logged tokens/s and
    TFLOP/s per device, its FLOPs accounting of a step, its parameter count) and of our clock,
    for the report's side-by-side table."""
    own = [(r.run.get("engine_extra") or {}).get("maxtext") or {} for r in ok]
    out = {key: _median_or_none([m.get(key) for m in own]) for key in MAXTEXT_OWN}
    # each run's figures against that run's own tokens/s: runs of one cell may come from machines
    # whose MaxText input pipelines differ by 15%, so a median of theirs against the cell's pooled
    # figure would mix machines
    for key, name in (("tokens_per_s_median", "logged_vs_ours"), ("wallclock_tokens_per_s_median", "clock_vs_ours")):
        out[name] = [m[key] / tps - 1 for r, m in zip(ok, own)
                     if m.get(key) is not None and (tps := _run_tokens_per_s(r))]
    return out


def _run_tokens_per_s(run: LoadedRun) -> float | None:
    return (run.run.get("throughput") or {}).get("tokens_per_s")


def _median_or_none(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def _loss_curve(ok: list[LoadedRun]) -> dict:
    """Mean loss over runs at each step (NaN where a run diverged)."""
    by_step: dict[int, list[float]] = {}
    for r in ok:
        for s in r.steps:
            by_step.setdefault(int(s["step"]), []).append(np.nan if s.get("loss") is None else s["loss"])
    steps = sorted(by_step)
    return {"step": steps, "loss": [_nan_to_none(float(np.mean(by_step[k]))) for k in steps]}


def _eval_curve(ok: list[LoadedRun]) -> dict | None:
    by_step: dict[int, list[float]] = {}
    for r in ok:
        for e in r.run.get("eval") or []:
            if e.get("loss") is not None:
                by_step.setdefault(int(e["step"]), []).append(float(e["loss"]))
    if not by_step:
        return None
    steps = sorted(by_step)
    return {"step": steps, "loss": [float(np.mean(by_step[k])) for k in steps]}


def _cell_loss(cell: CellData, ok: list[LoadedRun], n_boot: int, level: float) -> dict:
    """Final loss: the mean of each run's last SMOOTH_WINDOW losses, averaged over runs; its CI
    resamples runs (so it needs two or more)."""
    windows = [_losses(r)[-SMOOTH_WINDOW:] for r in ok]
    if any(np.isnan(w).any() for w in windows):
        return {"final_loss": {"value": None, "ci": None, "diverged": True, "window": SMOOTH_WINDOW}}
    cell.loss_windows = {}
    for r, w in zip(ok, windows):
        cell.loss_windows.setdefault(r.config.get("seed", 0), []).append(w)
    means = [float(w.mean()) for w in windows]
    ci = None
    if len(means) > 1:
        reps = stats.bootstrap_replicates([[m] for m in means], stats.row_mean, n_boot,
                                          seed=_cell_seed(cell.framework, cell.recipe, *_gpu_part(cell), "loss"))
        ci = list(stats.percentile_ci(reps, level))
    return {"final_loss": {"value": float(np.mean(means)), "ci": ci, "diverged": False,
                           "window": SMOOTH_WINDOW, "runs": len(means)}}


def _cell_eval(ok: list[LoadedRun]) -> dict:
    last = [r.run["eval"][-1]["loss"] for r in ok if r.run.get("eval")]
    last = [v for v in last if v is not None]
    if not last:
        return {}
    loss = float(np.mean(last))
    return {"eval_loss": loss, "perplexity": stats.perplexity(loss)}


def _nan_to_none(x: float):
    return None if not math.isfinite(x) else x


# ----------------------------------------------------------------------------- across cells

def _ratio(a: CellData, b: CellData, level: float) -> dict:
    """Tokens/s of ``a`` over tokens/s of ``b`` (independent runs), with a CI."""
    value = a.record["tokens_per_s"]["value"] / b.record["tokens_per_s"]["value"]
    ci = stats.percentile_ci(a.tps_reps / b.tps_reps, level)
    return {"ratio": value, "ci": list(ci), "distinguishable": stats.interval_excludes(ci, 1.0)}


def _on(gpus: int) -> str:
    """What a label says of a cell's GPU count: nothing for one GPU, ' ×N GPUs' for more."""
    return f" ×{gpus} GPUs" if gpus > 1 else ""


@dataclass
class Judge:
    """Decides, for every ratio of two cells, whether it may be computed (``comparability``):
    'same' (alike in every fact but the one compared), 'cross' (alike but for the machine, with
    --cross-machine: a separate section whose intervals include the machines' spread), or None
    (a cell's attention fell back or it is input-bound: kept out, and named in ``excluded``
    with the reason); anything else is
    refused with a one-line ParallaxError naming the fact and the two cells."""

    cross_machine: bool = False
    twins: dict = field(default_factory=dict)  # frozenset of two machines -> [twin entries]
    excluded: dict = field(default_factory=dict)  # cell name -> why it is kept out of ratios
    cross: list = field(default_factory=list)  # the cross-machine speedups

    def __call__(self, kind: str, a: CellData, b: CellData) -> str | None:
        for cell in (a, b):
            if cell.kept_out:
                self.excluded[cell.name] = cell.kept_out
                return None
        found = comparability.differences(a.facts, b.facts, kind)
        machine = [d for d in found if d.scope == comparability.MACHINE]
        if len(machine) < len(found) or (machine and not self.cross_machine):
            raise comparability.refusal(f"{a.name} over {b.name} ({_first_dir(a)}, {_first_dir(b)})", found,
                                        self.cross_machine)
        return "cross" if machine or len(a.machines) > 1 or len(b.machines) > 1 else "same"

    def ratio(self, kind: str, a: CellData, b: CellData, level: float) -> dict | None:
        """``_ratio`` of two cells the judge lets through; a cross-machine one's interval widened by
        the largest twin ratio between the machines involved (None where no twin was run on both)."""
        verdict = self(kind, a, b)
        if verdict is None:
            return None
        out = {**_ratio(a, b, level), "cross_machine": verdict == "cross", "machines": [a.machine, b.machine]}
        if verdict == "cross":
            out.update(self._widened(a, b, out))
        return out

    def _widened(self, a: CellData, b: CellData, raw: dict) -> dict:
        pairs = {frozenset((ma, mb)) for ma in a.machines for mb in b.machines if ma != mb}
        missing = sorted(" and ".join(sorted(p)) for p in pairs if not self.twins.get(p))
        machines = {"raw_ci": raw["ci"]}
        if missing:
            return {**machines, "ci": None, "distinguishable": False,
                    "note": f"no interval: no cell ran on both {missing[0]} (run bf16 twins on each machine)"}
        spread = max(abs(t["log_ratio"]) for p in pairs for t in self.twins[p])
        ci = [raw["ci"][0] * math.exp(-spread), raw["ci"][1] * math.exp(spread)]
        return {**machines, "ci": ci, "distinguishable": stats.interval_excludes(ci, 1.0), "machine_spread": spread,
                "note": f"interval widened by the largest twin ratio between the machines (±{spread:.2%} in log)"}


def _first_dir(cell: CellData) -> str:
    ok = _ordered_ok(cell)
    return _relative(ok[0].run_dir, cell.root) if ok else cell.name


def machine_twins(cells: dict) -> dict:
    """{frozenset of two machines: [{cell, machines, tokens_per_s, log_ratio}]}: every cell with
    measured speed on two machines (its twins), each machine's tokens/s the median of its runs'."""
    out: dict = {}
    for cell in cells.values():
        if len(cell.machines) < 2 or not _has_speed(cell):
            continue
        speed = {m: float(np.median([_run_speed(r) for r in runs])) for m, runs in cell.machines.items()}
        names = sorted(speed)
        for i, m1 in enumerate(names):
            for m2 in names[i + 1:]:
                out.setdefault(frozenset((m1, m2)), []).append(
                    {"cell": cell.name, "machines": [m1, m2], "tokens_per_s": [speed[m1], speed[m2]],
                     "log_ratio": math.log(speed[m2] / speed[m1])})
    return out


def speedups(cells: dict, level: float, judge: Judge | None = None) -> list[dict]:
    """Recipe over bf16 and framework over torch, each between cells of one GPU count; those the
    judge lets through, cross-machine ones into ``judge.cross`` (not the list returned)."""
    judge = judge or Judge()
    out = []
    for (fw, rec, g), cell in cells.items():
        plain, knob_set = split_tuned(rec)
        for base_name in (tuned_name(b, knob_set) for b in _baselines(fw, plain, cell.precision)):
            base = cells.get((fw, base_name, g))
            if _has_speed(cell) and _has_speed(base):
                _add(out, judge, judge.ratio("recipe", cell, base, level),
                     {"kind": "precision", "framework": fw, "gpus": g, "a": rec, "b": base_name,
                      "label": f"{fw}{_on(g)}: {rec} over {base_name}"})
    for (fw, rec, g), cell in cells.items():
        base = cells.get((BASELINE_FRAMEWORK, registry.default_name(BASELINE_FRAMEWORK, cell.precision), g))
        if fw != BASELINE_FRAMEWORK and rec == registry.default_name(fw, cell.precision) \
                and _has_speed(cell) and _has_speed(base):
            _add(out, judge, judge.ratio("framework", cell, base, level),
                 {"kind": "framework", "precision": cell.precision, "gpus": g, "a": fw, "b": BASELINE_FRAMEWORK,
                  "recipes": [rec, base.recipe], "label": f"{cell.precision}{_on(g)}: {fw} over {BASELINE_FRAMEWORK}"})
    return out


def _add(out: list, judge: Judge, ratio: dict | None, entry: dict) -> None:
    if ratio is not None:
        (judge.cross if ratio["cross_machine"] else out).append({**entry, **ratio})


def scaling(cells: dict, level: float, judge: Judge | None = None) -> list[dict]:
    """Per framework × recipe that ran on more than one GPU count: a row per count with its
    throughput, per-GPU figures and scaling efficiency.

    Scaling efficiency = tokens/s(N) ÷ (N × tokens/s(1)) against the 1-GPU cell of the same
    matrix (weak scaling: the per-GPU batch is the matrix's, so N GPUs train on N times the
    global batch). Its interval is the percentile interval of the ratio of the two cells'
    bootstrap replicates (independent runs, as every speedup's), divided by N. Without a 1-GPU
    cell that has a result, the rows say so and carry no efficiency."""
    judge = judge or Judge()
    groups: dict[tuple[str, str], list[CellData]] = {}
    for (fw, rec, _), cell in cells.items():
        groups.setdefault((fw, rec), []).append(cell)
    out = []
    for (fw, rec), members in groups.items():
        if not any(c.gpus > 1 for c in members):
            continue
        members = sorted(members, key=lambda c: c.gpus)
        one = next((c for c in members if c.gpus == 1), None)
        note = None
        if one is None:
            note = f"no 1-GPU cell of {fw} {rec} in this matrix: no scaling efficiency (add 1 to --gpus)"
        elif not _has_speed(one):
            note = f"the 1-GPU cell of {fw} {rec} has no throughput ({one.record['status']}): no scaling efficiency"
        rows = [_scaling_row(c, one if note is None else None, level, judge) for c in members]
        out.append({"framework": fw, "recipe": rec, "precision": members[0].precision,
                    "baseline_gpus": 1 if note is None else None, "note": note, "rows": rows})
    return out


def _scaling_row(cell: CellData, one: CellData | None, level: float, judge: Judge) -> dict:
    rec = cell.record
    primary = ((rec.get("flops") or {}).get(PRIMARY_ACCOUNTING) or {})
    parallel = rec.get("parallel") or {}
    row = {"gpus": cell.gpus, "status": rec["status"],
           "global_batch": parallel.get("global_batch"), "per_gpu_batch": parallel.get("per_gpu_batch"),
           "sharding": parallel.get("sharding"), "launcher": parallel.get("launcher"),
           "tokens_per_s": rec.get("tokens_per_s"), "tokens_per_s_per_gpu": rec.get("tokens_per_s_per_gpu"),
           "mfu_per_gpu": primary.get("mfu_precision_peak"),
           "peak_allocated_bytes_per_gpu": (rec.get("memory") or {}).get("peak_allocated_bytes"),
           "peak_reserved_bytes_per_gpu": (rec.get("memory") or {}).get("peak_reserved_bytes"),
           "step_ms_median": (rec.get("step_ms") or {}).get("median"),
           "rank_step_ms_spread": parallel.get("rank_step_ms_spread"),
           "efficiency": None}
    ratio = judge.ratio("scaling", cell, one, level) if one is not None and _has_speed(cell) else None
    if ratio is not None and ratio["ci"] is not None:
        ci = [x / cell.gpus for x in ratio["ci"]]
        row["efficiency"] = {"value": ratio["ratio"] / cell.gpus, "ci": ci,
                             "below_ideal": stats.interval_excludes(ci, 1.0) and ci[1] < 1.0}
    return row


def _format_of(framework: str, recipe: str) -> str:
    """The format of a recipe by name (a name that is a format is its own)."""
    recipe = split_tuned(recipe)[0]
    if recipe in PRECISIONS:
        return recipe
    try:
        return registry.get(framework, recipe).format
    except ParallaxError:
        return recipe


def _baselines(framework: str, recipe: str, fmt: str) -> list[str]:
    """What a cell's speed and loss are compared with: its framework's bf16 recipe, and the
    bf16 recipe of its own backend where that is another one (te-fp8-* over te-bf16). A recipe
    that differs only in its performance settings (``params["tuning"]``: MaxText's base.yml
    defaults) is not a backend's bf16: MaxText's fp8 cells are not compared with it."""
    plain = registry.default_name(framework, BASELINE_PRECISION)
    out = [] if recipe == plain else [plain]
    try:
        own = registry.get(framework, recipe)
    except ParallaxError:
        return out
    same = [r.name for r in registry.of_framework(framework)
            if r.backend == own.backend and r.format == BASELINE_PRECISION and r.name not in (recipe, plain)
            and r.params.get("tuning") == own.params.get("tuning")]
    return out + same[:1] if fmt != BASELINE_PRECISION else out


def _has_speed(cell: CellData | None) -> bool:
    return cell is not None and cell.tps_reps is not None


def loss_difference(a: CellData, b: CellData, n_boot: int, level: float) -> dict | None:
    """Final loss of ``a`` minus ``b``, with a CI.

    Runs of the same seed start from the same weights and see the same batches, so where the
    two cells share seeds the difference is taken step by step over the final window (the
    batch-to-batch noise and the downward trend cancel) and bootstrapped over seeds and blocks
    of steps. Without a shared seed the two final losses are compared unpaired, with a CI only
    when each cell has two or more runs."""
    if a.loss_windows is None or b.loss_windows is None:
        return None
    common = sorted(set(a.loss_windows) & set(b.loss_windows))
    if common:
        diffs = [np.mean(a.loss_windows[s], axis=0) - np.mean(b.loss_windows[s], axis=0) for s in common]
        value = float(np.mean([d.mean() for d in diffs]))
        reps = stats.bootstrap_replicates(diffs, stats.row_mean, n_boot,
                                          seed=_cell_seed(a.framework, a.recipe, b.recipe, "delta"))
        ci = list(stats.percentile_ci(reps, level))
    else:
        value = a.record["final_loss"]["value"] - b.record["final_loss"]["value"]
        ci = _unpaired_ci(a, b, n_boot, level)
    return {"delta": value, "ci": ci, "paired_seeds": common,
            "includes_zero": None if ci is None else not stats.interval_excludes(ci, 0.0)}


def _unpaired_ci(a: CellData, b: CellData, n_boot: int, level: float) -> list[float] | None:
    means_a = [[float(w.mean())] for ws in a.loss_windows.values() for w in ws]
    means_b = [[float(w.mean())] for ws in b.loss_windows.values() for w in ws]
    if len(means_a) < 2 or len(means_b) < 2:
        return None
    reps_a = stats.bootstrap_replicates(means_a, stats.row_mean, n_boot, seed=_cell_seed(a.framework, "u"))
    reps_b = stats.bootstrap_replicates(means_b, stats.row_mean, n_boot, seed=_cell_seed(b.framework, "v"))
    return list(stats.percentile_ci(reps_a - reps_b, level))


def loss_deltas(cells: dict, n_boot: int, level: float) -> list[dict]:
    """Each low-precision cell's final loss minus its framework's bf16 cell's of the same GPU
    count (same global batch, so the same tokens)."""
    out = []
    for (fw, rec, g), cell in cells.items():
        base_name = tuned_name(registry.default_name(fw, BASELINE_PRECISION), split_tuned(rec)[1])
        base = cells.get((fw, base_name, g))
        if cell.precision == BASELINE_PRECISION or base is None:
            continue
        diff = loss_difference(cell, base, n_boot, level)
        if diff is not None:
            out.append({"framework": fw, "recipe": rec, "precision": cell.precision, "gpus": g,
                        "baseline": base_name, **diff})
    return out


def eval_deltas(cells: dict, level: float) -> list[dict]:
    """Validation loss of each low-precision cell minus its framework's bf16 (same GPU count),
    paired by seed: runs of one seed start from the same weights, see the same batches and are
    evaluated on the same held-out batches, so each seed gives one difference per evaluation
    step (its repeats averaged). Reported at the step where bf16's validation loss is lowest
    (on a small corpus trained for many epochs the later steps memorise) and at the last
    evaluation. The interval is over seeds (Student's t with seeds − 1 degrees of freedom): the
    unit that varies when a recipe is chosen (over two to five seeds, not a bootstrap). One seed
    has no interval."""
    out = []
    for (fw, rec, g), cell in cells.items():
        base = cells.get((fw, tuned_name(registry.default_name(fw, BASELINE_PRECISION), split_tuned(rec)[1]), g))
        if cell.precision == BASELINE_PRECISION or base is None:
            continue
        ours, theirs = _eval_by_seed(cell), _eval_by_seed(base)
        seeds = sorted(set(ours) & set(theirs))
        steps = sorted(set.intersection(*(set(ours[s]) & set(theirs[s]) for s in seeds))) if seeds else []
        if not steps:
            continue
        bf16 = {k: float(np.mean([theirs[s][k] for s in seeds])) for k in steps}
        by_seed = {k: {s: ours[s][k] - theirs[s][k] for s in seeds} for k in steps}
        best, final = min(steps, key=lambda k: bf16[k]), steps[-1]
        out.append({"framework": fw, "recipe": rec, "precision": cell.precision, "gpus": g, "baseline": base.recipe,
                    "steps": steps, "delta": [float(np.mean(list(by_seed[k].values()))) for k in steps],
                    "seeds": len(seeds), "best_step": best, "best_baseline_loss": bf16[best],
                    "final_step": final, "final_baseline_loss": bf16[final],
                    **_at("best", by_seed[best], level), **_at("final", by_seed[final], level)})
    return out


def penalty_ranking(cells: dict, penalties: list[dict]) -> list[dict]:
    """The recipes of a convergence benchmark ranked by their convergence penalty (``eval_deltas``'
    validation ΔLoss vs bf16 at bf16's best step, paired by seed), smallest first, each with its
    interval over seeds, whether that interval includes 0, whether it overlaps the next recipe's
    (then the two are not ordered by this benchmark), and how the format ran (native or emulated:
    an emulated format's loss is the format's numerics, its speed the emulation's cost)."""
    ranked = sorted(penalties, key=lambda d: d["delta_at_best"])
    out = []
    for i, d in enumerate(ranked):
        ci, after = d["ci_at_best"], ranked[i + 1]["ci_at_best"] if i + 1 < len(ranked) else None
        cell = cells.get((d["framework"], d["recipe"], d["gpus"]))
        out.append({"rank": i + 1, "precision": d["precision"], "framework": d["framework"], "recipe": d["recipe"],
                    "gpus": d["gpus"], "label": _label(cell) if cell is not None else None, "seeds": d["seeds"],
                    "delta": d["delta_at_best"], "ci": ci, "best_step": d["best_step"],
                    "includes_zero": None if ci is None else not stats.interval_excludes(ci, 0.0),
                    "overlaps_next": None if ci is None or after is None else ci[1] >= after[0]})
    return out


def _at(name: str, by_seed: dict, level: float) -> dict:
    """The mean over seeds of one step's differences, each seed's, and the interval over seeds."""
    values = list(by_seed.values())
    return {f"delta_at_{name}": float(np.mean(values)), f"ci_at_{name}": stats.t_interval(values, level),
            f"by_seed_at_{name}": {str(k): v for k, v in by_seed.items()}}


def _eval_by_seed(cell: CellData) -> dict[int, dict[int, float]]:
    """{seed: {evaluation step: validation loss, the mean of that seed's runs}} of a cell's ok runs."""
    found: dict[int, dict[int, list[float]]] = {}
    for r in cell.ok:
        for e in r.run.get("eval") or []:
            if e.get("loss") is not None:
                found.setdefault(int(r.config.get("seed", 0)), {}).setdefault(int(e["step"]), []).append(
                    float(e["loss"]))
    return {seed: {k: float(np.mean(v)) for k, v in steps.items()} for seed, steps in found.items()}


def conclusions(cells: dict, deltas: list[dict], level: float, judge: Judge | None = None) -> dict:
    """The fastest stack (framework and recipe) at each format and GPU count (cells whose
    attention fell back are not ranked), and what each recipe costs in loss: ``deltas``, the
    convergence penalties of a convergence benchmark ([] for a throughput one, whose losses are
    early-training figures and conclude nothing)."""
    judge = judge or Judge()
    fastest = []
    precisions = sorted({c.precision for c in cells.values()}, key=_order(PRECISIONS))
    counts = sorted({c.gpus for c in cells.values()})
    for p in precisions:
        for g in counts:
            ranked = sorted((c for c in cells.values()
                             if c.precision == p and c.gpus == g and _has_speed(c) and not c.kept_out),
                            key=lambda c: -c.record["tokens_per_s"]["value"])
            if not ranked:
                continue
            entry = {"precision": p, "gpus": g, "framework": ranked[0].framework, "recipe": ranked[0].recipe,
                     "tokens_per_s": ranked[0].record["tokens_per_s"]["value"],
                     "native": _native(ranked[0]), "runner_up": None}
            if len(ranked) > 1:
                entry["runner_up"] = f"{ranked[1].framework} {ranked[1].recipe}"
                kind = "recipe" if ranked[0].framework == ranked[1].framework else "framework"
                if split_tuned(ranked[0].recipe)[1] != split_tuned(ranked[1].recipe)[1]:
                    kind += "+tuning"  # two stacks, each with its knob set
                entry.update(judge.ratio(kind, ranked[0], ranked[1], level))
            fastest.append(entry)
    emulated = [{"framework": fw, "recipe": rec, "precision": c.precision, "gpus": g}
                for (fw, rec, g), c in cells.items() if c.ok and _label(c) == cap.EMULATED]
    not_ok = [{"framework": fw, "recipe": rec, "precision": c.precision, "gpus": g, "status": c.record["status"]}
              for (fw, rec, g), c in cells.items() if c.record["status"] != "ok"]
    return {"fastest": fastest, "loss_cost": deltas, "emulated": emulated, "not_ok": not_ok}


def _native(cell: CellData):
    info = cell.record.get("precision_info") or {}
    return info.get("native")


def _label(cell: CellData) -> str:
    """native, emulated or cpu: ``plan.capability.run_label``, the words of every report."""
    return cap.run_label(cell.record.get("precision_info") or {})


def _order(names):
    return lambda name: (names.index(name) if name in names else len(names), name)


# ----------------------------------------------------------------------------- the record

@dataclass
class Analysis:
    results_dir: Path
    cells: dict
    config: dict
    matrix: dict | None
    environment: dict
    problems: list[str]
    corrupt: list[Corrupt] = field(default_factory=list)


def analyse(results_dir: Path, n_boot: int = stats.DEFAULT_BOOTSTRAPS,
            level: float = stats.DEFAULT_LEVEL, cross_machine: bool = False) -> Analysis:
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ParallaxError(f"{results_dir}: no such results directory; pass the --output-dir of a benchmark")
    runs, corrupt = load_results(results_dir)
    matrix = _read_json(results_dir / MATRIX_FILE, corrupt)
    if not runs and matrix is None:
        raise ParallaxError(f"{results_dir} holds no readable run.json; run 'parallax benchmark' first"
                            + (f" ({len(corrupt)} unreadable files)" if corrupt else ""))
    config = shared_config(runs, results_dir)
    stand_ins = [r for r in (_corrupt_run(c, results_dir) for c in corrupt) if r is not None]
    cells = _group(runs + stand_ins, matrix, results_dir)
    for cell in cells.values():
        analyse_cell(cell, n_boot, level, cross_machine)
    environment = _read_json(results_dir / ENVIRONMENT_FILE, corrupt)
    problems = [c.message for c in corrupt]
    index_problem = _index_problem(results_dir)
    if index_problem:
        problems.append(index_problem)
    if environment is None:
        environment = next((r.run["environment"] for r in runs if r.run.get("environment")), {})
    return Analysis(results_dir, cells, config, matrix, environment, problems, corrupt)


def _group(runs: list[LoadedRun], matrix: dict | None, root: Path) -> dict:
    """Cells grouped by format (bf16, fp8, nvfp4), then framework in the matrix's order, the
    framework's default recipe first, then GPU count; pending ones included."""
    formats = {r.key: r.config["precision"] for r in runs}
    expected = 0
    if matrix:
        formats.update({(fw, rec, g): fmt for fw, rec, fmt, g in _matrix_cells(matrix)})
        expected = len(matrix["seeds"]) * matrix["repeats"]
    fws = list(matrix["frameworks"]) if matrix else list(FRAMEWORKS)

    def order(key):
        fw, rec, g = key
        return (_order(list(PRECISIONS))(formats[key]), _order(fws)(fw),
                rec != registry.default_name(fw, formats[key]), rec, g)

    cells = {k: CellData(k[0], k[1], formats[k], [], expected, root, gpus=k[2]) for k in sorted(formats, key=order)}
    for r in runs:
        cells[r.key].runs.append(r)
    return cells


def _matrix_cells(matrix: dict) -> list[tuple[str, str, str, int]]:
    """(framework, recipe, format, GPUs) of every cell of a matrix.json: its ``cells`` (schema 1
    listed formats instead) at each of its ``gpus`` (absent: 1), or at a cell's own GPU count
    where the entry names one as a fourth item."""
    counts = [int(g) for g in matrix.get("gpus") or [1]]
    if "cells" in matrix:
        entries = [tuple(c) for c in matrix["cells"]]
    else:
        entries = [(fw, p, p) for fw in matrix["frameworks"] for p in matrix["precisions"]]
    out = []
    for entry in entries:
        fw, rec, fmt = entry[:3]
        named = [tuned_name(rec, t) for t in _knob_sets(matrix, fw, rec)]
        out += [(fw, n, fmt, int(entry[3])) for n in named] if len(entry) > 3 else \
            [(fw, n, fmt, g) for g in counts for n in named]
    return list(dict.fromkeys(out))


def _knob_sets(matrix: dict, framework: str, recipe: str) -> tuple[str, ...]:
    """The knob sets a matrix ran ``recipe`` with (``tunings``; absent: default only)."""
    names = tuning.of_framework(tuple(matrix.get("tunings") or ()), framework)
    try:
        known = registry.get(framework, recipe)
    except ParallaxError:
        return names
    return tuple(n for n in names if tuning.takes(known, n))


def build_comparison(results_dir: Path, baseline_dir: Path | None = None,
                     n_boot: int = stats.DEFAULT_BOOTSTRAPS, level: float = stats.DEFAULT_LEVEL,
                     cross_machine: bool = False) -> dict:
    """The comparison record of ``results_dir`` (and its ratios to ``baseline_dir``). Ratios only
    between like cells (``Judge``); ``cross_machine`` puts those of cells that differ only in
    their machine into a separate section instead of refusing them."""
    current = analyse(results_dir, n_boot, level, cross_machine)
    judge = Judge(cross_machine, machine_twins(current.cells) if cross_machine else {})
    speedup_list = speedups(current.cells, level, judge)
    deltas = loss_deltas(current.cells, n_boot, level)
    mode = benchmark_mode(current)
    penalties = eval_deltas(current.cells, level)
    record = {
        "schema": SCHEMA,
        "results_dir": str(current.results_dir),
        "environment": current.environment,
        "config": current.config,
        "matrix": current.matrix,
        "cells": [c.record for c in current.cells.values()],
        "speedups": speedup_list,
        "tuning": tuning_report.section(current.cells, level, judge),
        "scaling": scaling(current.cells, level, judge),
        "loss_deltas": deltas,
        "mode": mode,
        "eval_deltas": penalties,
        "penalty_ranking": penalty_ranking(current.cells, penalties) if mode == CONVERGENCE else [],
        "conclusions": conclusions(current.cells, penalties if mode == CONVERGENCE else [], level, judge),
        "machines": machines_of(current.cells),
        "excluded": [{"cell": name, "reason": why} for name, why in judge.excluded.items()],
        "cross_machine": _cross_section(judge) if cross_machine else None,
        "problems": list(current.problems),
        "corrupt": [c.message for c in current.corrupt],
        "statistics": {"method": STATS_METHOD.format(n_boot=n_boot), "bootstraps": n_boot,
                       "level": level, "smooth_window": SMOOTH_WINDOW,
                       "primary_accounting": PRIMARY_ACCOUNTING},
        "baseline": None,
    }
    if baseline_dir is not None:
        base = analyse(baseline_dir, n_boot, level, cross_machine)
        record["baseline"] = baseline_comparison(current, base, n_boot, level)
        record["problems"] += [f"baseline: {p}" for p in base.problems]
        record["corrupt"] += [f"baseline: {c.message}" for c in base.corrupt]
    return record


def benchmark_mode(analysis: Analysis) -> str:
    """'convergence' where matrix.json says so (``parallax benchmark --convergence``), or, for a
    folder written before modes, where every ok run evaluated twice or more on held-out real
    tokens; else 'throughput', whose losses are early-training figures, not a penalty."""
    if analysis.matrix and analysis.matrix.get("mode"):
        return analysis.matrix["mode"]
    ok = [r for cell in analysis.cells.values() for r in cell.ok]
    evaluated = ok and all(len(r.run.get("eval") or []) >= 2 and not r.config.get("synthetic") for r in ok)
    return CONVERGENCE if evaluated else THROUGHPUT


def machines_of(cells: dict) -> list[dict]:
    """Every machine the cells' ok runs ran on: its label, GPUs, host, driver, and its cells."""
    out: dict[str, dict] = {}
    for cell in cells.values():
        for label, runs in cell.machines.items():
            facts = comparability.machine(runs[0].run)
            entry = out.setdefault(label, {"machine": label, "host": facts["host"], "driver": facts["driver"],
                                           "gpus": [list(g) for g in facts["gpus"]], "cells": []})
            entry["cells"].append(cell.name)
    return list(out.values())


def _cross_section(judge: Judge) -> dict:
    twins = [t for entries in judge.twins.values() for t in entries]
    return {"speedups": judge.cross, "twins": twins,
            "note": ("Ratios between cells that ran on different machines (or whose runs span machines). "
                     "Each interval is the ratio's bootstrap interval widened, at both ends, by the largest "
                     "ratio between one cell's tokens/s on the two machines (its twins), so it includes the "
                     "between-machine spread measured here; with no twin on both machines there is no "
                     "interval.")}


def baseline_comparison(current: Analysis, base: Analysis, n_boot: int, level: float) -> dict:
    """Each cell against the same cell (framework, recipe, GPU count) of another results
    directory (another GPU, version)."""
    rows, notes = [], []
    same_steps = current.config.get("steps") == base.config.get("steps")
    if not same_steps:
        notes.append(f"the baseline ran {base.config.get('steps')} steps, these runs {current.config.get('steps')}: "
                     "losses are not compared (they are at different steps of different schedules); "
                     "tokens/s, step-time and memory ratios are")
    for key, cell in current.cells.items():
        other = base.cells.get(key)
        if not (_has_speed(cell) and _has_speed(other)):
            continue
        row = {"framework": key[0], "recipe": key[1], "precision": cell.precision, "gpus": key[2],
               "tokens_per_s": _ratio(cell, other, level),
               "step_ms_ratio": cell.record["step_ms"]["median"] / other.record["step_ms"]["median"],
               "memory_ratio": _safe_ratio(cell.record["memory"]["peak_reserved_bytes"],
                                           other.record["memory"]["peak_reserved_bytes"])}
        row["loss_difference"] = loss_difference(cell, other, n_boot, level) if same_steps else None
        rows.append(row)
    ours, theirs = (sorted(m["machine"] for m in machines_of(a.cells)) for a in (current, base))
    cross = ours != theirs
    if cross:
        notes.append(f"cross-machine: this run's cells ran on {', '.join(ours) or 'no machine'}, the baseline's on "
                     f"{', '.join(theirs) or 'no machine'}; the intervals cover step and run variation, not the "
                     "spread between machines")
    return {"results_dir": str(base.results_dir), "rows": rows, "notes": notes, "cross_machine": cross,
            "machines": {"this": ours, "baseline": theirs},
            "config_differences": differences(*_comparable(base.config, current.config)),
            "environment_differences": environment_differences(base.environment, current.environment)}


def _comparable(a: dict, b: dict) -> tuple[dict, dict]:
    """The two configurations with ``compiled`` limited to the frameworks both ran."""
    both = set(a.get("compiled") or {}) & set(b.get("compiled") or {})
    return tuple({**c, "compiled": {fw: on for fw, on in (c.get("compiled") or {}).items() if fw in both}}
                 for c in (a, b))


def _safe_ratio(a, b):
    return a / b if a is not None and b else None


def environment_summary(env: dict) -> dict:
    """The few facts of an environment a reader needs (GPU, driver, library versions)."""
    gpus = env.get("gpus") or []
    packages = {k: v for k, v in (env.get("packages") or {}).items() if v}
    driver = env.get("cuda_driver") or {}
    nvml = env.get("nvml") or {}
    names: dict[str, int] = {}
    for g in gpus:
        name = f"{g.get('name')} (cc {g.get('compute_capability')})"
        names[name] = names.get(name, 0) + 1
    return {
        "gpu": ", ".join(name if n == 1 else f"{n} × {name}" for name, n in names.items()) or "none found",
        "interconnect": (topology.interconnect({"devices": gpus, "topology": env.get("gpu_topology")})["summary"]
                         if len(gpus) > 1 else None),
        "gpu_memory_gib": [round(g["memory_total_bytes"] / 2**30, 1) for g in gpus if g.get("memory_total_bytes")],
        "driver": nvml.get("driver_version") or driver.get("version_str"),
        "python": env.get("python"),
        "platform": env.get("platform"),
        "parallax": env.get("parallax") or env.get("parallax_version"),
        "packages": packages,
        "captured_at": env.get("captured_at") or env.get("collected_at"),
    }


def environment_differences(a: dict, b: dict) -> list[str]:
    sa, sb = environment_summary(a), environment_summary(b)
    out = []
    for key in ("gpu", "driver", "python", "parallax"):
        if sa[key] != sb[key]:
            out.append(f"{key}: {sa[key]} → {sb[key]}")
    for name in sorted(set(sa["packages"]) | set(sb["packages"])):
        if sa["packages"].get(name) != sb["packages"].get(name):
            out.append(f"{name}: {sa['packages'].get(name)} → {sb['packages'].get(name)}")
    return out
