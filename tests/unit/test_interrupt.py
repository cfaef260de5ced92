"""Ctrl-C and SIGTERM inside ``interrupt.catching()``: the signal raises Interrupted in the
command's own code, even where it lands in a finalizer (a weakref callback, a ``__del__``),
where Python cannot raise and would otherwise drop it."""

from __future__ import annotations

import signal
import time
import weakref

import pytest

from parallax.run import interrupt


class Thing:
    pass


GUARD_STEPS = 5000  # 1 ms each: a guard against a signal that never comes back, not a timing threshold


def freed_while_the_signal_lands(signum: int) -> None:
    """Free an object whose finalizer receives ``signum``: as a signal sent from outside lands
    wherever the main thread is, its handler runs inside the finalizer, which cannot raise."""
    thing = Thing()
    weakref.finalize(thing, signal.raise_signal, signum)
    del thing


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_signal_that_lands_in_a_finalizer_stops_the_commands_own_work(signum):
    done = []
    with pytest.raises(interrupt.Interrupted) as stopped:
        with interrupt.catching():
            freed_while_the_signal_lands(signum)
            for step in range(GUARD_STEPS):  # the command's work after the finalizer
                done.append(step)
                time.sleep(0.001)
            pytest.fail(f"the signal was dropped: the command ran on ({len(done)} steps)")
    assert stopped.value.signum == signum and stopped.value.exit_code == 128 + signum
    assert len(done) < GUARD_STEPS


def test_a_signal_dropped_as_the_work_ends_stops_it_there():
    with pytest.raises(interrupt.Interrupted) as stopped:
        with interrupt.catching():
            freed_while_the_signal_lands(signal.SIGTERM)
    assert stopped.value.name == "SIGTERM"


def test_other_errors_of_finalizers_still_reach_the_previous_hook(monkeypatch):
    import sys

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: seen.append(type(info.exc_value)))

    def broken():
        raise ValueError("a finalizer's own bug")

    with interrupt.catching():
        thing = Thing()
        weakref.finalize(thing, broken)
        del thing
    assert seen == [ValueError]


def test_the_handlers_and_the_unraisable_hook_are_put_back():
    import sys

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook)
    with pytest.raises(interrupt.Interrupted):
        with interrupt.catching():
            signal.raise_signal(signal.SIGTERM)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook) == before


def test_a_signal_in_the_commands_own_code_raises_at_once():
    with pytest.raises(interrupt.Interrupted) as stopped:
        with interrupt.catching():
            signal.raise_signal(signal.SIGINT)
            pytest.fail("the signal did not stop the command")
    assert stopped.value.name == "SIGINT"
