"""The benchmark matrix: every cell in its own process, results on disk, resumable.

Layout of an output directory::

    matrix.json           the matrix configuration; a resumed run must match it
    environment.json      the machine and library versions, collected once
    index.json            every cell with its status (derived from the run folders)
    runs/<cell id>/       run.json, steps.jsonl and run.log of one cell

A cell is one ``parallax train`` process (``sys.executable -m parallax train ...``), so the GPU
memory of one framework is released before the next starts and a crash, an out-of-memory
error or a hang ends only that cell. JAX is told not to preallocate GPU memory. The outcome
of each cell is a ``run.json`` (see ``parallax.store.results``): written by the training process when
it gets that far, otherwise by the runner (skipped, oom, failed with the tail of the log,
timeout). A cell counts as done once its ``run.json`` is valid, so after the runner is killed
(even with SIGKILL) ``resume=True`` runs only the cells without one.

A cell is (framework, recipe) for one seed and repeat: ``--precisions fp8`` gives each
framework's default fp8 recipe, ``--recipes`` names others (``precision.registry.select``), so
TE delayed, TE current and torchao are separate cells of one matrix. After each cell the loss
guard compares every low-precision cell with its bf16 twin (same framework, seed, repeat):
a final loss more than ``max_loss_gap`` nats worse is recorded as failed, measurements kept.

Several GPUs: ``gpus`` is an axis of the matrix (``--gpus 1,2``), so one matrix holds the 1-GPU
and N-GPU cells of each recipe and the report can state the scaling. An N-GPU cell is still one
``parallax train --config`` process: that process launches its ranks (``parallax.run.distributed``),
and the cell's timeout ends them with it (they die with their launcher).

Cells run in the order repeat → seed → GPUs → framework → recipe: the repeats of a cell are
spread over the whole session instead of back to back, so slow drifts (clocks, temperature) do
not fall on one cell.

``concurrent > 1`` runs that many cells at once on the same GPU: for studies of loss alone
(convergence), where the start-up and compilation of one cell can overlap the steps of
another. Their step times are then not measurements: the runner stamps each such run.json
with ``timing.concurrent_runs`` and the report shows no throughput for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from parallax import __version__
from parallax.analysis import comparability
from parallax.native import lifeline
from parallax.run import progress_file
from parallax.store.archive import ARCHIVE_FILE, unpack
from parallax.store.files import make_folder, streaming
from parallax.store.lock import locked
from parallax.spec.config import FRAMEWORKS, PRECISIONS, RunConfig
from parallax.store.timestamps import utc_now
from parallax.errors import ParallaxError
from parallax.spec import config_schema, registry
from parallax.spec import tuning as tuning_spec
from parallax.store.results import (  # noqa: F401 (the layout constants, re-exported for callers)
    CELL_FIELDS,
    CONFIG_FILE,
    ENVIRONMENT_FILE,
    INDEX_FILE,
    INDEX_SCHEMA,
    LOG_FILE,
    MATRIX_FILE,
    RUN_FILE,
    RUNS_DIR,
    STEPS_FILE,
    atomic_write_json,
    differences,
    load_run,
    load_steps,
    write_run,
)
from parallax.run.train import EXIT_BAD_INPUT, EXIT_OOM  # what `parallax train` exits with

MATRIX_SCHEMA = "parallax.matrix/2"
MODES = ("throughput", "convergence")
PROGRESS_FILE = "progress.jsonl"
LOG_TAIL_LINES = 40
DEFAULT_MAX_LOSS_GAP = 0.25  # nats, final smoothed loss against the bf16 twin
# Frameworks that can run eagerly. JAX always compiles its step with XLA (its engine refuses
# --no-compile), so the benchmark's --no-compile applies to these only.
EAGER_FRAMEWORKS = ("torch",)


@dataclass(frozen=True)
class Cell:
    framework: str
    recipe: str  # the recipe's name in the registry
    seed: int
    repeat: int
    precision: str = "bf16"  # the recipe's format
    gpus: int = 1
    tuning: str = tuning_spec.DEFAULT  # the knob set (spec/tuning.py)

    @property
    def id(self) -> str:
        """``{framework}-{recipe}-seed{s}-rep{r}``, with ``+{tuning}`` after the recipe for a knob
        set other than default and ``-g{N}`` for N > 1 GPUs (the id of a 1-GPU default cell is
        the one of results made before these axes existed)."""
        knobs = f"+{self.tuning}" if self.tuning != tuning_spec.DEFAULT else ""
        gpus = f"-g{self.gpus}" if self.gpus != 1 else ""
        return f"{self.framework}-{self.recipe}{knobs}{gpus}-seed{self.seed}-rep{self.repeat}"

    @property
    def label(self) -> str:
        knobs = f" [{self.tuning}]" if self.tuning != tuning_spec.DEFAULT else ""
        gpus = f" {self.gpus} GPUs" if self.gpus != 1 else ""
        return f"{self.framework} {self.recipe}{knobs}{gpus} seed {self.seed} rep {self.repeat}"


@dataclass(frozen=True)
class Matrix:
    """What a benchmark runs: frameworks × recipes × GPU counts × seeds × repeats of one RunConfig.
    ``recipes`` are selectors: a format (each framework's default recipe of it), a recipe
    name, ``all`` or ``FORMAT:all`` (``precision.registry.select``)."""

    frameworks: tuple[str, ...]
    recipes: tuple[str, ...]
    seeds: tuple[int, ...] = (0,)
    repeats: int = 1
    base: RunConfig = field(default_factory=RunConfig)
    max_loss_gap: float = DEFAULT_MAX_LOSS_GAP
    concurrent: int = 1  # cells at once on the GPU; above 1 their throughput is not measured
    gpus: tuple[int, ...] = (1,)  # GPUs per cell (resolved counts); base.batch_size is per GPU
    mode: str = "throughput"  # or "convergence": held-out evaluation, seeds paired, the loss penalty
    # Knob sets (spec/tuning.py): "FRAMEWORK:NAME" for one framework, a bare name for every one;
    # a framework none names runs default. A knob set its recipe cannot take makes no cell.
    tunings: tuple[str, ...] = (tuning_spec.DEFAULT,)

    @property
    def precisions(self) -> tuple[str, ...]:
        """The formats of the matrix's recipes, in report order."""
        found = {r.format for r in self.recipe_list()}
        return tuple(p for p in PRECISIONS if p in found)

    def recipe_list(self):
        return registry.select(self.frameworks, self.recipes)

    def validate(self) -> "Matrix":
        for name, values, known in (("--frameworks", self.frameworks, FRAMEWORKS),
                                    ("--precisions/--recipes", self.recipes, PRECISIONS)):
            if not values:
                raise ParallaxError(f"{name} is empty; choose from: {', '.join(known)}")
            _no_duplicates(name, values)
        from parallax.engines import check_engine

        for fw in self.frameworks:
            check_engine(fw)
        if not self.recipe_list():
            raise ParallaxError(f"no recipe of {', '.join(self.recipes)} exists for {', '.join(self.frameworks)}")
        for name in ("max_loss_gap", "repeats", "concurrent"):  # spec/config_schema.RANGES
            config_schema.check_option(name, getattr(self, name))
        if not self.seeds:
            raise ParallaxError("--seeds is empty; give at least one seed, e.g. --seeds 0")
        _no_duplicates("--seeds", self.seeds)
        if any(s < 0 for s in self.seeds):
            raise ParallaxError(f"--seeds must not be negative, got {list(self.seeds)}")
        too_large = next((s for s in self.seeds if config_schema.RANGES["seed"].above(s)), None)
        if too_large is not None:
            raise ParallaxError(f"--seeds {config_schema.RANGES['seed'].above(too_large)}, got {too_large}")
        if not self.gpus:
            raise ParallaxError("--gpus is empty; give at least one count, e.g. --gpus 1")
        _no_duplicates("--gpus", self.gpus)
        if any(not isinstance(n, int) or n < 1 for n in self.gpus):
            raise ParallaxError(f"--gpus counts must be at least 1, got {list(self.gpus)}")
        self._check_mode()
        self._check_tunings()
        first = [c for c in self.cells() if (c.seed, c.repeat) == (self.seeds[0], 0)]
        for cell in first:
            self.run_config(cell, Path(".")).validate()
        return self

    def _check_tunings(self) -> None:
        """Every entry of --tunings a knob set of a framework of the matrix."""
        _no_duplicates("--tunings", self.tunings)
        for entry in self.tunings:
            framework, _, name = entry.rpartition(":")
            if framework and framework not in self.frameworks:
                raise ParallaxError(f"--tunings {entry}: {framework} is not among --frameworks "
                                    f"({', '.join(self.frameworks)}); drop it or add the framework")
            for fw in [framework] if framework else self.frameworks:
                if name != tuning_spec.TUNED_NAME:
                    tuning_spec.get(fw, name)
        for recipe in self.recipe_list():
            names = tuning_spec.of_framework(self.tunings, recipe.framework)
            if not any(tuning_spec.takes(recipe, n) for n in names):
                tuning_spec.resolve(recipe.framework, recipe, names[0])  # its one-line reason


    def _check_mode(self) -> None:
        """A convergence benchmark evaluates on held-out real tokens: its penalty is a validation
        loss paired by seed."""
        if self.mode not in MODES:
            raise ParallaxError(f"unknown benchmark mode '{self.mode}'; choose one of: {', '.join(MODES)}")
        if self.mode != "convergence":
            return
        if self.base.synthetic:
            raise ParallaxError("--convergence needs real tokens with a held-out split: pass --data PATH or --hf")
        if self.base.eval_every <= 0:
            raise ParallaxError("--convergence needs evaluation: pass --eval-every N (steps between evaluations)")

    def cells(self) -> list[Cell]:
        recipes = [(r, t) for r in self.recipe_list() for t in tuning_spec.of_framework(self.tunings, r.framework)
                   if tuning_spec.takes(r, t)]
        return [Cell(r.framework, r.name, seed, rep, r.format, gpus, t)
                for rep in range(self.repeats) for seed in self.seeds for gpus in self.gpus for r, t in recipes]

    def run_config(self, cell: Cell, run_dir: Path) -> RunConfig:
        compile_ = self.base.compile or cell.framework not in EAGER_FRAMEWORKS
        # --cuda-graphs on requires graphs of the cells whose recipe can capture them; the
        # others (plain torch, torchao, JAX) have none and run without, as JAX ignores --no-compile.
        graphs = self.base.cuda_graphs
        if graphs == "on" and not registry.get(cell.framework, cell.recipe).cuda_graphs:
            graphs = "off"
        return self.base.replace(framework=cell.framework, precision=cell.precision, recipe=cell.recipe,
                                 seed=cell.seed, output_dir=str(run_dir), compile=compile_, cuda_graphs=graphs,
                                 gpus=cell.gpus, tuning=cell.tuning)

    def to_dict(self) -> dict:
        run = {k: v for k, v in self.base.to_dict().items() if k not in CELL_FIELDS}
        tunings = {"tunings": list(self.tunings)} if self.tunings != (tuning_spec.DEFAULT,) else {}
        return {"schema": MATRIX_SCHEMA, **tunings, "frameworks": list(self.frameworks),
                "recipes": list(self.recipes), "seeds": list(self.seeds),
                "repeats": self.repeats, "max_loss_gap": self.max_loss_gap, "concurrent": self.concurrent,
                "gpus": list(self.gpus), "mode": self.mode,
                "cells": [[r.framework, r.name, r.format] for r in self.recipe_list()], "run": run}

    @classmethod
    def from_dict(cls, data: dict) -> "Matrix":
        recipes = data.get("recipes") or data["precisions"]  # schema 1 named formats only
        return cls(tuple(data["frameworks"]), tuple(recipes), tuple(data["seeds"]),
                   int(data["repeats"]), RunConfig.from_dict(data["run"]),
                   float(data.get("max_loss_gap", DEFAULT_MAX_LOSS_GAP)), int(data.get("concurrent", 1)),
                   tuple(int(n) for n in data.get("gpus", (1,))), str(data.get("mode", "throughput")),
                   tuple(data.get("tunings", (tuning_spec.DEFAULT,))))


def _no_duplicates(name: str, values) -> None:
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise ParallaxError(f"{name} lists {seen[0]!r} twice; list each once")


@dataclass
class CellResult:
    cell: Cell
    status: str  # ok | failed | oom | timeout | skipped | interrupted | pending
    run_dir: Path
    error: str | None = None
    elapsed_s: float | None = None
    reused: bool = False  # finished by an earlier session (resume)

    def index_entry(self, output_dir: Path) -> dict:
        return {"id": self.cell.id, "framework": self.cell.framework, "recipe": self.cell.recipe,
                "precision": self.cell.precision, "gpus": self.cell.gpus, "seed": self.cell.seed,
                "repeat": self.cell.repeat, "tuning": self.cell.tuning, "status": self.status,
                "dir": str(self.run_dir.relative_to(output_dir)),
                "error": self.error.splitlines()[0] if self.error else None,
                "elapsed_s": self.elapsed_s}


class Display(Protocol):
    """Receives the matrix's progress; the CLI draws it, tests may record it."""

    def matrix_started(self, matrix: Matrix, results: list[CellResult]) -> None: ...
    def cell_started(self, cell: Cell) -> None: ...
    def cell_progress(self, cell: Cell, record: dict) -> None: ...
    def cell_finished(self, result: CellResult) -> None: ...
    def warning(self, text: str) -> None: ...
    def matrix_finished(self, results: list[CellResult]) -> None: ...


class NullDisplay:
    def matrix_started(self, matrix, results): pass
    def cell_started(self, cell): pass
    def cell_progress(self, cell, record): pass
    def cell_finished(self, result): pass
    def warning(self, text): pass
    def matrix_finished(self, results): pass


CommandFor = Callable[[RunConfig, Path], list[str]]


def train_command(run: RunConfig, run_dir: Path) -> list[str]:
    """The ``parallax train`` command line of one cell: its configuration travels as a file
    (``run_cell`` writes ``config.json`` into the cell's folder first). ``--overwrite``: the
    runner owns its cells, which ``train`` refuses to a user without it."""
    return [sys.executable, "-m", "parallax", "train", "--config", str(run_dir / CONFIG_FILE), "--overwrite"]


def write_cell_config(run_dir: Path, run: RunConfig) -> None:
    """The cell's RunConfig as the file ``parallax train --config`` reads."""
    atomic_write_json(run_dir / CONFIG_FILE, run.replace(output_dir=str(run_dir)).to_dict())


def child_env(progress_path: Path | None = None) -> dict:
    env = lifeline.name_runner(dict(os.environ))  # the cell dies with this process
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # JAX must not claim 75% of the GPU up front
    env["PYTHONUNBUFFERED"] = "1"  # the log is complete up to a crash
    if progress_path is not None:
        env[progress_file.ENV_VAR] = str(progress_path)
    return env


# ----------------------------------------------------------------------------- output directory

# What a resumed benchmark may add to: more frameworks, recipes, seeds or repeats, so more runs (the rest stays)
EXTENSIBLE_KEYS = ("frameworks", "recipes", "cells", "seeds", "repeats", "tunings")


def check_matrix_file(output_dir: Path, matrix: Matrix, resume: bool,
                      display: Display | None = None) -> None:
    """Write matrix.json, or make sure the one there is this matrix and --resume was given. With
    --resume the matrix may also extend the stored one by more runs (a framework, recipe, seed or
    repeat added, everything else the same): matrix.json is then rewritten and the new runs run."""
    path = output_dir / MATRIX_FILE
    wanted = json.loads(json.dumps(matrix.to_dict()))
    if not path.exists():
        atomic_write_json(path, wanted)
        return
    try:
        stored = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ParallaxError(f"{path} is corrupt; choose another --output-dir") from None
    if isinstance(stored, dict):
        stored.setdefault("concurrent", 1)  # written before --concurrent existed
        stored.setdefault("gpus", [1])  # ... and before the GPU axis
        stored.setdefault("mode", "throughput")  # ... and before modes
        if isinstance(stored.get("run"), dict):  # RunConfig fields added since take their defaults
            defaults = {k: v for k, v in RunConfig().to_dict().items() if k not in CELL_FIELDS}
            stored["run"] = {**{k: v for k, v in defaults.items() if k not in stored["run"]}, **stored["run"]}
    added = added_cells(stored, wanted, matrix.cells())
    if added and resume:
        names = list(dict.fromkeys(f"{c.framework} {c.recipe}" for c in added))
        (display or NullDisplay()).warning(
            f"{output_dir}: extending the benchmark by {len(added)} run(s) of {', '.join(names)}; "
            "the runs already there are kept")
        atomic_write_json(path, wanted)
        return
    if stored != wanted:
        diff = differences(stored, wanted)
        raise ParallaxError(
            f"{output_dir} holds results of a different benchmark configuration (differs in: "
            f"{', '.join(diff)}); choose another --output-dir, or repeat the original flags with --resume")
    if not resume:
        raise ParallaxError(
            f"{output_dir} already holds results of this benchmark; add --resume to run only "
            "the missing cells, or choose another --output-dir")


def added_cells(stored, wanted: dict, cells: list[Cell]) -> list[Cell]:
    """The runs of ``cells`` (the matrix ``wanted`` describes) that ``stored`` lacks, when the
    matrix only adds runs (every other key equal, every stored run still one of its runs);
    otherwise []."""
    if not isinstance(stored, dict) or any(stored.get(k) != wanted.get(k) for k in
                                           set(stored) | set(wanted) if k not in EXTENSIBLE_KEYS):
        return []
    try:
        old = {c.id for c in Matrix.from_dict(stored).cells()}
    except (KeyError, TypeError, ValueError, ParallaxError):
        return []
    if not old <= {c.id for c in cells}:
        return []
    return [c for c in cells if c.id not in old]


ENV_SNIPPET = ("import json, sys\nfrom parallax.plan.envinfo import environment\n"
               "json.dump(environment(), sys.stdout, default=str)\n")


def collect_environment(timeout_s: float = 300) -> dict:
    """The environment, gathered in a child process so this one never touches the GPU."""
    env = {"collected_at": utc_now(), "parallax_version": __version__,
           "python": platform.python_version(), "platform": platform.platform()}
    try:
        proc = subprocess.run([sys.executable, "-c", ENV_SNIPPET], capture_output=True, text=True,
                              timeout=timeout_s, env=child_env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {**env, "error": f"parallax.plan.envinfo did not answer within {timeout_s:.0f} s"}
    if proc.returncode == 0:
        try:
            return {**env, **json.loads(proc.stdout)}
        except json.JSONDecodeError:
            pass
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {**env, "error": f"parallax.plan.envinfo failed: {last}"}


def write_environment(output_dir: Path, environment: Callable[[], dict], display: Display | None = None) -> None:
    """environment.json, once; a resumed benchmark on another machine (other GPUs or host) is
    warned before any cell runs: the report will refuse ratios between its old and new cells."""
    path = output_dir / ENVIRONMENT_FILE
    if not path.exists():
        atomic_write_json(path, environment(), default=str)
        return
    try:
        stored = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return  # compare names a corrupt environment.json; the runs carry their own
    before, now = comparability.host_label(stored), comparability.host_label(environment())
    if before != now:
        (display or NullDisplay()).warning(
            f"{output_dir} was started on {before}, this is {now}: the report refuses ratios between cells of "
            "two machines; run every cell here (a new --output-dir), or the bf16 twins here too and compare "
            "with --cross-machine")


def write_index(output_dir: Path, matrix: Matrix, results: list[CellResult]) -> None:
    index = {"schema": INDEX_SCHEMA, "updated_at": utc_now(), "matrix": MATRIX_FILE,
             "environment": ENVIRONMENT_FILE,
             "counts": {s: sum(r.status == s for r in results)
                        for s in ("ok", "failed", "oom", "timeout", "skipped", "interrupted", "pending")},
             "cells": [r.index_entry(output_dir) for r in results]}
    atomic_write_json(output_dir / INDEX_FILE, index)


def scan(output_dir: Path, matrix: Matrix, display: Display) -> list[CellResult]:
    """What is already on disk: cells with a valid run.json are done, the rest pending; an
    interrupted cell (Ctrl-C or SIGTERM stopped its ``train``) is pending too: it runs again."""
    results = []
    for cell in matrix.cells():
        run_dir = output_dir / RUNS_DIR / cell.id
        result = CellResult(cell, "pending", run_dir)
        if (run_dir / RUN_FILE).exists():
            try:
                run = load_run(run_dir)
                if run["status"] == "ok":
                    _require_steps(run_dir)
                if run["status"] == "interrupted":
                    results.append(result)
                    continue
                result = CellResult(cell, run["status"], run_dir, run.get("error"),
                                    run.get("elapsed_s"), reused=True)
            except ParallaxError as exc:
                display.warning(f"{exc} (the cell will run again)")
        results.append(result)
    return results


def _require_steps(run_dir: Path) -> None:
    """An ok result is complete only with its steps."""
    try:
        load_steps(run_dir)
    except FileNotFoundError:
        raise ParallaxError(f"{run_dir / STEPS_FILE}: missing beside an ok run.json") from None


# ----------------------------------------------------------------------------- one cell

class Stopped(Exception):
    """The matrix is ending (an error or Ctrl-C in the runner): a concurrent cell stops."""


def run_cell(cell: Cell, run: RunConfig, run_dir: Path, command: list[str],
             timeout_s: float | None, display: Display, poll_s: float = 0.25,
             stop: threading.Event | None = None) -> CellResult:
    """Run one cell's process to its end (or its timeout) and record the outcome."""
    shutil.rmtree(run_dir, ignore_errors=True)  # leftovers of a killed attempt
    make_folder(run_dir, "--output-dir")
    write_cell_config(run_dir, run)
    progress_path = run_dir / PROGRESS_FILE
    started, t0 = utc_now(), time.monotonic()
    try:
        with _log_file(run_dir / LOG_FILE) as log:
            try:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=child_env(progress_path),
                                        start_new_session=True)
            except OSError as exc:  # e.g. the interpreter vanished: this cell fails, the matrix goes on
                info = {"started_at": started, "finished_at": utc_now(), "elapsed_s": 0.0, "exit_code": None}
                status, error = _write_outcome(run_dir, run, "failed", f"could not start {command[0]}: {exc}",
                                               info, with_tail=False)
                return CellResult(cell, status, run_dir, error, 0.0)
            try:
                timed_out, last_step = _wait(proc, cell, t0, timeout_s, progress_path, display, poll_s, stop)
            except BaseException as exc:  # Ctrl-C, SIGTERM (run/interrupt.py) or the matrix ending: the cell stops
                _kill_group(proc)  # SIGTERM first: a cell that had started keeps its steps in its own run.json
                _record_stop(run_dir, run, exc, started, t0, proc.returncode)
                raise
    finally:  # also when the log cannot be kept (a full disk): the progress file goes with the cell
        progress_path.unlink(missing_ok=True)
    elapsed = time.monotonic() - t0
    info = {"started_at": started, "finished_at": utc_now(), "elapsed_s": round(elapsed, 3),
            "exit_code": proc.returncode}
    if timed_out:
        where = f" after step {last_step + 1} of {run.steps}" if last_step is not None else ""
        status, error = "timeout", f"exceeded --timeout-per-run of {timeout_s:g} s{where}"
        _write_outcome(run_dir, run, status, error, info, with_tail=True)
    else:
        status, error = _outcome(proc.returncode, run, run_dir, info)
    return CellResult(cell, status, run_dir, error, round(elapsed, 3))


def _log_file(path: Path):
    """The cell's run.log, open for its process to write: streamed beside it and renamed into
    place when the cell ends, however it ends (``files.streaming``)."""
    return streaming(path, "--output-dir", binary=True)


def _record_stop(run_dir: Path, run: RunConfig, exc: BaseException, started: str, t0: float, code) -> None:
    """The run.json of a cell stopped with the matrix: its own where it wrote one (an interrupted
    ``train`` keeps its steps), else one of status ``interrupted``; ``scan`` runs it again on
    --resume."""
    if _try_load(run_dir) is not None:
        return
    name = getattr(exc, "name", None) if isinstance(exc, KeyboardInterrupt) else None
    name = name or ("SIGINT" if isinstance(exc, KeyboardInterrupt) else None)
    reason = f"interrupted by {name}" if name else "interrupted: the benchmark stopped"
    write_run(run_dir, {"status": "interrupted", "error": f"{reason} before the cell finished",
                        **({"signal": name} if name else {}), "config": run.to_dict(), "started_at": started,
                        "finished_at": utc_now(), "elapsed_s": round(time.monotonic() - t0, 3), "exit_code": code})


def _wait(proc, cell, t0, timeout_s, progress_path, display, poll_s, stop=None):
    offset, last_step = 0, None
    while True:
        if stop is not None and stop.is_set():
            raise Stopped(cell.label)
        done = proc.poll() is not None
        records, offset = progress_file.read_new(progress_path, offset)
        for record in records:
            last_step = record.get("step", last_step)
            display.cell_progress(cell, record)
        if done:
            return False, last_step
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            _kill_group(proc)
            return True, last_step
        time.sleep(poll_s)


def _outcome(code: int, run: RunConfig, run_dir: Path, info: dict) -> tuple[str, str | None]:
    """Map the exit code of ``parallax train`` to a status, writing run.json where it is missing."""
    written = _try_load(run_dir)
    if code == 0:
        if written is not None and written["status"] == "ok":
            return "ok", None
        reason = "exited 0 without writing an ok run.json"
        return _write_outcome(run_dir, run, "failed", reason, info, with_tail=True)
    if code == EXIT_BAD_INPUT:
        return _write_outcome(run_dir, run, "skipped", _error_line(run_dir), info, with_tail=False)
    if code == EXIT_OOM:
        if written is not None and written["status"] == "oom":
            return "oom", written.get("error")
        return _write_outcome(run_dir, run, "oom", "out of memory (exit code 3)", info, with_tail=True)
    if written is not None and written["status"] in ("failed", "interrupted"):  # the cell said how it ended
        return written["status"], written.get("error")
    return _write_outcome(run_dir, run, "failed", _crash_reason(code, run_dir), info, with_tail=True)


def _write_outcome(run_dir, run, status, reason, info, with_tail) -> tuple[str, str]:
    tail = log_tail(run_dir / LOG_FILE) if with_tail else ""
    error = reason + (f"\n--- last lines of {LOG_FILE} ---\n{tail}" if tail else "")
    write_run(run_dir, {"status": status, "error": error, "config": run.to_dict(), **info})
    return status, error


def _try_load(run_dir: Path) -> dict | None:
    try:
        return load_run(run_dir)
    except ParallaxError:
        return None


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    # Progress bars redraw with carriage returns; keep only what was last on each line.
    rows = [row.rsplit("\r", 1)[-1] for row in text.splitlines()]
    return "\n".join(row for row in rows[-lines:]).strip()


def _error_line(run_dir: Path) -> str:
    """The reason ``parallax train`` gave on its ``parallax: error:`` line."""
    rows = log_tail(run_dir / LOG_FILE, lines=200).splitlines()
    for row in reversed(rows):
        if row.startswith("parallax: error:"):
            return row.removeprefix("parallax: error:").strip()
    last = next((r for r in reversed(rows) if r.strip()), "no reason given")
    return f"refused with exit code 2: {last.strip()}"


def _crash_reason(code: int, run_dir: Path) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (the host may have run out of memory)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    rows = [r for r in log_tail(run_dir / LOG_FILE).splitlines() if r.strip()]
    return f"exit code {code}: {rows[-1].strip()}" if rows else f"exit code {code}"


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """End the cell's process group: SIGTERM, then SIGKILL after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


# ----------------------------------------------------------------------------- the matrix

def run_matrix(matrix: Matrix, output_dir: Path, *, resume: bool = False,
               timeout_s: float | None = None, display: Display | None = None,
               command_for: CommandFor | None = None,
               environment: Callable[[], dict] = collect_environment,
               poll_s: float = 0.25) -> list[CellResult]:
    """Run every cell of ``matrix`` that has no result in ``output_dir`` yet; return all cells.

    ``command_for(run_config, run_dir)`` gives a cell's command line (default ``train_command``;
    tests substitute a fake trainer); ``environment()`` gives environment.json's content.
    """
    matrix.validate()
    config_schema.check_option("timeout_per_run", timeout_s)
    display = display or NullDisplay()
    command_for = command_for or train_command
    output_dir = Path(output_dir).resolve()
    held = next((name for name in (RUN_FILE, STEPS_FILE) if (output_dir / name).exists()), None)
    if held:  # before any cell: a train run's folder is not a benchmark's
        raise ParallaxError(f"{output_dir} holds a train run ({held}); pick a fresh --output-dir")
    output_dir = make_folder(output_dir, "--output-dir")
    with locked(output_dir, "parallax benchmark"):
        check_matrix_file(output_dir, matrix, resume, display)
        if (output_dir / ARCHIVE_FILE).exists():  # a packed benchmark runs on as plain files
            unpack(output_dir)
            display.warning(f"unpacked {ARCHIVE_FILE} to run the rest; pack it again with "
                            f"'parallax results pack {output_dir}'")
        write_environment(output_dir, environment, display)
        results = scan(output_dir, matrix, display)
        write_index(output_dir, matrix, results)
        display.matrix_started(matrix, results)

        def start(i: int, stop: threading.Event | None = None) -> CellResult:
            cell, run_dir = results[i].cell, results[i].run_dir
            run = matrix.run_config(cell, run_dir)
            display.cell_started(cell)
            return run_cell(cell, run, run_dir, command_for(run, run_dir), timeout_s, display, poll_s, stop)

        def finish(i: int, result: CellResult) -> None:
            results[i] = result
            if matrix.concurrent > 1:
                stamp_concurrent(result, matrix.concurrent)
            loss_gap_guard(results, matrix.max_loss_gap, display)
            write_index(output_dir, matrix, results)
            display.cell_finished(results[i])

        todo = [i for i, r in enumerate(results) if r.status == "pending"]
        try:
            if matrix.concurrent > 1:
                display = LockedDisplay(display)
                run_concurrently(todo, matrix.concurrent, start, finish)
            else:
                for i in todo:
                    finish(i, start(i))
        finally:  # a cell stopped with the matrix (Ctrl-C, SIGTERM) is counted as its run.json says
            results[:] = [_as_recorded(r) for r in results]
            write_index(output_dir, matrix, results)
        display.matrix_finished(results)
    return results


def _as_recorded(result: CellResult) -> CellResult:
    """A pending cell as its run.json records it, where it has one."""
    run = _try_load(result.run_dir) if result.status == "pending" else None
    if run is None:
        return result
    return CellResult(result.cell, run["status"], result.run_dir, run.get("error"), run.get("elapsed_s"))


def run_concurrently(todo: list[int], slots: int, start, finish) -> None:
    """Run ``start(i, stop)`` for each index of ``todo``, ``slots`` at a time and in order;
    ``finish(i, result)`` in this thread as each ends. An exception here (Ctrl-C) sets ``stop``,
    which ends the running cells' processes before it propagates."""
    stop = threading.Event()
    queue = iter(todo)
    with ThreadPoolExecutor(max_workers=slots) as pool:
        running = {}

        def submit_next() -> None:
            i = next(queue, None)
            if i is not None:
                running[pool.submit(start, i, stop)] = i

        for _ in range(slots):
            submit_next()
        try:
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    finish(running.pop(future), future.result())
                    submit_next()
        except BaseException:
            stop.set()
            raise


class LockedDisplay:
    """A display called from several cells' threads, one call at a time."""

    def __init__(self, inner: Display):
        self.inner, self.lock = inner, threading.Lock()

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        def locked_call(*args, **kwargs):
            with self.lock:
                return method(*args, **kwargs)
        return locked_call


def stamp_concurrent(result: CellResult, runs: int) -> None:
    """Record in the cell's run.json that it shared the GPU with up to ``runs`` runs."""
    run = _try_load(result.run_dir)
    if run is None or "timing" not in run:
        return
    run["timing"]["concurrent_runs"] = runs
    write_run(result.run_dir, run)


# ----------------------------------------------------------------------------- loss guard

def bf16_twin(cell: Cell, results: list[CellResult]) -> CellResult | None:
    """The cell of the same framework, GPU count, seed and repeat running the framework's bf16
    recipe: of the same knob set where the matrix has it, else of the default one."""
    twin = registry.default(cell.framework, "bf16")
    if twin is None or cell.precision == "bf16":
        return None
    for tuning in dict.fromkeys((cell.tuning, tuning_spec.DEFAULT)):
        key = (cell.framework, twin.name, cell.gpus, cell.seed, cell.repeat, tuning)
        found = next((r for r in results if (r.cell.framework, r.cell.recipe, r.cell.gpus, r.cell.seed,
                                             r.cell.repeat, r.cell.tuning) == key), None)
        if found is not None:
            return found
    return None


def loss_gap_guard(results: list[CellResult], max_gap: float, display: Display) -> list[int]:
    """Check every ok low-precision cell whose ok bf16 twin exists and that has not been
    checked yet; a final smoothed loss more than ``max_gap`` nats above the twin's turns the
    cell to failed (its measurements stay). The verdict is stored in run.json under
    ``guards.loss_gap``. Returns the indices of cells whose status changed."""
    changed = []
    for i, result in enumerate(results):
        twin = bf16_twin(result.cell, results)
        if result.status != "ok" or twin is None or twin.status != "ok":
            continue
        run, base = _try_load(result.run_dir), _try_load(twin.run_dir)
        if run is None or base is None or "loss_gap" in run.get("guards", {}):
            continue
        gap = run["loss"]["final_smoothed"] - base["loss"]["final_smoothed"]
        verdict = {"twin": twin.cell.id, "gap": gap, "threshold": max_gap, "ok": bool(gap <= max_gap)}
        run.setdefault("guards", {})["loss_gap"] = verdict
        if not verdict["ok"]:
            run["status"] = "failed"
            run["error"] = (f"numerics guard: final loss {gap:+.3f} nats against its bf16 twin "
                            f"{twin.cell.id} (threshold {max_gap:g}; --max-loss-gap)")
            results[i] = CellResult(result.cell, "failed", result.run_dir, run["error"],
                                    result.elapsed_s, result.reused)
            display.warning(f"{result.cell.label}: {run['error']}")
            changed.append(i)
        write_run(result.run_dir, run, load_steps(result.run_dir))
    return changed
