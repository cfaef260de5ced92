"""Each rank's rows of the same global batch (``make_batch_source(run, rank, world)``): the ranks'
slices, concatenated in rank order, are exactly the batch one process of the global batch size
gets, for synthetic and real tokens (the native loader serves the slice), training and eval."""

from __future__ import annotations

import numpy as np
import pytest

from parallax.spec.config import RunConfig
from parallax.data.source import make_batch_source
from parallax.data.synthetic import rank_rows, synthetic_batch
from parallax.errors import ParallaxError


def take(source, n: int) -> list[np.ndarray]:
    return [b.copy() for b, _ in zip(source, range(n))]


def run_of(per_gpu: int, gpus: int, **more) -> RunConfig:
    return RunConfig(model="tiny", batch_size=per_gpu, seq_len=16, seed=5, gpus=gpus, eval_batches=3,
                     eval_every=2, steps=6, warmup=1, **more)


def test_rank_rows_are_equal_consecutive_slices_in_rank_order():
    assert [rank_rows(8, r, 2) for r in range(2)] == [(0, 4), (4, 8)]
    assert [rank_rows(12, r, 3) for r in range(3)] == [(0, 4), (4, 8), (8, 12)]
    assert rank_rows(8, 0, 1) == (0, 8)
    with pytest.raises(ValueError):
        rank_rows(8, 2, 2)


def test_one_rank_sees_the_same_synthetic_tokens_as_before_slicing_existed():
    source = make_batch_source(run_of(4, 1))
    for k, batch in enumerate(take(source, 3)):
        np.testing.assert_array_equal(batch, synthetic_batch(5, k, 4, 16, 10_000))
    assert source.description == "synthetic(seed=5)"


@pytest.mark.parametrize("per_gpu, gpus", [(4, 2), (2, 4), (3, 3)])
def test_synthetic_rank_slices_tile_the_one_gpu_global_batch(per_gpu, gpus):
    whole = make_batch_source(run_of(per_gpu * gpus, 1))
    ranks = [make_batch_source(run_of(per_gpu, gpus), r, gpus) for r in range(gpus)]
    expected, parts = take(whole, 4), [take(s, 4) for s in ranks]
    for k in range(4):
        np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), expected[k])
        assert all(p[k].shape == (per_gpu, 17) and p[k].flags.c_contiguous for p in parts)
    for i, batch in enumerate(whole.eval_batches()):
        np.testing.assert_array_equal(np.concatenate([s.eval_batches()[i] for s in ranks]), batch)
    assert ranks[1].description.endswith(f"rows {per_gpu}:{2 * per_gpu} of {per_gpu * gpus}")


def test_a_process_owning_several_devices_gets_their_rows_together():
    """JAX: one process per host over its devices; world counts processes, not GPUs."""
    whole = take(make_batch_source(run_of(8, 1)), 2)
    first, second = (take(make_batch_source(run_of(2, 4), r, 2), 2) for r in range(2))
    for k in range(2):
        np.testing.assert_array_equal(np.concatenate([first[k], second[k]]), whole[k])
        assert first[k].shape == (4, 17)


def test_a_global_batch_that_does_not_split_is_one_line():
    with pytest.raises(ParallaxError, match="does not split into 3 equal slices"):
        make_batch_source(run_of(4, 2), 0, 3)


def test_native_loader_rank_slices_tile_the_one_gpu_global_batch(prepared):
    from parallax.data.loader import TokenBatches

    def source(per_gpu, rank=0, world=1):
        return TokenBatches(prepared, batch_size=per_gpu, seq_len=32, seed=9, vocab_size=10_000,
                            eval_batches=4, rank=rank, world=world)

    whole, ranks = source(6), [source(2, r, 3) for r in range(3)]
    try:
        expected, parts = take(whole, 12), [take(s, 12) for s in ranks]  # crosses no epoch, many batches
        for k in range(12):
            np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), expected[k])
        for i, batch in enumerate(whole.eval_batches()):
            np.testing.assert_array_equal(np.concatenate([s.eval_batches()[i] for s in ranks]), batch)
        assert ranks[2].description.endswith("rows 4:6 of 6")
        assert ranks[0]._loader.rank == 0 and ranks[2]._loader.world == 3
    finally:
        for s in (whole, *ranks):
            s.close()


def test_native_loader_slices_across_epochs_match_the_documented_order(prepared):
    """Many epochs of a short window count: rank r's row i of batch k is draw k*B*W + r*B + i."""
    from parallax import _native
    from parallax.data.loader import TokenBatches
    from parallax.data.tokenfile import open_token_file

    seq = 1000  # few windows: epochs turn inside batches
    train = open_token_file(prepared.path("train"))
    n = train.num_windows(seq)
    per_gpu, world, rank = 3, 2, 1
    source = TokenBatches(prepared, batch_size=per_gpu, seq_len=seq, seed=4, vocab_size=10_000,
                          rank=rank, world=world)
    try:
        for k, batch in enumerate(take(source, 2 * n)):
            draws = [k * per_gpu * world + rank * per_gpu + i for i in range(per_gpu)]
            windows = [int(_native.window_order(n, 4, d // n)[d % n]) for d in draws]
            np.testing.assert_array_equal(batch, train.gather(np.array(windows, dtype=np.int64), seq))
    finally:
        source.close()


def test_the_token_check_counts_the_global_batch(prepared):
    from parallax.data.loader import TokenBatches
    from parallax.data.tokenfile import open_token_file

    n = open_token_file(prepared.path("train")).num_windows(32)
    steps = n // 4 + 1  # fits one rank of batch 2, not two ranks' global batch of 4
    TokenBatches(prepared, batch_size=2, seq_len=32, seed=0, vocab_size=10_000, steps=steps // 2).close()
    with pytest.raises(ParallaxError, match=f"x batch 4 need"):
        TokenBatches(prepared, batch_size=2, seq_len=32, seed=0, vocab_size=10_000, steps=steps, world=2, rank=1)
