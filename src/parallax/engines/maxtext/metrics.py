"""What MaxText reports, read back: its metrics file and the lines of its log.

MaxText 0.2.5 (``common/metric_logger.py``):

- ``metrics_file``: ``write_metrics_locally`` appends one JSON object a written metric set —
  every scalar of the step as a float (``learning/loss``, ``learning/grad_norm``,
  ``learning/raw_grad_norm``, ``learning/current_learning_rate``, ``perf/step_time_seconds``,
  ``perf/per_device_tflops``, ``perf/per_device_tflops_per_sec``, ``perf/per_device_tokens``,
  ``perf/per_device_tokens_per_sec``, ...) plus ``"step"`` (a float) and ``"run_name"``. It
  truncates the file when it writes step 0. Evaluation summaries go to the same file (keys
  ``eval/...``); they are not training steps and are left out here.
- the log (absl, stderr): ``completed step: N, seconds: S, TFLOP/s/device: T, Tokens/s/device: K,
  total_weights: W, loss: L, ...`` a step, flushed one step late; ``number parameters: X.XXX
  billion`` once (its only parameter count, to three decimals of a billion); after the first
  step ``Memstats: After params initialized:`` and ``\\tUsing (GB) U / L (...) on <device>``.

``perf/step_time_seconds`` is host time between consecutive iterations of MaxText's loop; the
loss of step k is fetched while step k+1 runs, so the device stays busy (the same method as
our JAX engine's, docs/timing.md). Step 0 does NOT include compilation: ``train_loop`` lowers
and compiles the train step ahead of time (``p_train_step.lower(...).compile()``) before its
loop, then logs ``[train] Total estimated memory size`` (``print_compiled_memory_stats``). The
last line MaxText logs before that is ``No existing checkpoints found, not restoring checkpoint.``
(``checkpointing.load_state_if_possible``), after which it only initialises the train state (a
jit of its own) and traces, lowers and compiles the step: ``compile_s`` is the time between
those two lines' absl timestamps. The run's ``timing.compile_s`` adds step 0 to it
(``launch.time_to_first_step``): step 0 sets up more than a later step (docs/maxtext.md#timing-and-what-is-recorded).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from parallax.engines.maxtext.child import DATA_WAIT_TAG, MEMORY_TAG
from parallax.engines.maxtext.feed import FEED_TAG

STEP_LINE = re.compile(
    r"completed step: (?P<step>\d+), seconds: (?P<seconds>[0-9.eE+-]+)"
    r"(?:, TFLOP/s/device: (?P<tflops>[0-9.eE+-]+|nan|inf), Tokens/s/device: (?P<tokens>[0-9.eE+-]+|nan|inf))?"
    r".*?, loss: (?P<loss>[0-9.eE+-]+|nan|inf|-inf)")
PARAMS_LINE = re.compile(r"number parameters: (?P<billions>[0-9.]+) billion")
MEMSTATS_LINE = re.compile(r"Using \(GB\) (?P<used>[0-9.]+) / (?P<limit>[0-9.]+) \(")
# child.MEMORY_TAG and its JSON: the allocator's stats once MaxText's run has ended
PEAK_LINE = re.compile(re.escape(MEMORY_TAG) + r"(?P<stats>\{.*\})\s*$")
# child.DATA_WAIT_TAG: one step's host milliseconds in MaxText's DataLoader.load_next_batch
DATA_WAIT_LINE = re.compile(re.escape(DATA_WAIT_TAG) + r"(?P<ms>[0-9.eE+-]+)\s*$")
# child.FEED_TAG and its JSON: how many of Parallax's batches MaxText took (feed.py)
FEED_LINE = re.compile(re.escape(FEED_TAG) + r"(?P<record>\{.*\})\s*$")
ESTIMATED_MEMORY_LINE = re.compile(r"\[train\] Total estimated memory size: (?P<gb>[0-9.]+) GB")
# absl's prefix of a line logged from Python: I1201 16:11:53.585438 139826773982080 checkpointing.py:803] ...
# (XLA's C++ lines, such as dump.cc's, name a .cc file and are not MaxText's).
ABSL_PY_LINE = re.compile(r"^[IWEF](?P<month>\d\d)(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d\.\d{6})\s+\d+\s+"
                          r"[\w.-]+\.py:\d+\] (?P<text>.*)$")
COMPILE_METHOD = ("absl timestamps in MaxText's log: from the last line before its ahead-of-time compile "
                  "(compile_from) to '[train] Total estimated memory size' after it: train-state initialisation, "
                  "then tracing, lowering and XLA compilation of the train step (a persistent-cache hit "
                  "shortens it); step 0 of its metrics excludes it")


@dataclass(frozen=True)
class MaxTextStep:
    step: int
    loss: float
    step_s: float
    lr: float | None
    grad_norm: float | None  # after clipping (MaxText's learning/grad_norm)
    raw_grad_norm: float | None  # before clipping
    tflops_per_s: float | None  # MaxText's perf/per_device_tflops_per_sec
    tokens_per_s: float | None  # MaxText's perf/per_device_tokens_per_sec
    tflops_per_step: float | None  # MaxText's perf/per_device_tflops (its FLOPs accounting)


def read_metrics(path: Path) -> list[MaxTextStep]:
    """The training steps of a MaxText metrics file, in step order (a step written twice keeps
    its last line). A torn last line (MaxText killed mid-write) is skipped; a torn line
    elsewhere is an error naming the file and line."""
    path = Path(path)
    lines = path.read_text().splitlines() if path.exists() else []
    steps: dict[int, MaxTextStep] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number}: not a JSON metrics line") from None
        if "learning/loss" not in row or "perf/step_time_seconds" not in row:
            continue  # an evaluation summary
        step = int(row["step"])
        steps[step] = MaxTextStep(
            step=step, loss=float(row["learning/loss"]), step_s=float(row["perf/step_time_seconds"]),
            lr=_maybe(row, "learning/current_learning_rate"), grad_norm=_maybe(row, "learning/grad_norm"),
            raw_grad_norm=_maybe(row, "learning/raw_grad_norm"),
            tflops_per_s=_maybe(row, "perf/per_device_tflops_per_sec"),
            tokens_per_s=_maybe(row, "perf/per_device_tokens_per_sec"),
            tflops_per_step=_maybe(row, "perf/per_device_tflops"))
    return [steps[k] for k in sorted(steps)]


def _maybe(row: dict, key: str) -> float | None:
    value = row.get(key)
    return None if value is None else float(value)


@dataclass
class LogFacts:
    """What the log says that the metrics file does not; filled line by line."""

    parameters_billion: float | None = None
    bytes_in_use_gb: float | None = None  # once the parameters are initialized, as MaxText's Memstats logs it
    bytes_limit_gb: float | None = None
    estimated_memory_gb: float | None = None  # XLA's compile-time estimate, where MaxText logs it
    peak: dict | None = None  # child.STATS after training: peak_bytes_in_use, peak_pool_bytes, bytes_limit
    step_arrivals: list[tuple[int, float]] = field(default_factory=list)  # (step, our clock at the line)
    data_waits: list[float] = field(default_factory=list)  # each step's data wait, ms, in step order
    fed: dict | None = None  # feed.Feed.record(): Parallax's batches MaxText took, where it was fed them
    compile_s: float | None = None  # COMPILE_METHOD
    compile_from: str | None = None  # the line compile_s starts at
    _last_py_line: tuple[float, str] | None = None

    def read(self, line: str, now: float | None = None) -> tuple[int, float, float] | None:
        """Take in one log line; for a step line, (step, loss, seconds)."""
        if self.parameters_billion is None and (m := PARAMS_LINE.search(line)):
            self.parameters_billion = float(m["billions"])
        if self.bytes_in_use_gb is None and (m := MEMSTATS_LINE.search(line)):
            self.bytes_in_use_gb, self.bytes_limit_gb = float(m["used"]), float(m["limit"])
        if m := PEAK_LINE.search(line):
            self.peak = json.loads(m["stats"])
        if m := DATA_WAIT_LINE.search(line):
            self.data_waits.append(float(m["ms"]))
        if m := FEED_LINE.search(line):
            self.fed = json.loads(m["record"])
        self._read_compile(line)
        m = STEP_LINE.search(line)
        if m is None:
            return None
        step = int(m["step"])
        if now is not None:
            self.step_arrivals.append((step, now))
        return step, float(m["loss"]), float(m["seconds"])


    def _read_compile(self, line: str) -> None:
        if self.estimated_memory_gb is not None:
            return
        stamped = ABSL_PY_LINE.match(line.rstrip("\n"))
        memory = ESTIMATED_MEMORY_LINE.search(line)
        if memory is not None:
            self.estimated_memory_gb = float(memory["gb"])
            if stamped is not None and self._last_py_line is not None:
                start, self.compile_from = self._last_py_line
                self.compile_s = round(seconds_between(start, absl_seconds(stamped)), 6)
        elif stamped is not None:
            self._last_py_line = (absl_seconds(stamped), stamped["text"].strip())


def absl_seconds(stamp: re.Match) -> float:
    """Seconds since the start of the year (2000, a leap year) of an absl line's MMDD hh:mm:ss.us."""
    import datetime

    when = datetime.datetime.strptime(f"2000{stamp['month']}{stamp['day']} {stamp['clock']}", "%Y%m%d %H:%M:%S.%f")
    return (when - datetime.datetime(2000, 1, 1)).total_seconds()


def seconds_between(start: float, end: float) -> float:
    """``end - start``; absl's stamps carry no year, so a run over New Year wraps once."""
    return end - start if end >= start else end - start + 366 * 86400


def parameters_agree(parameters: int, billions: float | None) -> bool | None:
    """Whether MaxText's ``number parameters: X billion`` (three decimals) is ``parameters``
    rounded the way MaxText rounds it; None when it logged no count."""
    if billions is None:
        return None
    return f"{parameters / 1e9:.3f}" == f"{billions:.3f}"


def wallclock_tokens_per_s(arrivals: list[tuple[int, float]], first_step: int, tokens_per_step: int) -> float | None:
    """Throughput from our own clock: steps first_step.. last over the time between their log
    lines reaching us (one line a step, each written when MaxText fetched that step's loss).
    Independent of MaxText's step timer; None with fewer than two such lines."""
    seen = [(s, t) for s, t in arrivals if s >= first_step]
    if len(seen) < 2:
        return None
    (s0, t0), (s1, t1) = seen[0], seen[-1]
    if t1 <= t0 or s1 <= s0:
        return None
    return (s1 - s0) * tokens_per_step / (t1 - t0)


def wallclock_tokens_per_s_median(arrivals: list[tuple[int, float]], first_step: int,
                                  tokens_per_step: int) -> float | None:
    """The same clock, over the median interval between consecutive step lines from first_step
    on: the statistic of our step times, which one stalled step does not move (a mean would);
    None with fewer than two."""
    seen = sorted((s, t) for s, t in arrivals if s >= first_step)
    gaps = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(seen, seen[1:]) if s1 > s0]
    median = finite_median(gaps)
    return tokens_per_step / median if median else None


def finite_median(values: list[float | None]) -> float | None:
    import statistics

    kept = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(kept) if kept else None
