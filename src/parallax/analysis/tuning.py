"""A tuning sweep's verdict: each knob set against its recipe's default cell, and the winners.

A cell of a knob set other than default (``--tuning``, spec/tuning.py) is named after its recipe
and knob set: 'bf16+lhs' (``tuned_name``). For each such cell and the default cell of its
framework, recipe and GPU count (``rows``):

  tokens_per_s    the cell's median tokens/s and interval (compare.py's cell record)
  ratio           its tokens/s over the default cell's, with a percentile interval of the ratio
                  of the two cells' bootstrap replicates (as every speedup of the report)
  compile_s       the cell's compile time (run.json timing.compile_s, median over runs)
  loss_gap        the largest |loss difference| at any step between the cell's run and the
                  default cell's run of the same seed (same weights, same batches)
  moves_loss      loss_gap above LOSS_BAND: the knob set changes the arithmetic beyond what two
                  bf16 runs differ by; it is reported, never chosen

The winner per framework, recipe and GPU count (``winners``) is the fastest median among the
default and the knob sets that do not move the loss; ``beats_default`` says whether its ratio's
interval lies above 1. ``tuned_table`` writes the winners that beat the default as the lines of
spec/tuning.py's TUNED.
"""

from __future__ import annotations

import numpy as np

from parallax.analysis import stats
from parallax.spec import tuning

TUNED_SEP = "+"  # between a recipe and its knob set in a cell's name
# bf16's run-to-run band: two bf16 runs of llama-100m from the same weights on the same batches
# differ by 0.05-0.33 nats at their worst step on the H200 (60-120 steps, scripts/bf16_agreement.py,
# tests/fixtures/loss_band.py): a knob set whose worst step is further from its default cell's moves
# the loss.
LOSS_BAND = 0.33


def tuned_name(recipe: str, knob_set: str | None) -> str:
    """A cell's recipe part: the recipe, with '+KNOBSET' for a knob set other than default."""
    return recipe if knob_set in (None, tuning.DEFAULT) else f"{recipe}{TUNED_SEP}{knob_set}"


def split_tuned(name: str) -> tuple[str, str]:
    """(recipe, knob set) of a cell's recipe part ('bf16+lhs' -> ('bf16', 'lhs'))."""
    recipe, _, knob_set = name.partition(TUNED_SEP)
    return recipe, knob_set or tuning.DEFAULT


def _speed(cell) -> bool:
    return cell is not None and cell.tps_reps is not None


def loss_gap(a, b) -> float | None:
    """The largest |loss difference| at any step between runs of ``a`` and ``b`` of one seed
    (the largest over the seeds both have); None without such a pair."""
    gaps = []
    for run in a.ok:
        twin = next((r for r in b.ok if r.config.get("seed") == run.config.get("seed")), None)
        if twin is None or not run.steps or not twin.steps:
            continue
        ours = {s["step"]: s["loss"] for s in run.steps}
        theirs = {s["step"]: s["loss"] for s in twin.steps}
        common = sorted(set(ours) & set(theirs))
        if common:
            gaps.append(float(np.max(np.abs([ours[k] - theirs[k] for k in common]))))
    return max(gaps) if gaps else None


def rows(cells: dict, level: float, judge) -> list[dict]:
    """One row per cell of a recipe that ran with a knob set other than default, the default
    cell first; ``judge(kind, a, b)`` (compare.Judge) refuses cells that differ in anything but
    the knob set, and returns None for a cell kept out of ratios (an attention fallback)."""
    out = []
    for (fw, rec, g), cell in cells.items():
        plain, knob_set = split_tuned(rec)
        base = cells.get((fw, plain, g))
        tuned = [c for (f, r, n), c in cells.items() if (f, n) == (fw, g) and split_tuned(r)[0] == plain
                 and r != plain]
        if base is None or not tuned or not _speed(cell):
            continue
        row = {"framework": fw, "recipe": plain, "knob_set": knob_set, "gpus": g,
               "tokens_per_s": cell.record["tokens_per_s"], "compile_s": cell.record.get("compile_s"),
               "ratio": None, "ci": None, "distinguishable": False, "loss_gap": None, "moves_loss": False}
        if cell is base:
            row.update(ratio=1.0, ci=[1.0, 1.0], loss_gap=0.0)
        elif _speed(base) and judge("tuning", cell, base) is not None:
            ci = list(stats.percentile_ci(cell.tps_reps / base.tps_reps, level))
            gap = loss_gap(cell, base)
            row.update(ratio=cell.record["tokens_per_s"]["value"] / base.record["tokens_per_s"]["value"], ci=ci,
                       distinguishable=stats.interval_excludes(ci, 1.0), loss_gap=gap,
                       moves_loss=gap is not None and gap > LOSS_BAND)
        out.append(row)
    return out


def winners(found: list[dict]) -> list[dict]:
    """Per framework, recipe and GPU count: the fastest median of the default and the knob sets
    whose loss stays within LOSS_BAND of the default's (and whose ratio was computed)."""
    groups: dict[tuple, list[dict]] = {}
    for row in found:
        groups.setdefault((row["framework"], row["recipe"], row["gpus"]), []).append(row)
    out = []
    for (fw, rec, g), group in groups.items():
        eligible = [r for r in group if r["ratio"] is not None and r["loss_gap"] is not None and not r["moves_loss"]]
        if not eligible:
            continue
        best = max(eligible, key=lambda r: r["tokens_per_s"]["value"])
        out.append({"framework": fw, "recipe": rec, "gpus": g, "knob_set": best["knob_set"], "ratio": best["ratio"],
                    "ci": best["ci"], "beats_default": best["knob_set"] != tuning.DEFAULT and best["ci"][0] > 1.0,
                    "moved_loss": [r["knob_set"] for r in group if r["moves_loss"]]})
    return out


def tuned_table(found: list[dict]) -> str:
    """spec/tuning.py's TUNED entries of ``winners`` that beat their default (one GPU)."""
    lines = [f'    ("{w["framework"]}", "{w["recipe"]}"): "{w["knob_set"]}",  # {w["ratio"]:.3f}x '
             f'[{w["ci"][0]:.3f}, {w["ci"][1]:.3f}]' for w in found if w["beats_default"] and w["gpus"] == 1]
    return "TUNED: dict[tuple[str, str], str] = {\n" + "".join(line + "\n" for line in lines) + "}"


def section(cells: dict, level: float, judge) -> dict | None:
    """The report's tuning section; None for a benchmark of default cells only."""
    found = rows(cells, level, judge)
    if not found:
        return None
    chosen = winners(found)
    return {"rows": found, "winners": chosen, "loss_band": LOSS_BAND, "tuned_table": tuned_table(chosen)}
