#!/usr/bin/env python3
"""How closely bf16 runs from the same weights agree in loss, over every pair a set of result
folders holds: the range a low-precision recipe's early loss difference must be read against.

    python3 scripts/bf16_agreement.py docs/results            # a Markdown table on stdout

Two ok runs pair when they are in one benchmark folder, have the same seed, model, steps, batch,
GPU count and data (so the same initial weights and batches), and both train a bf16 recipe of
torch or jax (MaxText's optimisation differs: docs/maxtext.md). Pairs are grouped by kind: two
runs of one recipe (repeats), torch bf16 against jax bf16, and TransformerEngine's bf16 against
the plain bf16 of its framework. For each pair: the largest |loss difference| at any step, and
the |difference| of the mean of the last 10 losses (the window the report's final loss uses).
Synthetic and real tokens are apart: on synthetic tokens the loss says nothing about learning.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from parallax.store.results import load_steps

BF16 = ("bf16", "te-bf16")
WINDOW = 10


def runs_of(root: Path) -> dict[tuple, list[dict]]:
    """Ok bf16 runs of torch and jax, grouped by what makes two of them start and train alike."""
    groups: dict[tuple, list[dict]] = {}
    for path in sorted(root.rglob("runs/*/run.json")):
        run = json.loads(path.read_text())
        config = run.get("config") or {}
        recipe = config.get("recipe") or config.get("precision")
        if run.get("status") != "ok" or config.get("framework") not in ("torch", "jax") or recipe not in BF16:
            continue
        steps = load_steps(path.parent)  # plain or packed (parallax.store.archive)
        key = (str(path.parent.parent.parent), config.get("seed"), config.get("model"), config.get("steps"),
               config.get("batch_size"), config.get("gpus", 1), bool(config.get("synthetic")), config.get("data"))
        groups.setdefault(key, []).append({"name": f"{config['framework']} {recipe}", "dir": str(path.parent),
                                           "loss": [s.get("loss") for s in steps]})
    return groups


def kind(a: str, b: str) -> str:
    if a == b:
        return "repeats of one recipe"
    if {a, b} == {"torch bf16", "jax bf16"}:
        return "torch bf16 vs jax bf16"
    if a.split()[0] == b.split()[0]:
        return "TE bf16 vs plain bf16"
    return "torch vs jax, TE bf16 on one side"


def pairs(groups: dict[tuple, list[dict]]) -> list[dict]:
    out = []
    for key, members in groups.items():
        for a, b in itertools.combinations(members, 2):
            both = [(x, y) for x, y in zip(a["loss"], b["loss"]) if x is not None and y is not None]
            if len(both) < WINDOW:
                continue
            tail = both[-WINDOW:]
            out.append({"kind": kind(a["name"], b["name"]), "synthetic": key[6], "steps": len(both),
                        "max_step": max(abs(x - y) for x, y in both),
                        "final": abs(sum(x for x, _ in tail) - sum(y for _, y in tail)) / WINDOW,
                        "dirs": (a["dir"], b["dir"])})
    return out


def table(found: list[dict]) -> str:
    lines = ["| tokens | pair | pairs | steps | largest \\|Δloss\\| at a step (min–max over pairs) | "
             "\\|Δ\\| of the last-10-step mean (min–max) |", "|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for row in found:
        groups.setdefault(_group(row), []).append(row)
    for (synthetic, name), rows in sorted(groups.items()):
        steps = ", ".join(str(s) for s in sorted({r["steps"] for r in rows}))
        lines.append(f"| {'synthetic' if synthetic else 'real'} | {name} | {len(rows)} | {steps} | "
                     f"{min(r['max_step'] for r in rows):.4f}–{max(r['max_step'] for r in rows):.4f} | "
                     f"{min(r['final'] for r in rows):.4f}–{max(r['final'] for r in rows):.4f} |")
    return "\n".join(lines)


def _group(row: dict) -> tuple:
    return row["synthetic"], row["kind"]


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path("docs/results")]
    found = [p for root in roots for p in pairs(runs_of(root))]
    if not found:
        print("no two bf16 runs from the same weights found", file=sys.stderr)
        return 1
    print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
