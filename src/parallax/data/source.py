"""Choose the BatchSource of a run: synthetic batches, or real tokens through the native loader."""

from __future__ import annotations

from parallax.config import RunConfig
from parallax.data.synthetic import SyntheticBatches


def make_batch_source(run: RunConfig):
    model = run.model_config
    if run.synthetic:
        return SyntheticBatches(run.seed, run.batch_size, run.seq_len, model.vocab_size, run.eval_batches)
    from parallax.data.loader import TokenBatches  # the native loader (csrc/loader)

    return TokenBatches.from_run(run)
