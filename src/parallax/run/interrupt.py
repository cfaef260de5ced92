"""Ctrl-C and SIGTERM during a long command: it stops and keeps what it did.

Inside ``catching()`` both signals raise ``Interrupted`` in the main thread, and the command
exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM, the shell's convention) with
one line. ``train``'s driver (``run.train``) writes the run.json of status ``interrupted`` with
the steps done; ``benchmark``'s runner stops the running cell and records it ``interrupted``
(``--resume`` runs it again); ``data prepare`` removes its staging folder; ``profile`` and
``parity`` write nothing. Every long command enters ``catching()`` in its ``cli/`` module. The first signal puts the previous handlers back, so a second one ends the process
as it would have without this module (the result files are written atomically: never half).
"""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A signal that stops the run; a KeyboardInterrupt, so code that lets Ctrl-C through lets it through."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def of(exc: KeyboardInterrupt) -> Interrupted:
    """``exc`` as an Interrupted: a plain KeyboardInterrupt (no handler of ours) is SIGINT's."""
    return exc if isinstance(exc, Interrupted) else Interrupted(signal.SIGINT)


def exit_code(name: str) -> int:
    """The exit code of a run stopped by the signal named ``name`` ('SIGTERM' -> 143)."""
    return Interrupted(signal.Signals[name]).exit_code


@contextlib.contextmanager
def catching():
    """SIGINT and SIGTERM raise Interrupted while inside (main thread only: elsewhere Python
    cannot set handlers, and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)

    def handler(signum, frame):
        restore()
        raise Interrupted(signum)

    for s in SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        restore()
