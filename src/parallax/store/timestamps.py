"""The one UTC timestamp format of every result file (``2026-12-01T07:30:00Z``).

Its own module so that ``gpu`` (which ``envinfo`` asks for the probe) needs nothing of
``envinfo``: no import cycle between the two."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
