"""What ``parallax train`` shows: a live progress bar while it runs, a summary table at the end.

``LiveProgress`` implements ``engines.base.Progress``. On a terminal it is a rich progress bar
(step, loss, tokens/s over the last steps); in a log file (no terminal) it writes one plain
line every tenth of the run instead of redrawing a bar.
"""

from __future__ import annotations

import statistics
from collections import deque

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from parallax.analysis.report.format import gib, pct
from parallax.plan import capability as cap

RECENT_STEPS = 20  # tokens/s in the bar is the median over this many recent steps


class LiveProgress:
    def __init__(self, total_steps: int, tokens_per_step: int, warmup: int, console: Console | None = None):
        self.total, self.tokens_per_step, self.warmup = total_steps, tokens_per_step, warmup
        self.console = console or Console(stderr=True)
        self.recent: deque[float] = deque(maxlen=RECENT_STEPS)
        self.log_every = max(1, total_steps // 10)
        self.bar = Progress(
            TextColumn("[bold]{task.description:<18}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:>7}"),
            TextColumn("{task.fields[tps]:>15}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.console.is_terminal,
        )
        self.task = self.bar.add_task("starting", total=total_steps, loss="-", tps="-")

    def __enter__(self) -> "LiveProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def phase(self, text: str) -> None:
        # The bar appears with the first phase, after the run passed its checks, so that bad
        # input shows only its one-line error.
        self.bar.start()
        self.bar.update(self.task, description=text)
        if not self.console.is_terminal:
            self.console.print(f"[{text}]", highlight=False, markup=False)

    def step(self, step: int, loss: float | None, step_ms: float | None) -> None:
        if step_ms is not None and step >= self.warmup:
            self.recent.append(step_ms)
        loss_text = "-" if loss is None else f"{loss:.4f}"
        tps_text = f"{self.tokens_per_s():,.0f} tok/s" if self.recent else "warmup"
        self.bar.update(self.task, completed=step + 1, loss=loss_text, tps=tps_text)
        if not self.console.is_terminal and ((step + 1) % self.log_every == 0 or step + 1 == self.total):
            ms = "-" if step_ms is None else f"{step_ms:.1f} ms"
            self.console.print(f"step {step + 1}/{self.total}  loss {loss_text}  {ms}  {tps_text}",
                               highlight=False)

    def tokens_per_s(self) -> float:
        return self.tokens_per_step * 1e3 / statistics.median(self.recent)


class ProfileProgress:
    """What ``parallax profile`` shows while its steps run (``engines.base.Progress``): the steps
    of each stage counted k of N, the steps numbered from 0 over the stages as the engines number
    them (``stages``, e.g. warm-up 15, timed 5, profiled 5; a step past them, as MaxText's last,
    is not shown). On a terminal, a rich bar redrawn at each step, from this thread only (the
    profiler catches the native writes to file descriptor 2 meanwhile); in a log, the first step
    of each stage and one line per tenth: 'warm-up step 3/15'."""

    def __init__(self, stages: list[tuple[str, int]], console: Console | None = None):
        self.stages, self.console = stages, console or Console(stderr=True)
        self.gates = {name: TenthsGate(total) for name, total in stages}
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=self.console, auto_refresh=False,
                            disable=not self.console.is_terminal)
        self.task = self.bar.add_task("starting", total=None)

    def __enter__(self) -> "ProfileProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def phase(self, text: str) -> None:
        if not self.console.is_terminal:
            self.console.print(f"[{text}]", highlight=False, markup=False)
            return
        self._draw(description=escape(text))

    def step(self, step: int, loss: float | None, step_ms: float | None) -> None:
        found = self.stage(step)
        if found is None:
            return
        name, k, total = found
        if not self.console.is_terminal:
            if self.gates[name](name, k):
                self.console.print(f"{name} step {k}/{total}", highlight=False, markup=False)
            return
        self._draw(description=f"{name} step", total=total, completed=k)

    def _draw(self, **fields) -> None:
        self.bar.update(self.task, **fields)
        self.bar.start()  # the first time, the bar appears: the run is past its checks
        self.bar.refresh()

    def stage(self, step: int) -> tuple[str, int, int] | None:
        """(stage, k, N) of ``step`` (0-based over the stages; k 1-based), None past them."""
        for name, total in self.stages:
            if step < total:
                return name, step + 1, total
            step -= total
        return None


class TenthsGate:
    """The first step reported, then one progress line per tenth of ``total`` steps (the last
    step included), per run: what a log file gets in place of a redrawn bar. ``gate(key, step)``
    says whether ``step`` (1-based) is the first or starts a new tenth for ``key``."""

    def __init__(self, total: int):
        self.total = max(1, total)
        self.printed: dict[str, int] = {}

    def __call__(self, key: str, step: int) -> bool:
        tenth = step * 10 // self.total
        if tenth <= self.printed.get(key, -1):
            return False
        self.printed[key] = tenth
        return True


def step_line(label: str, step: int, total: int, loss: float | None, step_ms: float | None) -> str:
    """'torch bf16 seed 0 rep 0: step 40/200  loss 6.1230  142.0 ms' (1-based step)."""
    parts = [f"{label}: step {step}/{total}"]
    if loss is not None:
        parts.append(f"loss {loss:.4f}")
    if step_ms is not None:
        parts.append(f"{step_ms:.1f} ms")
    return "  ".join(parts)


def summary_table(result: dict, warmup_origin: str | None = None) -> Table:
    """One run's result (a run.json dict) as a two-column table; ``warmup_origin`` says where its
    warm-up came from (e.g. 'the default for --steps 10'), None where the user gave it."""
    cfg, precision = result["config"], result.get("precision") or {}
    table = Table(title=f"parallax train: {cfg['framework']} {cfg['precision']} {cfg['model']}",
                  show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("status", result["status"])
    if result["status"] == "ok":
        _add_ok_rows(table, result, precision, warmup_origin)
        return table
    table.add_row("error", escape(str(result.get("error"))))  # no rich markup: errors quote brackets
    if result["status"] == "interrupted":
        table.add_row("warm-up", warmup_line(cfg, warmup_origin))
        _add_interrupted_rows(table, result)
    return table


def warmup_line(cfg: dict, origin: str | None = None) -> str:
    """'5 of 10 steps, left out of the timing (the default for --steps 10)'."""
    return f"{cfg['warmup']} of {cfg['steps']} steps, left out of the timing" + (f" ({origin})" if origin else "")


def _add_interrupted_rows(table: Table, result: dict) -> None:
    """What a run stopped by a signal kept: its steps' time and loss."""
    timing, tput, loss = result["timing"], result.get("throughput"), result.get("loss")
    if tput:
        ms = timing["step_ms"]
        table.add_row("tokens/s (median)", f"{tput['tokens_per_s']:,.0f} over {timing['measured_steps']} timed steps")
        table.add_row("step time (median)", f"{ms['median']:.2f} ms  (p10 {ms['p10']:.2f}, p90 {ms['p90']:.2f})")
    else:
        table.add_row("tokens/s (median)", f"n/a: no step after the {timing['warmup_steps']} warm-up steps")
    if loss:
        table.add_row("loss", f"{loss['first']:.4f} → {loss['final']:.4f}")


SYNTHETIC_NOTE = "synthetic tokens: the loss says nothing about learning"


def data_line(data: dict, cfg: dict) -> str:
    """What the run trained on, in one line: synthetic tokens said plainly, real tokens with their
    count and the passes the run made over them."""
    if data.get("synthetic", cfg.get("synthetic", True)):
        return SYNTHETIC_NOTE
    name = cfg.get("data") or "TinyStories (--hf)"
    tokens = data.get("train_tokens")
    if not tokens:
        return str(name)
    used = cfg["steps"] * cfg["batch_size"] * cfg.get("gpus", 1) * (cfg["seq_len"] + 1)
    return f"{name}: {tokens:,} tokens, {used / tokens:.1f} passes"


def _add_ok_rows(table: Table, result: dict, precision: dict, warmup_origin: str | None) -> None:
    cfg, timing, tput = result["config"], result["timing"], result["throughput"]
    fw, ms = result["framework"], timing["step_ms"]
    primary = result["flops"]["primary_accounting"]
    row = result["flops"]["accountings"][primary]
    table.add_row("precision", f"{precision.get('recipe')} ({precision.get('backend')}, {cap.run_label(precision)})")
    table.add_row("device", f"{fw.get('device_name') or fw.get('device')}; attention {fw.get('attention_backend')}; "
                            f"{'compiled' if fw.get('compiled') else 'eager'}")
    table.add_row("batch × seq", f"{cfg['batch_size']} × {cfg['seq_len']}")
    table.add_row("warm-up", warmup_line(cfg, warmup_origin))
    par = result.get("parallel") or {}
    if par.get("gpus", 1) > 1:
        table.add_row("GPUs", f"{par['gpus']} ({par['sharding']}, {par['launcher']}, {par['backend']}): global batch "
                              f"{par['global_batch']}, {tput['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU; step "
                              "time of the slowest rank, MFU and memory per GPU")
    table.add_row("tokens/s (median)", f"{tput['tokens_per_s']:,.0f}  (p10 {tput['tokens_per_s_p10']:,.0f}, "
                                       f"p90 {tput['tokens_per_s_p90']:,.0f})")
    table.add_row("step time (median)", f"{ms['median']:.2f} ms  (p10 {ms['p10']:.2f}, p90 {ms['p90']:.2f})")
    table.add_row(f"TFLOP/s ({primary})", f"{row['tflops']:.1f}" if row["tflops"] >= 1 else f"{row['tflops']:.2g}")
    mfu = [f"{pct(row['mfu_precision_peak'])} of {cfg['precision']} peak"]
    if cfg["precision"] != "bf16":
        mfu.append(f"{pct(row['mfu_bf16_peak'])} of bf16 peak")
    mfu.append(f"{pct(row['mfu_measured_ceiling'])} of measured ceiling")
    table.add_row(f"MFU ({primary})", ", ".join(mfu))
    mem = result["memory"]
    table.add_row("peak memory", f"{gib(mem['peak_allocated_bytes'])} allocated, "
                                 f"{gib(mem['peak_reserved_bytes'])} reserved")
    compile_s = timing["compile_s"]
    table.add_row("compile / first step", "n/a" if compile_s is None else f"{compile_s:.1f} s")
    table.add_row("data", data_line(result.get("data") or {}, cfg))
    loss = result["loss"]
    table.add_row("loss", f"{loss['first']:.4f} → {loss['final']:.4f} (last-10 mean {loss['final_smoothed']:.4f})")
    if result.get("eval"):
        last = result["eval"][-1]
        ppl = "n/a" if last["perplexity"] is None else f"{last['perplexity']:.2f}"
        # eval records keep the engine's 0-based step; people read steps 1-based, as the bar counts them
        table.add_row("eval", f"loss {last['loss']:.4f}, perplexity {ppl} after step {last['step'] + 1}")
    for warning in result["flops"].get("warnings") or []:
        table.add_row("note", warning)


def print_summary(result: dict, run_dir: str | None = None, console: Console | None = None,
                  warmup_origin: str | None = None) -> None:
    from parallax.analysis.report.terminal import fit

    console = console or Console()
    console.print(fit(summary_table(result, warmup_origin), console))
    if not run_dir:
        return
    where = f"{run_dir}/run.json and steps.jsonl"
    if result["status"] == "interrupted":  # unwrapped, so the path can be copied
        line = f"{result['error']}; kept them in {where}"
    else:
        line = f"wrote {where}"
    console.print(line, soft_wrap=True, highlight=False, markup=False)
