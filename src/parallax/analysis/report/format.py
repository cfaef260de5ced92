"""Number formatting shared by every renderer, so a value reads the same everywhere."""

from __future__ import annotations

from parallax.plan import capability as cap

NA = "n/a"


def num(x, unit: str = "") -> str:
    """A measurement with about four significant digits, thousands separated."""
    if x is None:
        return NA
    a = abs(x)
    if a >= 1000:
        text = f"{x:,.0f}"
    elif a >= 100:
        text = f"{x:.1f}"
    elif a >= 10:
        text = f"{x:.2f}"
    elif a >= 0.01 or a == 0:
        text = f"{x:.3f}"
    else:
        text = f"{x:.2e}"
    return text + unit


def ci(interval, fmt=num) -> str:
    if not interval:
        return NA
    return f"{fmt(interval[0])}–{fmt(interval[1])}"


def value_ci(value, interval, fmt=num) -> str:
    if value is None:
        return NA
    return f"{fmt(value)} ({ci(interval, fmt)})" if interval else fmt(value)


def ratio(x) -> str:
    return NA if x is None else f"{x:.3f}×"


def delta(x) -> str:
    return NA if x is None else f"{x:+.4f}"


def loss(x) -> str:
    return NA if x is None else f"{x:.4f}"


def gib(n) -> str:
    return NA if n is None else f"{n / 2**30:.2f} GiB"


def pct(x) -> str:
    return NA if x is None else f"{100 * x:.1f}%"


def step(k: int) -> str:
    """A recorded step as people count it: records (steps.jsonl, evaluations) index steps from 0,
    the progress bar and every text from 1, so the evaluation after the last of 20 steps reads
    'step 20'."""
    return str(int(k) + 1)


def seconds(x) -> str:
    return NA if x is None else f"{x:.1f} s"


def precision_label(cell: dict) -> str:
    """The format and recipe as run: 'fp8 te-fp8-delayed', with '(emulated)' or '(cpu)' when
    not native (``plan.capability.run_label``)."""
    info = cell.get("precision_info")
    recipe = cell.get("recipe") or cell["precision"]
    text = cell["precision"] if recipe == cell["precision"] else f"{cell['precision']} {recipe}"
    label = cap.run_label(info) if info else cap.NATIVE
    return text if label == cap.NATIVE else f"{text} ({label})"


def verdict(entry: dict) -> str:
    """How a speedup reads: faster, slower, or not distinguishable (CI includes 1)."""
    if not entry.get("distinguishable"):
        return "no clear difference (CI includes 1)"
    return "faster" if entry["ratio"] > 1 else "slower"


def penalty_interval(entry: dict, at: str) -> str:
    """'95% CI -0.0123–+0.0045 over 2 seeds, includes 0', or 'one seed: no interval'."""
    interval = entry.get(f"ci_at_{at}")
    if not interval:
        return "one seed: no interval"
    reading = "includes 0" if interval[0] <= 0 <= interval[1] else ("higher loss" if interval[0] > 0 else "lower loss")
    return f"95% CI {ci(interval, delta)} over {entry['seeds']} seeds, {reading}"


def gpus_text(gpus) -> str:
    """'' for one GPU (as every report read before several GPUs), ' ×N GPUs' for more."""
    return f" ×{gpus} GPUs" if gpus and gpus > 1 else ""


def stack(entry: dict) -> str:
    """'torch te-fp8-delayed', 'torch te-fp8-delayed ×2 GPUs': an entry naming a framework, a
    recipe (or a format) and a GPU count."""
    return f"{entry['framework']} {entry.get('recipe') or entry['precision']}{gpus_text(entry.get('gpus'))}"


def several_gpus(record: dict) -> bool:
    """Whether any cell of the record ran on more than one GPU (the tables then show GPUs)."""
    return any((c.get("gpus") or 1) > 1 for c in record["cells"])


def cell_id(entry: dict) -> tuple:
    """(framework, recipe, GPUs) of a cell, delta or row: how the renderers match them."""
    return entry["framework"], entry.get("recipe") or entry["precision"], entry.get("gpus") or 1


def efficiency(entry: dict | None) -> str:
    """A scaling efficiency with its interval: '90.9% (88.0–93.1%)'."""
    if not entry:
        return NA
    return value_ci(entry["value"], entry.get("ci"), pct)
