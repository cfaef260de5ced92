"""Summary statistics of step times and losses, and bootstrap confidence intervals.

Why a block bootstrap: successive GPU step times are autocorrelated (clock boost and thermal
state, allocator and compilation-cache warm-up, data-loader hiccups all persist over several
steps). An ordinary bootstrap that resamples steps one by one treats them as independent and
gives intervals that are too narrow. We therefore use a two-level (hierarchical) bootstrap:

1. resample the repeats of a cell (its separate runs) with replacement, so that run-to-run
   variation (a different process, allocator state, seed) enters the interval;
2. within each chosen repeat, resample its steps with a moving-block bootstrap: blocks of
   ``block`` consecutive steps (default ceil(n^(1/3)), the usual rate for a block bootstrap
   of a statistic like the mean or median) are drawn with replacement and concatenated to the
   repeat's length, which keeps the short-range correlation inside each block.

The statistic (the median step time; the mean of per-step loss differences) is computed on
the pooled resampled steps of every replicate; the interval is the percentile interval of the
replicates. With a single repeat only the within-run variation is covered; the report says so.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

DEFAULT_BOOTSTRAPS = 2000
DEFAULT_LEVEL = 0.95
# Replicates are built in chunks so that long runs (10^4 steps × repeats) stay small in memory.
_CHUNK_CELLS = 4_000_000


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


def perplexity(loss: float) -> float | None:
    """exp(mean cross-entropy); None where the loss is not finite or exp would overflow."""
    return math.exp(loss) if math.isfinite(loss) and loss < 700 else None


def block_length(n: int) -> int:
    """Default block length of the moving-block bootstrap for a series of ``n`` steps."""
    if n <= 0:
        raise ValueError("block_length needs a positive series length")
    return max(1, math.ceil(n ** (1.0 / 3.0) - 1e-9))


def block_resample_indices(rng: np.random.Generator, n: int, block: int, size: int) -> np.ndarray:
    """``size`` moving-block resamples of positions 0..n-1, as a [size, n] index array."""
    block = min(max(1, block), n)
    n_blocks = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, size=(size, n_blocks))
    idx = starts[:, :, None] + np.arange(block)[None, None, :]
    return idx.reshape(size, n_blocks * block)[:, :n]


def choose_repeats(seed: int, n_boot: int, n_repeats: int) -> np.ndarray:
    """Which repeats each replicate uses ([n_boot, n_repeats], with replacement).

    Two cells whose repeats are paired (the same seeds, in the same order) can share one
    choice, so that a difference between them is resampled pair by pair.
    """
    return np.random.default_rng(seed).integers(0, n_repeats, size=(n_boot, n_repeats))


def bootstrap_replicates(
    series: Sequence[Sequence[float]],
    statistic: Callable[[np.ndarray], np.ndarray],
    n_boot: int = DEFAULT_BOOTSTRAPS,
    block: int | None = None,
    seed: int = 0,
    repeat_choice: np.ndarray | None = None,
) -> np.ndarray:
    """Hierarchical block-bootstrap replicates of ``statistic`` (see the module docstring).

    ``series`` holds one sequence per repeat. ``statistic`` maps a [k, m] array of pooled
    resampled values (NaN-padded where repeats differ in length) to k values, ignoring NaN,
    e.g. ``row_median``. ``block`` None uses ``block_length`` of each repeat's length.
    """
    data = [np.asarray(s, dtype=np.float64) for s in series]
    if not data or any(d.size == 0 for d in data):
        raise ValueError("bootstrap_replicates needs at least one non-empty series")
    n_rep = len(data)
    if repeat_choice is None:
        repeat_choice = choose_repeats(seed + 1, n_boot, n_rep)
    if repeat_choice.shape != (n_boot, n_rep):
        raise ValueError(f"repeat_choice must have shape {(n_boot, n_rep)}")
    rng = np.random.default_rng(seed)
    width = max(d.size for d in data)
    chunk = max(1, _CHUNK_CELLS // (n_rep * width))
    out = np.empty(n_boot)
    for lo in range(0, n_boot, chunk):
        hi = min(n_boot, lo + chunk)
        pooled = np.full((hi - lo, n_rep, width), np.nan)
        for slot in range(n_rep):
            chosen = repeat_choice[lo:hi, slot]
            for r, values in enumerate(data):
                rows = np.nonzero(chosen == r)[0]
                if rows.size:
                    b = block if block is not None else block_length(values.size)
                    idx = block_resample_indices(rng, values.size, b, rows.size)
                    pooled[rows, slot, : values.size] = values[idx]
        out[lo:hi] = statistic(pooled.reshape(hi - lo, n_rep * width))
    return out


def row_median(a: np.ndarray) -> np.ndarray:
    return np.nanmedian(a, axis=1)


def row_mean(a: np.ndarray) -> np.ndarray:
    return np.nanmean(a, axis=1)


def percentile_ci(replicates, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates."""
    arr = np.asarray(replicates, dtype=np.float64)
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(arr, [tail, 100.0 - tail])
    return float(lo), float(hi)


def t_interval(values, level: float = DEFAULT_LEVEL) -> list[float] | None:
    """Student's t interval of the mean of ``values`` (independent units, e.g. one difference per
    seed); None for fewer than two values."""
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size < 2:
        return None
    from scipy import stats as scipy_stats

    half = float(scipy_stats.t.ppf(0.5 + level / 2.0, arr.size - 1)) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return [float(arr.mean()) - half, float(arr.mean()) + half]


def interval_excludes(ci: tuple[float, float] | None, value: float) -> bool:
    """True when ``value`` (0 for a difference, 1 for a ratio) lies outside ``ci``."""
    if ci is None:
        return False
    lo, hi = ci
    return value < lo or value > hi


def tokens_per_s_from_ms(tokens_per_step: int, step_ms):
    """Tokens per second of a step time (array or number) in milliseconds."""
    return tokens_per_step * 1000.0 / np.asarray(step_ms, dtype=np.float64)
