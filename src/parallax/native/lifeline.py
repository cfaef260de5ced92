"""A benchmark cell's process dies with its runner, so a resumed benchmark never races an orphan.

The runner names itself in the child's environment (``child_env``); the child, first thing at
start-up (``python -m parallax``), asks Linux for SIGKILL when its parent dies
(PR_SET_PDEATHSIG) and exits at once if the runner is already gone. This is done in the child
rather than in a ``preexec_fn``: a ``preexec_fn`` makes ``subprocess`` fork the runner (after
JAX may have been imported there, which warns that forking a multithreaded process can
deadlock) instead of using vfork/posix_spawn.
"""

from __future__ import annotations

import os
import signal
import sys

ENV_VAR = "PARALLAX_RUNNER_PID"
PR_SET_PDEATHSIG = 1


def name_runner(env: dict) -> dict:
    """``env`` for a child that must die with this process."""
    return {**env, ENV_VAR: str(os.getpid())}


def die_with_runner() -> None:
    """In the child: take the death signal if a runner named itself (and forget the name, so
    the child's own children are not bound to it)."""
    runner = os.environ.pop(ENV_VAR, None)
    if runner is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != runner:  # the runner died before prctl took effect
        os._exit(1)
