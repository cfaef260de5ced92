"""Choose the BatchSource of a run: synthetic batches, or real tokens through the native loader.

On several GPUs every step has one global batch of ``run.global_batch`` rows in a fixed order;
the source of rank ``rank`` of ``world`` yields its rows [rank·n, (rank+1)·n) with
n = global_batch / world. With one process per GPU (torch) n is the per-GPU ``batch_size``; a
process that feeds several devices (JAX, one process per host) gets the concatenation of its
devices' slices. One rank of one GPU gets today's batches, unchanged.
"""

from __future__ import annotations

from parallax.config import RunConfig
from parallax.data.synthetic import SyntheticBatches
from parallax.errors import ParallaxError


def rank_rows(run: RunConfig, rank: int, world: int) -> tuple[int, int]:
    """(first row, row count) of rank ``rank``'s part of each global batch."""
    if world < 1 or not 0 <= rank < world:
        raise ParallaxError(f"rank {rank} of {world} ranks does not exist")
    if run.global_batch % world:
        raise ParallaxError(f"the global batch of {run.global_batch} rows does not split over {world} ranks")
    rows = run.global_batch // world
    return rank * rows, rows


def make_batch_source(run: RunConfig, rank: int = 0, world: int = 1):
    model = run.model_config
    first, rows = rank_rows(run, rank, world)
    if run.synthetic:
        return SyntheticBatches(run.seed, run.batch_size, run.seq_len, model.vocab_size, run.eval_batches,
                                gpus=run.gpus, rows=(first, rows))
    if run.gpus > 1 or world > 1:
        raise ParallaxError("real-data batches on several GPUs need the native loader's rank slices, "
                            "which this build lacks; use --synthetic")
    from parallax.data.loader import TokenBatches  # the native loader (csrc/loader)

    return TokenBatches.from_run(run)
