"""Synthetic ("zero-overhead") batches derived from (seed, step).

Global batch k of seed s is the same array in every framework and process: uniform token ids
in [0, vocab) drawn from NumPy's Philox generator keyed by (s, k), of shape
[batch_size · gpus, seq_len + 1] int32; inputs are [:, :-1] and targets [:, 1:]. A rank's
batch is its rows of it (``data.source``), so 1-GPU and N-GPU runs see the same tokens.
"""

from __future__ import annotations

import numpy as np


def synthetic_batch(seed: int, step: int, batch_size: int, seq_len: int, vocab_size: int) -> np.ndarray:
    rng = np.random.Generator(np.random.Philox(key=[seed, step]))
    return rng.integers(0, vocab_size, size=(batch_size, seq_len + 1), dtype=np.int32)


class SyntheticBatches:
    """The BatchSource of synthetic runs (see engines/base.py). ``rows`` = (first, count): this
    rank's rows of each global batch of ``batch_size · gpus`` rows (all of them by default).
    Evaluation batches are the full global batches on every rank, so every rank's evaluation
    loss is the 1-GPU one."""

    # Evaluation batches use a seed stream disjoint from training steps.
    EVAL_SEED_OFFSET = 1_000_003

    def __init__(self, seed: int, batch_size: int, seq_len: int, vocab_size: int, eval_batches: int = 0,
                 gpus: int = 1, rows: tuple[int, int] | None = None):
        self.seed, self.batch_size, self.seq_len = seed, batch_size, seq_len
        self.vocab_size, self.n_eval = vocab_size, eval_batches
        self.global_batch = batch_size * gpus
        self.first, self.rows = rows or (0, self.global_batch)
        self.description = f"synthetic(seed={seed})"

    def batch(self, step: int) -> np.ndarray:
        full = synthetic_batch(self.seed, step, self.global_batch, self.seq_len, self.vocab_size)
        if self.rows == self.global_batch:
            return full
        return full[self.first:self.first + self.rows]

    def __iter__(self):
        step = 0
        while True:
            yield self.batch(step)
            step += 1

    def eval_batches(self) -> list[np.ndarray]:
        seed = self.seed + self.EVAL_SEED_OFFSET
        return [
            synthetic_batch(seed, i, self.global_batch, self.seq_len, self.vocab_size)
            for i in range(self.n_eval)
        ]

    def close(self) -> None:
        pass
