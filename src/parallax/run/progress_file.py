"""Live progress of a training run as JSON lines, for the benchmark runner's matrix display.

Contract: when the environment variable ``PARALLAX_PROGRESS_JSONL`` names a file, the
``parallax train`` driver appends one JSON object per line to it while it runs:

    {"phase": "compiling"}                               when a phase starts
    {"step": 37, "loss": 6.12, "step_ms": 142.0}         at most every ``min_interval_s``

``loss`` and ``step_ms`` may be null. The runner reads only complete lines, so a reader never
sees half a record. The file is separate from ``steps.jsonl`` (written once, at the end). It is
written in place, each record in one write (``store/files.append``): the runner follows it while
it grows; a disk that cannot take it is the writer's one-line refusal naming it.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from parallax.store import files

ENV_VAR = "PARALLAX_PROGRESS_JSONL"


class ProgressFile:
    """A Progress (see ``engines/base.py``) that appends JSON lines to ``path``."""

    def __init__(self, path: str | os.PathLike, min_interval_s: float = 0.5):
        self.path = Path(path)
        self.min_interval_s = min_interval_s
        self._last = -math.inf
        self._pending: dict | None = None  # the newest step held back by the rate limit
        files.append(self.path, b"", ENV_VAR)  # made now: a file it cannot make stops the run before it starts

    def _write(self, record: dict) -> None:
        files.append(self.path, (json.dumps(record) + "\n").encode(), ENV_VAR)

    def step(self, step: int, loss: float | None, step_ms: float | None) -> None:
        record = {"step": int(step), "loss": _finite(loss), "step_ms": _finite(step_ms)}
        now = time.monotonic()
        if now - self._last < self.min_interval_s:
            self._pending = record
            return
        self._last, self._pending = now, None
        self._write(record)

    def phase(self, text: str) -> None:
        self.flush()
        self._write({"phase": str(text)})

    def flush(self) -> None:
        """Write the step held back by the rate limit (at a phase change or the end)."""
        if self._pending is not None:
            self._write(self._pending)
            self._pending = None

    def close(self) -> None:
        self.flush()


class Tee:
    """Forwards progress to several receivers (the terminal bar and the progress file)."""

    def __init__(self, *receivers):
        self.receivers = [r for r in receivers if r is not None]

    def step(self, step: int, loss: float | None, step_ms: float | None) -> None:
        for r in self.receivers:
            r.step(step, loss, step_ms)

    def phase(self, text: str) -> None:
        for r in self.receivers:
            r.phase(text)

    def close(self) -> None:
        for r in self.receivers:
            if hasattr(r, "close"):
                r.close()


def from_env() -> ProgressFile | None:
    """The ProgressFile named by ``PARALLAX_PROGRESS_JSONL``, or None when it is unset; a
    one-line ParallaxError naming it when it cannot be made."""
    path = os.environ.get(ENV_VAR)
    return ProgressFile(path) if path else None


def attach(progress):
    """``progress`` plus the progress file when the runner asked for one (else ``progress``)."""
    extra = from_env()
    return progress if extra is None else Tee(progress, extra)


def read_new(path: str | os.PathLike, offset: int) -> tuple[list[dict], int]:
    """Complete records appended to ``path`` since byte ``offset``, and the new offset."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1  # a half-written last line waits for the next read
    records = []
    for line in chunk[:end].splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # progress is advisory; a bad line must not stop the benchmark
    return records, offset + end


def _finite(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None
