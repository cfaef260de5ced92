"""Where Parallax keeps what it can rebuild: measured GEMM ceilings, raw corpora prepared for
``train --data``. One root for both, so one variable moves (or clears) all of it."""

from __future__ import annotations

import os
from pathlib import Path

from parallax.errors import ParallaxError

CACHE_DIR_ENV = "PARALLAX_CACHE_DIR"


def cache_root() -> Path:
    """$PARALLAX_CACHE_DIR, else $XDG_CACHE_HOME/parallax, else ~/.cache/parallax; a one-line
    ParallaxError naming the variable to set when it is a file or cannot be written (checked on
    its nearest existing folder, so nothing is created here)."""
    if os.environ.get(CACHE_DIR_ENV):
        root, source = Path(os.environ[CACHE_DIR_ENV]), CACHE_DIR_ENV
    elif os.environ.get("XDG_CACHE_HOME"):
        root, source = Path(os.environ["XDG_CACHE_HOME"]) / "parallax", "XDG_CACHE_HOME"
    else:
        root, source = Path.home() / ".cache" / "parallax", "HOME"
    _check_writable(root, source)
    return root


def _check_writable(root: Path, source: str) -> None:
    fix = (f"point {CACHE_DIR_ENV} at a writable folder" if source == CACHE_DIR_ENV
           else f"set {CACHE_DIR_ENV} (or XDG_CACHE_HOME) to a writable folder")
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ParallaxError(f"the cache folder {root} (from {source}) cannot be made: {existing} is a file; {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ParallaxError(f"the cache folder {root} (from {source}) is not writable ({existing}); {fix}")
