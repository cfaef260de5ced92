"""The comparison record: every number of a benchmark report, computed once from the run files.

``build_comparison(results_dir, baseline_dir)`` reads every ``run.json`` / ``steps.jsonl``
under ``results_dir`` and returns one JSON-ready dict that every renderer (terminal, Markdown,
plots, CSV/JSON) draws from, so the numbers in all of them agree by construction.

A file that cannot be read (corrupt, truncated, wrong schema, an ok run without its steps) is
named in ``problems`` and ``corrupt`` and left out — never averaged in; a run folder of the
matrix whose file is corrupt shows its cell as ``corrupt`` (not ``pending``). ``parallax
compare`` warns for each and exits 2 after writing what it can. ``index.json`` is derived from
the run folders and never read for numbers: a corrupt one is a warning only. Runs whose configurations differ
(other than framework, recipe, seed) are refused: they are not one benchmark.

Per cell (framework × recipe; the recipe's format is the cell's precision) over its ok runs
(seeds and repeats):
  step_ms          median, p10, p90 of the measured (post-warmup) steps of all runs pooled
  tokens_per_s     batch·seq / median step time, with a hierarchical block-bootstrap CI
  flops            TFLOP/s and MFU under each FLOPs accounting and denominator (run.json's)
  memory           the highest peak allocated / reserved bytes of the runs
  compile_s        the median compile time of the runs
  final_loss       mean of the last SMOOTH_WINDOW losses (averaged over runs), with a CI
  eval_loss, perplexity   the last evaluation of each run, averaged; perplexity = exp(loss)
Across cells: speedups (each recipe over its framework's bf16 recipe, and over the bf16 recipe
of its own backend where there is one, e.g. te-fp8-delayed over te-bf16; each framework's
default recipe over torch's within a format) and loss deltas (loss − loss_bf16) with CIs.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from parallax import stats
from parallax.config import FRAMEWORKS, PRECISIONS, RunConfig
from parallax.errors import ParallaxError
from parallax.flops import ACCOUNTINGS, PRIMARY_ACCOUNTING, achieved_tflops, flops_per_token, mfu
from parallax.precision import registry
from parallax.results import (CELL_FIELDS, ENVIRONMENT_FILE, INDEX_FILE, INDEX_SCHEMA, MATRIX_FILE, RUN_FILE, RUNS_DIR,
                              differences, load_run, load_steps)

SCHEMA = "parallax.comparison/1"
CORRUPT = "corrupt"  # the status of a matrix run whose result file cannot be read
SMOOTH_WINDOW = 10
BASELINE_FRAMEWORK = "torch"
BASELINE_PRECISION = "bf16"
DENOMINATORS = ("precision_peak", "bf16_peak", "measured_ceiling")
PER_CELL = CELL_FIELDS + ("compile", "cuda_graphs")
CONFIG_KEYS = ("framework", "precision", "batch_size", "seq_len", "model")  # what grouping and rates need


def cell_key(config: dict) -> tuple[str, str]:
    """(framework, recipe) of a run's config; runs written before recipes existed name only
    their format, which was then the framework's bf16 recipe (the only one that ran)."""
    return config["framework"], config.get("recipe") or config["precision"]


STATS_METHOD = (
    "Step times are the measured (post-warmup) steps of every ok run of a cell, pooled. "
    "Tokens/s is batch × sequence length ÷ the median step time. Its 95% interval is a "
    "percentile bootstrap ({n_boot} replicates) that resamples the runs (seeds × repeats) with "
    "replacement and, inside each run, blocks of ceil(n^(1/3)) consecutive steps (a moving-block "
    "bootstrap), because successive GPU step times are autocorrelated and resampling single "
    "steps would understate the uncertainty. The final loss is the mean of the last "
    f"{SMOOTH_WINDOW} training losses, averaged over runs (its interval resamples runs, so it "
    "needs two or more). ΔLoss = loss − loss_bf16 is taken step by step between runs of the "
    "same seed (same initial weights, same batches, so batch noise and the downward trend "
    "cancel) over that final window, and bootstrapped over seeds and blocks of steps. With one "
    "run per cell, intervals cover step-to-step variation only, not run-to-run or "
    "seed-to-seed variation: use --repeats and --seeds for that. Speedups whose interval "
    "includes 1 and deltas whose interval includes 0 are reported as not distinguishable."
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


@dataclass
class CellData:
    """One framework × recipe: its runs and the bootstrap replicates other cells need."""

    framework: str
    recipe: str
    precision: str  # the recipe's format
    runs: list[LoadedRun]
    expected_runs: int = 0
    root: Path = Path(".")  # the results directory; run folders are shown relative to it
    record: dict = field(default_factory=dict)
    tps_reps: np.ndarray | None = None
    loss_windows: dict[int, list[np.ndarray]] | None = None  # seed -> final windows of its runs

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


# A run folder of the matrix: runs/<framework>-<recipe>-seed<N>-rep<M> (runner.Cell.id); framework
# names have no '-', recipe names may.
CELL_DIR = re.compile(r"^(?P<framework>[^-]+)-(?P<recipe>.+)-seed(?P<seed>\d+)-rep(?P<repeat>\d+)$")


def _corrupt_run(item: Corrupt, root: Path) -> LoadedRun | None:
    """A stand-in run of status ``corrupt`` for a matrix run folder whose file is corrupt, so
    that its cell shows it instead of counting it pending."""
    match = CELL_DIR.match(item.run_dir.name)
    if match is None or item.run_dir.parent != root / RUNS_DIR:
        return None
    config = {"framework": match["framework"], "recipe": match["recipe"],
              "precision": _format_of(match["framework"], match["recipe"]), "seed": int(match["seed"])}
    return LoadedRun(item.run_dir, {"status": CORRUPT, "config": config, "error": item.message})


def shared_config(runs: list[LoadedRun], results_dir: Path) -> dict:
    """The configuration common to every run; ParallaxError when runs disagree.

    ``compile`` may differ between frameworks (JAX always compiles; --no-compile is torch's)
    but not within one: ``compiled`` maps each framework to its setting. Whether the blocks
    replayed CUDA graphs (``framework.cuda_graphs`` of the runs that got that far; absent in
    runs from before the option, which were eager) may differ between recipes but not within one."""
    configs, compiled, graphs = {}, {}, {}
    for r in runs:
        key = json.dumps({k: v for k, v in r.config.items() if k not in PER_CELL}, sort_keys=True)
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
    if len(configs) > 1:
        (a, dir_a), (b, dir_b) = list(configs.items())[:2]
        diff = [k for k in json.loads(a) if json.loads(a)[k] != json.loads(b).get(k)]
        raise ParallaxError(
            f"{results_dir} mixes runs of different configurations ({dir_a} and {dir_b} differ in "
            f"{', '.join(diff)}); compare them from separate directories")
    if not configs:
        return {}
    return {**json.loads(next(iter(configs))), "compiled": {fw: v.pop() for fw, v in compiled.items()}}


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


def _ordered_ok(cell: CellData) -> list[LoadedRun]:
    """Ok runs ordered by seed then folder, so that two cells' runs pair up by seed."""
    return sorted(cell.ok, key=lambda r: (r.config.get("seed", 0), str(r.run_dir)))


def analyse_cell(cell: CellData, n_boot: int, level: float) -> None:
    """Fill ``cell.record`` (and the replicates) from its runs."""
    ok = _ordered_ok(cell)
    cell.record = _cell_header(cell)
    if not ok:
        return
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
    })
    if shared > 1:
        cell.record["notes"].append(f"throughput not measured: up to {shared} runs shared the device "
                                    f"(benchmark --concurrent {shared}); its loss is unaffected")
    else:
        cell.record.update(_cell_speed(cell, ok, n_boot, level))
    cell.record.update(_cell_loss(cell, ok, n_boot, level))
    cell.record.update(_cell_eval(ok))


def _cell_speed(cell: CellData, ok: list[LoadedRun], n_boot: int, level: float) -> dict:
    """Step time and tokens/s over the measured steps of every run, with a bootstrap CI."""
    first = ok[0].run
    tokens = first["config"]["batch_size"] * first["config"]["seq_len"]
    series = [_measured(r) for r in ok]
    pooled = [x for s in series for x in s]
    summary = stats.percentile_summary(pooled)
    reps = stats.bootstrap_replicates(series, stats.row_median, n_boot,
                                      seed=_cell_seed(cell.framework, cell.recipe, "step"))
    cell.tps_reps = stats.tokens_per_s_from_ms(tokens, reps)
    tps = float(stats.tokens_per_s_from_ms(tokens, summary["median"]))
    tps_ci = stats.percentile_ci(cell.tps_reps, level)
    return {
        "tokens_per_step": tokens,
        "step_ms": {k: summary[k] for k in ("median", "p10", "p90", "mean", "count")},
        "tokens_per_s": {"value": tps, "ci": list(tps_ci)},
        "tokens_per_s_runs": [float(stats.tokens_per_s_from_ms(tokens, np.median(s))) for s in series],
        "flops": _cell_flops(first, tps, tps_ci),
    }


def _cell_header(cell: CellData) -> dict:
    counts: dict[str, int] = {}
    for r in cell.runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    pending = max(0, cell.expected_runs - len(cell.runs))
    if pending:
        counts["pending"] = pending
    return {
        "framework": cell.framework, "recipe": cell.recipe, "precision": cell.precision,
        "status": _status_text(counts), "counts": counts,
        "runs": [{"dir": _relative(r.run_dir, cell.root), "seed": r.config.get("seed"), "status": r.status,
                  "error": (r.run.get("error") or "").splitlines()[0] if r.run.get("error") else None}
                 for r in cell.runs],
        "n_ok": counts.get("ok", 0), "n_runs": len(cell.runs) + pending,
        "tokens_per_s": None, "step_ms": None, "flops": None, "memory": None,
        "compile_s": None, "final_loss": None, "eval_loss": None, "perplexity": None,
        "precision_info": None, "framework_info": None, "timing_method": None,
        "loss_curve": None, "eval_curve": None,
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


def _cell_flops(run: dict, tps: float, tps_ci: tuple[float, float]) -> dict:
    """TFLOP/s and MFU of the cell's tokens/s, with the run's own FLOPs/token and peaks."""
    table = _flops_table(run)
    out = {}
    for name, row in table.items():
        per_token = row["flops_per_token"]
        tflops = achieved_tflops(tps, per_token)
        entry = {"flops_per_token": per_token, "tflops": tflops,
                 "tflops_ci": [achieved_tflops(x, per_token) for x in tps_ci]}
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
    ``parallax.flops`` and every MFU is None."""
    flops = run.get("flops") if isinstance(run.get("flops"), dict) else {}
    stored = flops.get("accountings", flops)
    denominators = flops.get("denominators_tflops")
    cfg = RunConfig.from_dict(run["config"])
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


def _cell_memory(ok: list[LoadedRun]) -> dict:
    out = {}
    for key in ("peak_allocated_bytes", "peak_reserved_bytes"):
        values = [r.run.get("memory", {}).get(key) for r in ok]
        values = [v for v in values if v is not None]
        out[key] = max(values) if values else None
    return out


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
                                          seed=_cell_seed(cell.framework, cell.recipe, "loss"))
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


def speedups(cells: dict, level: float) -> list[dict]:
    out = []
    for (fw, rec), cell in cells.items():
        for base_name in _baselines(fw, rec, cell.precision):
            base = cells.get((fw, base_name))
            if _has_speed(cell) and _has_speed(base):
                out.append({"kind": "precision", "framework": fw, "a": rec, "b": base_name,
                            "label": f"{fw}: {rec} over {base_name}", **_ratio(cell, base, level)})
    for (fw, rec), cell in cells.items():
        base = cells.get((BASELINE_FRAMEWORK, registry.default_name(BASELINE_FRAMEWORK, cell.precision)))
        if fw != BASELINE_FRAMEWORK and rec == registry.default_name(fw, cell.precision) \
                and _has_speed(cell) and _has_speed(base):
            out.append({"kind": "framework", "precision": cell.precision, "a": fw, "b": BASELINE_FRAMEWORK,
                        "recipes": [rec, base.recipe],
                        "label": f"{cell.precision}: {fw} over {BASELINE_FRAMEWORK}", **_ratio(cell, base, level)})
    return out


def _format_of(framework: str, recipe: str) -> str:
    """The format of a recipe by name (a name that is a format is its own)."""
    if recipe in PRECISIONS:
        return recipe
    try:
        return registry.get(framework, recipe).format
    except ParallaxError:
        return recipe


def _baselines(framework: str, recipe: str, fmt: str) -> list[str]:
    """What a cell's speed and loss are compared with: its framework's bf16 recipe, and the
    bf16 recipe of its own backend where that is another one (te-fp8-* over te-bf16)."""
    plain = registry.default_name(framework, BASELINE_PRECISION)
    out = [] if recipe == plain else [plain]
    try:
        own = registry.get(framework, recipe)
    except ParallaxError:
        return out
    same = [r.name for r in registry.of_framework(framework)
            if r.backend == own.backend and r.format == BASELINE_PRECISION and r.name not in (recipe, plain)]
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
    out = []
    for (fw, rec), cell in cells.items():
        base_name = registry.default_name(fw, BASELINE_PRECISION)
        base = cells.get((fw, base_name))
        if cell.precision == BASELINE_PRECISION or base is None:
            continue
        diff = loss_difference(cell, base, n_boot, level)
        if diff is not None:
            out.append({"framework": fw, "recipe": rec, "precision": cell.precision, "baseline": base_name, **diff})
    return out


def eval_deltas(cells: dict, n_boot: int, level: float) -> list[dict]:
    """Validation loss of each low-precision cell minus its framework's bf16 at every evaluation
    step both have, and at the step where the bf16 validation loss is lowest: on a small corpus
    trained for many epochs the training loss goes to ~0 for every recipe (memorised) and only
    the validation loss still tells the recipes apart. Every recipe sees the same validation
    batches, so where runs recorded each batch's loss (and share a seed) the difference is
    paired batch by batch and its interval bootstraps those differences; otherwise the means
    are compared, with no interval."""
    out = []
    for (fw, rec), cell in cells.items():
        base = cells.get((fw, registry.default_name(fw, BASELINE_PRECISION)))
        if cell.precision == BASELINE_PRECISION or base is None:
            continue
        mine, theirs = cell.record.get("eval_curve"), base.record.get("eval_curve")
        if not mine or not theirs:
            continue
        ours, bf16 = dict(zip(mine["step"], mine["loss"])), dict(zip(theirs["step"], theirs["loss"]))
        steps = sorted(set(ours) & set(bf16))
        if not steps:
            continue
        best = min(steps, key=lambda k: bf16[k])
        paired = _paired_batch_differences(cell, base)
        cis = [_batch_ci(paired.get(k), n_boot, level, _cell_seed(fw, rec, "eval", str(k))) for k in steps]
        out.append({"framework": fw, "recipe": rec, "precision": cell.precision, "baseline": base.recipe,
                    "steps": steps, "delta": [ours[k] - bf16[k] for k in steps], "ci": cis,
                    "batches": len(paired.get(best, [])) or None,
                    "best_step": best, "best_baseline_loss": bf16[best], "delta_at_best": ours[best] - bf16[best],
                    "ci_at_best": cis[steps.index(best)]})
    return out


def _batch_losses(cell: CellData) -> dict:
    """{(seed, step): [each run's batch losses]} of a cell's ok runs that recorded them."""
    found: dict = {}
    for r in cell.ok:
        for e in r.run.get("eval") or []:
            if e.get("batch_losses"):
                found.setdefault((r.config.get("seed", 0), int(e["step"])), []).append(e["batch_losses"])
    return found


def _paired_batch_differences(a: CellData, b: CellData) -> dict:
    """{step: the batch-by-batch differences a − b, pooled over the seeds both ran}."""
    ours, theirs = _batch_losses(a), _batch_losses(b)
    out: dict = {}
    for key in sorted(set(ours) & set(theirs)):
        mine, base = np.mean(ours[key], axis=0), np.mean(theirs[key], axis=0)
        if mine.shape == base.shape:
            out.setdefault(key[1], []).extend((mine - base).tolist())
    return out


def _batch_ci(diffs, n_boot: int, level: float, seed: int) -> list[float] | None:
    """Percentile bootstrap interval of the mean of paired batch differences (two or more)."""
    if not diffs or len(diffs) < 2:
        return None
    values = np.asarray(diffs, dtype=np.float64)
    rng = np.random.default_rng(seed)
    reps = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    return list(stats.percentile_ci(reps, level))


def conclusions(cells: dict, deltas: list[dict], level: float) -> dict:
    """The fastest stack (framework and recipe) at each format and what each recipe costs in loss."""
    fastest = []
    precisions = sorted({c.precision for c in cells.values()}, key=_order(PRECISIONS))
    for p in precisions:
        ranked = sorted((c for c in cells.values() if c.precision == p and _has_speed(c)),
                        key=lambda c: -c.record["tokens_per_s"]["value"])
        if not ranked:
            continue
        entry = {"precision": p, "framework": ranked[0].framework, "recipe": ranked[0].recipe,
                 "tokens_per_s": ranked[0].record["tokens_per_s"]["value"],
                 "native": _native(ranked[0]), "runner_up": None}
        if len(ranked) > 1:
            entry["runner_up"] = f"{ranked[1].framework} {ranked[1].recipe}"
            entry.update(_ratio(ranked[0], ranked[1], level))
        fastest.append(entry)
    emulated = [{"framework": fw, "recipe": rec, "precision": c.precision} for (fw, rec), c in cells.items()
                if c.ok and _native(c) is False]
    not_ok = [{"framework": fw, "recipe": rec, "precision": c.precision, "status": c.record["status"]}
              for (fw, rec), c in cells.items() if c.record["status"] != "ok"]
    return {"fastest": fastest, "loss_cost": deltas, "emulated": emulated, "not_ok": not_ok}


def _native(cell: CellData):
    info = cell.record.get("precision_info") or {}
    return info.get("native")


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
            level: float = stats.DEFAULT_LEVEL) -> Analysis:
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
        analyse_cell(cell, n_boot, level)
    environment = _read_json(results_dir / ENVIRONMENT_FILE, corrupt)
    problems = [c.message for c in corrupt]
    index_problem = _index_problem(results_dir)
    if index_problem:
        problems.append(index_problem)
    if environment is None:
        environment = next((r.run["environment"] for r in runs if r.run.get("environment")), {})
    gpus = sorted({environment_summary(r.run["environment"])["gpu"] for r in runs if r.run.get("environment")})
    if len(gpus) > 1:  # e.g. a matrix resumed on another machine
        problems.append(f"the runs were made on different GPUs ({'; '.join(gpus)}); their numbers are not "
                        "one benchmark")
    return Analysis(results_dir, cells, config, matrix, environment, problems, corrupt)


def _group(runs: list[LoadedRun], matrix: dict | None, root: Path) -> dict:
    """Cells grouped by format (bf16, fp8, nvfp4), then framework in the matrix's order, the
    framework's default recipe first; pending ones included."""
    formats = {cell_key(r.config): r.config["precision"] for r in runs}
    expected = 0
    if matrix:
        formats.update({(fw, rec): fmt for fw, rec, fmt in _matrix_cells(matrix)})
        expected = len(matrix["seeds"]) * matrix["repeats"]
    fws = list(matrix["frameworks"]) if matrix else list(FRAMEWORKS)

    def order(key):
        fw, rec = key
        return _order(list(PRECISIONS))(formats[key]), _order(fws)(fw), rec != registry.default_name(fw, formats[key]), rec

    cells = {k: CellData(k[0], k[1], formats[k], [], expected, root) for k in sorted(formats, key=order)}
    for r in runs:
        cells[cell_key(r.config)].runs.append(r)
    return cells


def _matrix_cells(matrix: dict) -> list[tuple[str, str, str]]:
    """(framework, recipe, format) of every cell of a matrix.json (schema 1 listed formats)."""
    if "cells" in matrix:
        return [tuple(c) for c in matrix["cells"]]
    return [(fw, p, p) for fw in matrix["frameworks"] for p in matrix["precisions"]]


def build_comparison(results_dir: Path, baseline_dir: Path | None = None,
                     n_boot: int = stats.DEFAULT_BOOTSTRAPS, level: float = stats.DEFAULT_LEVEL) -> dict:
    """The comparison record of ``results_dir`` (and its ratios to ``baseline_dir``)."""
    current = analyse(results_dir, n_boot, level)
    speedup_list = speedups(current.cells, level)
    deltas = loss_deltas(current.cells, n_boot, level)
    record = {
        "schema": SCHEMA,
        "results_dir": str(current.results_dir),
        "environment": current.environment,
        "config": current.config,
        "matrix": current.matrix,
        "cells": [c.record for c in current.cells.values()],
        "speedups": speedup_list,
        "loss_deltas": deltas,
        "eval_deltas": eval_deltas(current.cells, n_boot, level),
        "conclusions": conclusions(current.cells, deltas, level),
        "problems": list(current.problems),
        "corrupt": [c.message for c in current.corrupt],
        "statistics": {"method": STATS_METHOD.format(n_boot=n_boot), "bootstraps": n_boot,
                       "level": level, "smooth_window": SMOOTH_WINDOW,
                       "primary_accounting": PRIMARY_ACCOUNTING},
        "baseline": None,
    }
    if baseline_dir is not None:
        base = analyse(baseline_dir, n_boot, level)
        record["baseline"] = baseline_comparison(current, base, n_boot, level)
        record["problems"] += [f"baseline: {p}" for p in base.problems]
        record["corrupt"] += [f"baseline: {c.message}" for c in base.corrupt]
    return record


def baseline_comparison(current: Analysis, base: Analysis, n_boot: int, level: float) -> dict:
    """Each cell against the same cell of another results directory (another GPU, version)."""
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
        row = {"framework": key[0], "recipe": key[1], "precision": cell.precision,
               "tokens_per_s": _ratio(cell, other, level),
               "step_ms_ratio": cell.record["step_ms"]["median"] / other.record["step_ms"]["median"],
               "memory_ratio": _safe_ratio(cell.record["memory"]["peak_reserved_bytes"],
                                           other.record["memory"]["peak_reserved_bytes"])}
        row["loss_difference"] = loss_difference(cell, other, n_boot, level) if same_steps else None
        rows.append(row)
    return {"results_dir": str(base.results_dir), "rows": rows, "notes": notes,
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
    return {
        "gpu": ", ".join(f"{g.get('name')} (cc {g.get('compute_capability')})" for g in gpus) or "none found",
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
