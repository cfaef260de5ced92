"""Choose the BatchSource of a run: synthetic batches, or real tokens through the native loader.

Several ranks (``RunConfig.gpus`` > 1): global batch g has ``run.global_batch`` rows in a fixed
order (the order one GPU with batch ``global_batch`` would train on), and rank ``rank`` of
``world`` gets rows [rank·R, (rank+1)·R) with R = global_batch / world; a torch rank (world =
gpus) gets ``batch_size`` rows, a JAX process owning several devices the rows of all of them.
Evaluation batches are sliced the same way: the ranks' losses averaged are the 1-GPU loss.
"""

from __future__ import annotations

from parallax.spec.config import RunConfig
from parallax.data.synthetic import SyntheticBatches, rank_rows
from parallax.errors import ParallaxError


def make_batch_source(run: RunConfig, rank: int = 0, world: int = 1):
    """The source of rank ``rank``'s rows of each global batch (all of them for one rank)."""
    try:
        start, stop = rank_rows(run.global_batch, rank, world)
    except ValueError as exc:
        raise ParallaxError(f"{exc}; pick --batch-size and --gpus so that the ranks' slices are equal") from None
    model = run.model_config
    if run.synthetic:
        return SyntheticBatches(run.seed, stop - start, run.seq_len, model.vocab_size, run.eval_batches,
                                global_batch=run.global_batch, rows=(start, stop))
    from parallax.data.loader import TokenBatches  # the native loader (csrc/loader)

    return TokenBatches.from_run(run, rank=rank, world=world)
