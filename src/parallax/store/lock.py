"""One parallax process at a time in an output folder: ``benchmark`` on its --output-dir,
``train`` on its run folder, ``results pack`` on a benchmark.

The lock is an exclusive ``flock`` on ``FOLDER/.parallax.lock``, which holds the holder's pid
and command for the refusal's message. The OS releases an flock when its process ends, even by
SIGKILL, so a lock file that a dead process left behind is simply taken over: liveness is the
kernel's to know, and a reused pid cannot fake it. The holder removes the file when it lets go.
The file is made and written in place (``files.open_in_place``): a folder that cannot take it (a
read-only or full disk, no permission) is the writer's one-line refusal naming it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from parallax.errors import ParallaxError
from parallax.store import files

LOCK_FILE = ".parallax.lock"


@contextlib.contextmanager
def locked(folder: Path, command: str, option: str = "--output-dir"):
    """Hold ``folder``'s lock as ``command`` (e.g. 'parallax train'), or raise a one-line
    ParallaxError naming the folder, the holder and its pid. ``folder`` must exist."""
    path = Path(folder) / LOCK_FILE
    fd = _take(path, folder, option)
    try:
        files.write_in_place(fd, f"{os.getpid()} {command}\n".encode(), path, option)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # still ours: whoever opened it meanwhile finds it gone and opens anew
        os.close(fd)


def _take(path: Path, folder, option: str) -> int:
    """The descriptor of ``path``, flocked; again when its holder removed it as this opened it."""
    import fcntl

    while True:
        fd = files.open_in_place(path, option)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ParallaxError(f"{folder} is in use by {holder}; wait for it to end or choose another "
                                f"{option}") from None
        if _same_file(fd, path):
            return fd
        os.close(fd)


def _holder(fd: int) -> str:
    """"'parallax train' (pid 1234)" from the lock file; the pid alone where it is unreadable."""
    text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    pid, _, command = text.partition(" ")
    if not pid.isdigit():
        return "another parallax process"
    return f"'{command}' (pid {pid})" if command else f"pid {pid}"


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)
