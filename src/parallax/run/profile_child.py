"""``parallax profile`` of a torch run on a GPU in a child process, tried again once if it dies.

One torch profile of three on the H200 (2026-12-04) ended with ``free(): invalid pointer``
(SIGABRT) after torch.profiler's "clears events" warning, a crash inside torch.profiler/CUPTI
(kineto), not in Parallax's Python: torch's own workaround for CUPTI's teardown crashes with CUDA
graphs (pytorch PR 112507: ``TEARDOWN_CUPTI=0``) is applied only where Inductor's CUDA graphs are
on, not for graphs captured otherwise, and the crash came and went between identical runs. So
the command keeps it from failing: the profile runs as ``parallax profile --config`` in a child
(``TEARDOWN_CUPTI=0`` set for it), and where the child dies by a signal, its files are kept if it
had written them (profile.json of this attempt), else it is run once more. A child's exit 2 (bad
input) or error is the command's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from parallax.store import files

CHILD_ENV = "PARALLAX_PROFILE_CHILD"  # set in the child: it profiles in its own process
ATTEMPTS = 2


def wanted(framework: str, on_gpu: bool) -> bool:
    """Whether this profile runs in a child: torch on a GPU, and not already in the child."""
    return framework == "torch" and on_gpu and not os.environ.get(CHILD_ENV)


def command(config: Path, warmup: int, steps: int, out: Path, keep_trace: bool) -> list[str]:
    return [sys.executable, "-m", "parallax", "profile", "--config", str(config), "--warmup", str(warmup),
            "--steps", str(steps), "--output-dir", str(out), "--overwrite",  # the parent checked the folder
            *(["--keep-trace"] if keep_trace else [])]


def profile(run: dict, warmup: int, steps: int, out: Path, keep_trace: bool = False, runner=subprocess.run,
            say=print) -> tuple[int, dict | None]:
    """(exit code, profile.json's record or None) of ``run`` (a RunConfig's dict) profiled in a
    child, as the module docstring says. ``runner``: subprocess.run's stand-in (tests)."""
    env = {**os.environ, CHILD_ENV: "1", "TEARDOWN_CUPTI": "0"}
    with _scratch() as tmp:
        config = files.write_json(Path(tmp) / "run.json", run, "TMPDIR")
        for attempt in range(1, ATTEMPTS + 1):
            written = _mtime(out / "profile.json")
            code = runner(command(config, warmup, steps, out, keep_trace), env=env).returncode
            if code >= 0:
                return code, _record(out) if code == 0 else None
            fresh = _mtime(out / "profile.json") not in (None, written)
            if fresh:
                say(f"parallax profile: the profiling process died by signal {-code} after writing its files "
                    "(a crash in torch.profiler/CUPTI); they are kept")
                return 0, _record(out)
            say(f"parallax profile: the profiling process died by signal {-code} before writing its files "
                f"(a crash in torch.profiler/CUPTI; attempt {attempt} of {ATTEMPTS})"
                + ("; running it again" if attempt < ATTEMPTS else ""))
    return 1, None


def _scratch() -> tempfile.TemporaryDirectory:
    """The temporary folder of the child's config; one that cannot be made is the writer's one
    line (``store/files.refusal``) naming it and TMPDIR."""
    try:
        return tempfile.TemporaryDirectory(prefix="parallax-profile-")
    except OSError as exc:
        raise files.refusal(exc.filename or os.environ.get("TMPDIR") or "the temporary folder", exc,
                            "TMPDIR") from None


def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.is_file() else None


def _record(out: Path) -> dict:
    return json.loads((out / "profile.json").read_text())
