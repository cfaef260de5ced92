"""Where Parallax keeps what it can rebuild: measured GEMM ceilings, raw corpora prepared for
``train --data``. One root for both, so one variable moves (or clears) all of it."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "PARALLAX_CACHE_DIR"


def cache_root() -> Path:
    """$PARALLAX_CACHE_DIR, else $XDG_CACHE_HOME/parallax, else ~/.cache/parallax."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "parallax"
