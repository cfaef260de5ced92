#!/usr/bin/env python3
"""Judge recorded runs again with the numerics guard of this checkout (``parallax.run.train``).

A run that the quantized-gradient guard failed is set back to ``ok`` when, under the current
rules (GUARD_GRACE_STEPS), none of its recorded steps trips the guard any more; its measurements
were recorded in full either way. The run keeps what happened: ``guards.regraded`` holds the old
status and error, the date and this script's name. Runs failed for any other reason are left
alone. Usage: python3 scripts/regrade_guards.py RUN_DIR...
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

from parallax.store import results
from parallax.run.train import guard_trips

GUARD_PREFIX = "numerics guard: quantized layer gradient"


def regrade(run_dir: Path) -> str:
    run = results.load_run(run_dir)
    if run["status"] != "failed" or not (run.get("error") or "").startswith(GUARD_PREFIX):
        return f"{run_dir}: {run['status']}, left alone"
    steps = [SimpleNamespace(step=r["step"], bad_layers=r.get("bad_layers")) for r in results.load_steps(run_dir)]
    if any(guard_trips(s) for s in steps):
        return f"{run_dir}: still fails the guard"
    tolerated = [{"step": s.step, "layers": len(s.bad_layers)} for s in steps if s.bad_layers]
    run["guards"] = {**run.get("guards", {}), "tolerated_zero_gradients": tolerated,
                     "regraded": {"was_status": run["status"], "was_error": run["error"],
                                  "at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                  "by": "scripts/regrade_guards.py"}}
    run["status"], run["error"] = "ok", None
    results.write_run(run_dir, run)
    return f"{run_dir}: ok now (tolerated zero gradients at steps {[t['step'] for t in tolerated]})"


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(regrade(Path(arg)))
