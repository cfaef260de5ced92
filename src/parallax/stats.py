"""Summary statistics of step times and losses."""

from __future__ import annotations

import numpy as np


def percentile_summary(values) -> dict:
    """Median, p10, p90, mean, std, min, max and count of a sequence of numbers."""
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size == 0:
        raise ValueError("percentile_summary needs at least one value")
    return {
        "median": float(np.median(arr)),
        "p10": float(np.percentile(arr, 10)),
        "p90": float(np.percentile(arr, 90)),
        "mean": float(arr.mean()),
        "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
        "min": float(arr.min()),
        "max": float(arr.max()),
        "count": int(arr.size),
    }


def smoothed_final(values, window: int = 10) -> float:
    """Mean of the last ``window`` values (the 'final loss' a reader should compare)."""
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size == 0:
        raise ValueError("smoothed_final needs at least one value")
    return float(arr[-window:].mean())
