#!/usr/bin/env python3
"""How far one cell's throughput moves from machine to machine: every ok, timed run of a recipe
in a set of result folders, grouped by the GPU it ran on (``parallax.analysis.comparability``), as a
Markdown table of each machine's median tokens/s and the spread between machines.

    python3 scripts/machine_spread.py docs/results --model llama-100m --batch-size 32 --recipe bf16

Only runs on real tokens, on one GPU, without evaluation and with the GPU to themselves
(``timing.concurrent_runs`` 1) count, so that the machine is the one thing that varies.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from parallax.analysis import comparability


def timed_runs(root: Path, model: str, batch: int, recipe: str):
    """(framework, machine label, tokens/s) of every run that qualifies."""
    for path in sorted(root.rglob("runs/*/run.json")):
        run = json.loads(path.read_text())
        config = run.get("config") or {}
        if (run.get("status") != "ok" or config.get("model") != model or config.get("batch_size") != batch
                or config.get("synthetic") or (config.get("recipe") or config.get("precision")) != recipe
                or config.get("gpus", 1) != 1 or config.get("eval_every", 0)
                or (run.get("timing") or {}).get("concurrent_runs", 1) > 1):
            continue
        yield config["framework"], comparability.machine_label(run), run["throughput"]["tokens_per_s"]


def table(runs) -> str:
    by: dict[str, dict[str, list[float]]] = {}
    for framework, machine, tps in runs:
        by.setdefault(framework, {}).setdefault(machine, []).append(tps)
    lines = ["| framework | machines | median tokens/s per machine, lowest–highest | spread |", "|---|---|---|---|"]
    for framework, machines in sorted(by.items()):
        medians = [statistics.median(v) for v in machines.values()]
        lines.append(f"| {framework} | {len(machines)} | {min(medians):,.0f}–{max(medians):,.0f} | "
                     f"{max(medians) / min(medians) - 1:.1%} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=["docs/results"])
    parser.add_argument("--model", default="llama-100m")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--recipe", default="bf16")
    args = parser.parse_args(argv)
    runs = [r for root in args.roots for r in timed_runs(Path(root), args.model, args.batch_size, args.recipe)]
    if not runs:
        print("no run qualifies", file=sys.stderr)
        return 1
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
