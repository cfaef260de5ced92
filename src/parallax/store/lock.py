"""One process at a time in a results folder: an exclusive ``flock`` on ``<folder>/.parallax.lock``.

The OS releases the lock when its holder ends, even by SIGKILL, so a lock left by a dead process
never blocks anyone; the file holds the holder's pid, which the refusal names. ``parallax
benchmark`` holds it on its folder for the whole matrix (and the ``results`` commands while they
rewrite one); ``parallax train`` on its run folder (``claimed_run_dir``), which it also refuses
when it already holds a run (``--overwrite`` replaces it) or is a benchmark's folder.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from parallax.errors import ParallaxError
from parallax.store import results
from parallax.store.results import LOCK_FILE


@contextlib.contextmanager
def locked(folder: Path, command: str = "parallax benchmark", remove: bool = False):
    """Hold ``folder``'s lock while the block runs; a ParallaxError naming ``command`` and the
    holder's pid when another process holds it. ``remove``: delete the lock file as the block
    ends (a run folder keeps only the run)."""
    import fcntl

    path = Path(folder) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ParallaxError(f"{folder} is in use by another '{command}'{_holder(path)}; wait for it to end "
                                "or choose another --output-dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield
        finally:
            if remove:
                path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


@contextlib.contextmanager
def claimed_run_dir(folder: str | Path, overwrite: bool = False):
    """``folder`` made (if missing), locked for this ``parallax train`` and checked to hold no
    run, for the block; refused in one line otherwise. A refusal leaves no folder it made."""
    folder = Path(folder)
    results.writable_output_dir(folder)
    with locked(folder, "parallax train", remove=True):
        refuse_taken(folder, overwrite)
        yield folder


def refuse_taken(folder: Path, overwrite: bool) -> None:
    if (folder / results.MATRIX_FILE).exists():
        raise ParallaxError(f"{folder} is a benchmark's folder; choose a fresh --output-dir for train")
    held = [name for name in (results.RUN_FILE, results.STEPS_FILE) if (folder / name).exists()]
    if held and not overwrite:
        raise ParallaxError(f"{folder} already holds a run ({held[0]}); pass --overwrite to replace it, "
                            "or choose a fresh --output-dir")
