"""A run's steps in TensorBoard and Weights & Biases while it trains: ``--log tensorboard``,
``--log wandb`` or both (``docs/watching.md``).

One writer for every engine: the driver (``run/train.py``) hands it each step as the engine
reports it (``StepLog``: loss, step time, the schedule's learning rate), and this module adds
what follows from the step time (tokens/s, TFLOP/s and MFU per GPU under the primary FLOPs
accounting, ``spec/flops.py``). When the run ends it writes ``steps.jsonl``'s rows: every
value the live view lacked (the gradient norm, which the engines report with the result) or
that the result corrected (several ranks: the slowest rank's step time; MaxText: the step
times of its metrics file), then the evaluations (loss, perplexity), the peak memory and the
run's summary. The last value written at a step is steps.jsonl's: one source, two views.

Where: TensorBoard event files in ``<output dir>/tensorboard/`` (tensorboardX), so that
``tensorboard --logdir`` of a benchmark's folder shows each cell as the run ``runs/<cell
id>/tensorboard``; a W&B run in ``<output dir>/wandb/``, named by the folder (a benchmark's
cell id), grouped by the benchmark, offline unless the user's ``WANDB_MODE`` says otherwise
(``wandb sync`` uploads it later): nothing here waits on a network. The configuration, recipe
and machine are TensorBoard hyperparameters and the W&B run's config.

The command line's ``--log`` sets ``PARALLAX_LOG`` (``ENV_VAR``), which a benchmark's cells and
a run's ranks inherit; only the process that writes the result (rank 0) logs.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from parallax.errors import ParallaxError, installed, say

ENV_VAR = "PARALLAX_LOG"
# sink -> (the module it needs, the extra that installs it)
SINKS = {"tensorboard": ("tensorboardX", "tensorboard"), "wandb": ("wandb", "wandb")}
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
PROJECT = "parallax"
# steps.jsonl's keys that are scalars, and their tags
ROW_TAGS = {"loss": "train/loss", "step_ms": "train/step_ms", "lr": "train/lr", "grad_norm": "train/grad_norm"}
STEP_KEY = "train/step"  # W&B's x axis (its own _step counts the rows it was sent)


def parse(text: str | None) -> tuple[str, ...]:
    """``tensorboard``, ``wandb`` or ``tensorboard,wandb`` as a tuple of sinks; '' or None: none."""
    sinks = tuple(dict.fromkeys(s.strip() for s in (text or "").split(",") if s.strip()))
    unknown = [s for s in sinks if s not in SINKS]
    if unknown:
        raise ParallaxError(f"--log {unknown[0]}: unknown; choose tensorboard, wandb or tensorboard,wandb")
    return sinks


def check(sinks: tuple[str, ...]) -> None:
    """One line naming the extra for the first sink whose library is not installed."""
    for sink in sinks:
        module, extra = SINKS[sink]
        if not installed(module):
            raise ParallaxError(f"--log {sink} needs {module}: pip install 'slm-parallax[{extra}]'")


def from_env() -> tuple[str, ...]:
    return parse(os.environ.get(ENV_VAR))


@dataclass(frozen=True)
class Rates:
    """What a step time gives: tokens/s of the whole run, TFLOP/s and MFU of one GPU."""

    tokens_per_step: int
    gpus: int
    flops_per_token: int  # the primary accounting's
    peak_tflops: float | None  # one GPU's dense peak of the run's precision; None: MFU n/a

    def of(self, step_ms: float | None) -> dict[str, float]:
        if not step_ms or not math.isfinite(step_ms):
            return {}
        tokens_per_s = self.tokens_per_step * 1e3 / step_ms
        tflops = tokens_per_s / self.gpus * self.flops_per_token / 1e12
        out = {"perf/tokens_per_s": tokens_per_s, "perf/tflops_per_gpu": tflops}
        if self.peak_tflops:
            out["perf/mfu"] = tflops / self.peak_tflops
        return out


class LiveLog:
    """The sinks of one run. ``step`` as the engine reports a step, ``finish`` once with
    steps.jsonl's rows and run.json's dict, ``close`` always (``finish`` closes too)."""

    def __init__(self, writers: list, rates: Rates):
        self.writers, self.rates = writers, rates
        self.logged: dict[int, dict[str, float]] = {}  # step -> tag -> the value written last

    def step(self, step: int, loss: float | None, step_ms: float | None, lr: float | None) -> None:
        values = self.values({"loss": loss, "step_ms": step_ms, "lr": lr})
        self.logged.setdefault(step, {}).update(values)
        self._scalars(step, values)

    def values(self, row: dict) -> dict[str, float]:
        """A steps.jsonl row's scalars by tag, with the rates of its step time."""
        values = {ROW_TAGS[k]: float(v) for k, v in row.items() if k in ROW_TAGS and v is not None}
        if "train/step_ms" in values:
            values.update(self.rates.of(values["train/step_ms"]))
        return values

    def finish(self, rows: list[dict], result: dict) -> None:
        """steps.jsonl's ``rows`` (what the live view lacked or had otherwise), the evaluations,
        the peak memory and the summary of ``result``; then close."""
        try:
            self.rewrite([(int(row["step"]), self.values(row)) for row in rows])
            last = max((int(r["step"]) for r in rows), default=0)
            for e in result.get("eval") or []:
                self._scalars(int(e["step"]), {"eval/loss": e.get("loss"), "eval/perplexity": e.get("perplexity")})
            memory = result.get("memory") or {}
            self._scalars(last, {f"memory/{k.removesuffix('_bytes')}_gib": v / 2**30 for k, v in memory.items()
                                 if isinstance(v, (int, float))})
            summary = summary_of(result)
            for writer in self.writers:
                writer.summary(summary)
        finally:
            self.close()

    def rewrite(self, wanted: list[tuple[int, dict[str, float]]]) -> None:
        """Each tag again from its first step whose value the live view lacked or had otherwise,
        to the last step. TensorBoard's reader takes a step at or before the latest as a restart
        of that tag and drops the later steps; written from there to the end, the series ends as
        ``wanted`` for a reader that keeps every value (the last one of a step wins) and for one
        that restarts."""
        wanted = sorted(wanted, key=lambda item: item[0])
        first: dict[str, int] = {}
        for step, values in wanted:
            for tag, value in values.items():
                if tag not in first and not _same(self.logged.get(step, {}).get(tag), value):
                    first[tag] = step
        for step, values in wanted:
            again = {tag: v for tag, v in values.items() if tag in first and step >= first[tag]}
            self.logged.setdefault(step, {}).update(again)
            self._scalars(step, again)

    def _scalars(self, step: int, values: dict) -> None:
        values = {k: float(v) for k, v in values.items() if v is not None}
        if values:
            for writer in self.writers:
                writer.scalars(step, values)

    def close(self) -> None:
        writers, self.writers = self.writers, []
        for writer in writers:
            writer.close()


def _same(a: float | None, b: float) -> bool:
    return a is not None and (a == b or (math.isnan(a) and math.isnan(b)))


def summary_of(result: dict) -> dict[str, float | str]:
    """The run's outcome in a few numbers: status, median step, tokens/s, MFU, final loss."""
    timing, throughput = result.get("timing") or {}, result.get("throughput") or {}
    primary = ((result.get("flops") or {}).get("accountings") or {}).get("spec") or {}
    found = {"status": result.get("status"),
             "step_ms_median": ((timing.get("step_ms") or {}).get("median")),
             "tokens_per_s": throughput.get("tokens_per_s"),
             "tflops_per_gpu": primary.get("tflops"), "mfu": primary.get("mfu_precision_peak"),
             "final_loss": (result.get("loss") or {}).get("final")}
    return {k: v for k, v in found.items() if v is not None}


def hparams(run: dict, recipe: dict, machine: dict) -> dict:
    """The run's configuration, recipe and machine, nested (W&B's config)."""
    return {"config": run, "recipe": recipe, "machine": machine}


def flat(nested: dict, prefix: str = "") -> dict[str, float | int | str | bool]:
    """'config.batch_size': 4, ...: TensorBoard's hyperparameters are scalars and strings."""
    out = {}
    for key, value in nested.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, name + "."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        elif value is not None:
            out[name] = json.dumps(value, default=str)
    return out


# ----------------------------------------------------------------------------- the sinks

class TensorBoard:
    """tensorboardX's SummaryWriter on ``<run dir>/tensorboard``; event files of an earlier run
    there are removed first (a rerun with --overwrite must not draw two runs as one)."""

    def __init__(self, run_dir: Path, config: dict):
        from tensorboardX import SummaryWriter

        folder = Path(run_dir) / TENSORBOARD_DIR
        for old in folder.glob("events.out.tfevents.*"):
            old.unlink()
        self.writer = SummaryWriter(logdir=str(folder), flush_secs=10)
        self.config = flat(config)
        self.writer.add_text("run/config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if not self.writing():
            return
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def summary(self, summary: dict) -> None:
        """The hyperparameters, with the summary's numbers as their metrics (TensorBoard's
        HPARAMS tab), in this run's own folder."""
        from tensorboardX.summary import hparams as hparams_summary

        if not self.writing():
            return
        metrics = {f"summary/{k}": v for k, v in summary.items() if isinstance(v, (int, float))}
        for part in hparams_summary(self.config, metrics):
            self.writer.file_writer.add_summary(part)
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, 0)

    def writing(self) -> bool:
        """Whether tensorboardX's writer thread still runs. A write it cannot make (a full disk)
        ends that thread, and every later event would then block on its full queue forever:
        the run's own files come first, so the TensorBoard view stops there, said once."""
        worker = getattr(getattr(self.writer.file_writer, "event_writer", None), "_worker", None)
        if worker is None or worker.is_alive():
            return True
        if not getattr(self, "stopped", False):
            self.stopped = True
            say(f"parallax: warning: TensorBoard's event writer stopped writing to {self.writer.logdir} "
                "(a full disk?); the TensorBoard view of this run ends there, run.json and steps.jsonl do not")
        return False

    def close(self) -> None:
        if self.writing():  # closing a stopped writer would block on its queue
            self.writer.close()


class WandB:
    """A W&B run in ``<run dir>/wandb``, offline unless ``WANDB_MODE`` says otherwise; its x
    axis is ``train/step`` (``STEP_KEY``), so that the values written when the run ends land
    on their steps."""

    def __init__(self, run_dir: Path, name: str, group: str | None, config: dict):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or PROJECT, name=name, group=group,
                              dir=str(run_dir), config=config, mode=os.environ.get("WANDB_MODE") or "offline",
                              reinit="create_new", settings=wandb.Settings(x_disable_stats=True, silent=True,
                                                                           save_code=False))
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("*", step_metric=STEP_KEY)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.run.log({STEP_KEY: step, **values})

    def summary(self, summary: dict) -> None:
        for key, value in summary.items():
            self.run.summary[key] = value

    def close(self) -> None:
        self.run.finish()


def open_log(sinks: tuple[str, ...], run_dir: Path, config: dict, rates: Rates) -> LiveLog:
    """The sinks of a run writing into ``run_dir``; named by the folder, grouped by the benchmark
    when the folder is one of its cells (``<benchmark>/runs/<cell id>``)."""
    run_dir = Path(run_dir)
    writers = []
    try:
        for sink in sinks:
            if sink == "tensorboard":
                writers.append(TensorBoard(run_dir, config))
            else:
                writers.append(started_wandb(run_dir, config))
    except BaseException:
        for writer in writers:
            writer.close()
        raise
    return LiveLog(writers, rates)


def started_wandb(run_dir: Path, config: dict) -> WandB:
    """The W&B sink, or one line saying why W&B did not start (its service, its settings)."""
    try:
        return WandB(run_dir, run_dir.name, benchmark_of(run_dir), config)
    except Exception as exc:  # wandb raises its own types, and plain ones
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ParallaxError(f"--log wandb: W&B did not start its run ({first[:200]}); see "
                            f"{run_dir / WANDB_DIR}/debug.log, or drop wandb from --log") from exc


def benchmark_of(run_dir: Path) -> str | None:
    """The benchmark folder's name when ``run_dir`` is one of its cells, else None."""
    from parallax.store.results import MATRIX_FILE, RUNS_DIR

    parent = run_dir.absolute().parent
    return parent.parent.name if parent.name == RUNS_DIR and (parent.parent / MATRIX_FILE).exists() else None
