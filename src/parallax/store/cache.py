"""Where Parallax keeps what it can rebuild: measured GEMM ceilings, raw corpora prepared for
``train --data``. One root for both, so one variable moves (or clears) all of it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from parallax.errors import ParallaxError
from parallax.store import files

CACHE_DIR_ENV = "PARALLAX_CACHE_DIR"


def cache_root() -> Path:
    """$PARALLAX_CACHE_DIR, else $XDG_CACHE_HOME/parallax, else ~/.cache/parallax; a one-line
    ParallaxError naming the variable to set when it is a file or cannot be written (proved by a
    probe file in its nearest existing folder, so nothing is created here)."""
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
    failure = files.probe_failure(root)
    if failure is not None and failure.errno == errno.ENOTDIR:
        raise ParallaxError(f"the cache folder {root} (from {source}) cannot be made: "
                            f"{files.nearest_existing(root)} is a file; {fix}")
    if failure is not None:
        raise ParallaxError(f"the cache folder {root} (from {source}) is not writable ({failure.strerror}); {fix}")
