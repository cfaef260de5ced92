"""Ctrl-C and SIGTERM during a long command: it stops and keeps what it did.

Inside ``catching()`` both signals raise ``Interrupted`` in the main thread, and the command
exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM, the shell's convention) with
one line. ``train``'s driver (``run.train``) writes the run.json of status ``interrupted`` with
the steps done; ``benchmark``'s runner stops the running cell and records it ``interrupted``
(``--resume`` runs it again); ``data prepare`` removes its staging folder; ``profile`` and
``parity`` write nothing. Every long command enters ``catching()`` in its ``cli/`` module. The
first signal puts the previous handlers back, so a second one ends the process as it would have
without this module (the result files are written atomically: never half).
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
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
    cannot set handlers, and nothing changes). A signal that lands while a finalizer runs is
    raised again in the command's own code (``_Redelivery``), not lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    hook = sys.unraisablehook

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)

    def handler(signum, frame):
        if redelivery.inside(frame):  # Python would drop what is raised here too: a little later
            redelivery.later(signum)
            return
        redelivery.dropped = None
        restore()
        raise Interrupted(signum)

    redelivery = _Redelivery(handler, hook)
    for s in SIGNALS:
        signal.signal(s, handler)
    sys.unraisablehook = redelivery.unraisable
    try:
        yield
    finally:
        redelivery.close()
        restore()
        sys.unraisablehook = hook
    if redelivery.dropped is not None:  # the body ended before the signal came back: it stops here
        raise Interrupted(redelivery.dropped)


class _Redelivery:
    """Python calls finalizers (weakref callbacks, ``__del__``) from wherever memory is freed and
    drops what they raise, passing it to ``sys.unraisablehook``; a signal whose handler ran inside
    one was lost, and the command ran on to its end (a ``parity --steps 200`` stopped by SIGINT
    exited 1, its report failed, instead of 130). This hook takes such an Interrupted back: the
    handler set again, and the signal sent again to the main thread from a thread of its own
    once this hook has returned (``later``); landing in another finalizer, it comes back here.
    ``dropped``: the signal taken back and not raised yet."""

    DELAY_S = 0.01  # how long the sending thread waits: the hook returns meanwhile (else: ``inside``)

    def __init__(self, handler, hook):
        self.handler, self.hook = handler, hook
        self.dropped: int | None = None
        self.closed = False
        self.lock = _thread.allocate_lock()

    def unraisable(self, info) -> None:
        stop = info.exc_value
        if not isinstance(stop, Interrupted) or threading.current_thread() is not threading.main_thread():
            self.hook(info)
            return
        signal.signal(stop.signum, self.handler)
        self.later(stop.signum)

    def later(self, signum: int) -> None:
        self.dropped = signum
        # _thread, not threading: this runs inside a finalizer, where threading's locks may be held
        _thread.start_new_thread(self._send, (signum,))

    def _send(self, signum: int) -> None:
        import time

        time.sleep(self.DELAY_S)
        with self.lock:  # once raised, or after catching() (the previous handler's then), not again
            if self.dropped is not None and not self.closed:
                _thread.interrupt_main(signum)

    def close(self) -> None:
        with self.lock:
            self.closed = True

    def inside(self, frame) -> bool:
        """Whether ``frame`` is this hook's, or called from it."""
        while frame is not None:
            if frame.f_code in (_Redelivery.unraisable.__code__, _Redelivery.later.__code__):
                return True
            frame = frame.f_back
        return False
