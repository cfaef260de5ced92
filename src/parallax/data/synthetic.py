"""Synthetic ("zero-overhead") batches derived from (seed, step).

Global batch k of seed s is the same array in every framework and process: uniform token ids
in [0, vocab) drawn from NumPy's Philox generator keyed by (s, k), [global_batch, seq_len + 1]
int32; inputs are [:, :-1] and targets [:, 1:]. A rank of a multi-GPU run gets its rows of it
(``rows``: [start, stop)), so 1-GPU and N-GPU runs of one global batch see the same tokens. The
whole global batch is drawn on every rank (the generator cannot skip rows exactly: bounded
integers are drawn by rejection), which costs ~1 ms per 256k tokens.
"""

from __future__ import annotations

import numpy as np


def synthetic_batch(seed: int, step: int, batch_size: int, seq_len: int, vocab_size: int) -> np.ndarray:
    rng = np.random.Generator(np.random.Philox(key=[seed, step]))
    return rng.integers(0, vocab_size, size=(batch_size, seq_len + 1), dtype=np.int32)


def rank_rows(global_batch: int, rank: int, world: int) -> tuple[int, int]:
    """Rows [start, stop) of a global batch that rank ``rank`` of ``world`` trains on: equal
    consecutive slices in rank order (``data.source.make_batch_source``)."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not one of {world} ranks")
    if global_batch % world:
        raise ValueError(f"a global batch of {global_batch} rows does not split into {world} equal slices")
    rows = global_batch // world
    return rank * rows, (rank + 1) * rows


class SyntheticBatches:
    """The BatchSource of synthetic runs (see engines/base.py): rows ``[start, stop)`` of each
    global batch of ``global_batch`` rows (all of it by default)."""

    # Evaluation batches use a seed stream disjoint from training steps.
    EVAL_SEED_OFFSET = 1_000_003

    def __init__(self, seed: int, batch_size: int, seq_len: int, vocab_size: int, eval_batches: int = 0,
                 global_batch: int | None = None, rows: tuple[int, int] | None = None):
        self.global_batch = global_batch or batch_size
        self.rows = rows or (0, self.global_batch)
        if self.rows[1] - self.rows[0] != batch_size:
            raise ValueError(f"rows {self.rows} are not {batch_size} rows")
        self.seed, self.batch_size, self.seq_len = seed, batch_size, seq_len
        self.vocab_size, self.n_eval = vocab_size, eval_batches
        whole = self.rows == (0, self.global_batch)
        self.description = f"synthetic(seed={seed})" + ("" if whole else
                                                        f", rows {self.rows[0]}:{self.rows[1]} of {self.global_batch}")

    def _slice(self, seed: int, step: int) -> np.ndarray:
        full = synthetic_batch(seed, step, self.global_batch, self.seq_len, self.vocab_size)
        start, stop = self.rows
        return full if (start, stop) == (0, self.global_batch) else np.ascontiguousarray(full[start:stop])

    def batch(self, step: int) -> np.ndarray:
        return self._slice(self.seed, step)

    def __iter__(self):
        step = 0
        while True:
            yield self.batch(step)
            step += 1

    def eval_batches(self) -> list[np.ndarray]:
        """This rank's rows of the fixed evaluation batches (global batches of their own seed)."""
        seed = self.seed + self.EVAL_SEED_OFFSET
        return [self._slice(seed, i) for i in range(self.n_eval)]

    def close(self) -> None:
        pass
