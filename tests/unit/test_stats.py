"""Statistics against hand-computed values, and the block bootstrap's defining properties."""

from __future__ import annotations

import numpy as np
import pytest

from parallax.analysis import stats


def test_percentile_summary_matches_hand_values():
    s = stats.percentile_summary(range(1, 11))
    # numpy's linear interpolation: p10 at rank 0.9 -> 1 + 0.9 = 1.9; p90 at rank 8.1 -> 9.1
    assert s["median"] == 5.5 and s["p10"] == pytest.approx(1.9) and s["p90"] == pytest.approx(9.1)
    assert s["mean"] == 5.5 and s["min"] == 1 and s["max"] == 10 and s["count"] == 10
    assert s["std"] == pytest.approx(3.0276503540974917)


def test_smoothed_final_is_the_mean_of_the_last_window():
    assert stats.smoothed_final([9, 9, 9, 1, 2, 3], window=3) == 2.0
    assert stats.smoothed_final([4.0], window=10) == 4.0


@pytest.mark.parametrize("n, block", [(1, 1), (7, 2), (8, 2), (27, 3), (28, 4), (180, 6), (1000, 10)])
def test_block_length_is_the_ceiling_of_the_cube_root(n, block):
    assert stats.block_length(n) == block


def test_block_resample_indices_are_runs_of_consecutive_steps():
    idx = stats.block_resample_indices(np.random.default_rng(0), n=12, block=4, size=50)
    assert idx.shape == (50, 12)
    blocks = idx.reshape(50, 3, 4)
    assert (np.diff(blocks, axis=2) == 1).all()  # consecutive inside every block
    assert idx.min() >= 0 and idx.max() <= 11
    # the last block is truncated when n is not a multiple of the block length
    idx = stats.block_resample_indices(np.random.default_rng(0), n=10, block=4, size=5)
    assert idx.shape == (5, 10) and idx.max() <= 9


def test_block_resample_draws_every_start_up_to_n_minus_block():
    # n=5, block=4: two blocks, the second cut to one position, so a resample is
    # [s1, s1+1, s1+2, s1+3, s2] with starts s1, s2 in 0..n-block = {0, 1}: exactly four rows
    # exist. A start range that stops at n-block-1 leaves one row, [0, 1, 2, 3, 0], and never
    # resamples the series' last step.
    idx = stats.block_resample_indices(np.random.default_rng(0), n=5, block=4, size=200)
    rows = {tuple(int(i) for i in row) for row in idx}
    assert rows == {(0, 1, 2, 3, 0), (0, 1, 2, 3, 1), (1, 2, 3, 4, 0), (1, 2, 3, 4, 1)}
    # n=10, block=4: blocks start at positions 0, 4 and 8 of a resample (the third cut to two);
    # every start 0..6 is drawn, and only start 6 reaches position 9.
    idx = stats.block_resample_indices(np.random.default_rng(0), n=10, block=4, size=400)
    assert sorted({int(s) for s in idx[:, [0, 4, 8]].ravel()}) == [0, 1, 2, 3, 4, 5, 6]
    assert sorted({int(i) for i in idx.ravel()}) == list(range(10))


def test_a_block_as_long_as_the_series_reproduces_it():
    idx = stats.block_resample_indices(np.random.default_rng(1), n=6, block=6, size=3)
    assert (idx == np.arange(6)).all()
    reps = stats.bootstrap_replicates([[5.0, 1.0, 3.0, 2.0, 4.0]], stats.row_median, n_boot=50, block=5)
    assert (reps == 3.0).all()


def test_constant_series_give_a_zero_width_interval():
    reps = stats.bootstrap_replicates([[100.0] * 30, [100.0] * 30], stats.row_median, n_boot=200)
    assert stats.percentile_ci(reps) == (100.0, 100.0)


def test_repeats_are_resampled_with_replacement():
    # Two runs at 10 ms and 20 ms: a replicate pools {10,10}, {10,20} or {20,20}, whose medians
    # 10, 15, 20 occur with probabilities 1/4, 1/2, 1/4.
    reps = stats.bootstrap_replicates([[10.0] * 8, [20.0] * 8], stats.row_median, n_boot=4000, block=8, seed=3)
    values, counts = np.unique(reps, return_counts=True)
    assert list(values) == [10.0, 15.0, 20.0]
    assert counts / 4000 == pytest.approx([0.25, 0.5, 0.25], abs=0.03)
    assert stats.percentile_ci(reps) == (10.0, 20.0)


def test_repeats_of_different_lengths_are_padded_not_truncated():
    # 5 ones and 8 threes pooled: median 3; ones alone: 1; threes alone: 3 (P(ones alone) = 1/4).
    reps = stats.bootstrap_replicates([[1.0] * 5, [3.0] * 8], stats.row_median, n_boot=2000, seed=4)
    assert set(np.unique(reps)) == {1.0, 3.0}
    assert np.mean(reps == 1.0) == pytest.approx(0.25, abs=0.04)


def test_block_bootstrap_widens_the_interval_of_an_autocorrelated_series():
    # AR(1) with phi = 0.9: resampling single steps understates the spread of the mean.
    rng = np.random.default_rng(7)
    x = np.zeros(600)
    for t in range(1, 600):
        x[t] = 0.9 * x[t - 1] + rng.standard_normal()
    iid = stats.percentile_ci(stats.bootstrap_replicates([x], stats.row_mean, 1000, block=1, seed=1))
    blocked = stats.percentile_ci(stats.bootstrap_replicates([x], stats.row_mean, 1000, block=30, seed=1))
    assert (blocked[1] - blocked[0]) > 2 * (iid[1] - iid[0])


def test_bootstrap_is_deterministic_for_a_seed():
    data = [[1.0, 5.0, 2.0, 8.0, 3.0, 9.0], [4.0, 4.5, 6.0, 2.5]]
    a = stats.bootstrap_replicates(data, stats.row_median, 300, seed=11)
    b = stats.bootstrap_replicates(data, stats.row_median, 300, seed=11)
    assert (a == b).all()


def test_bootstrap_in_chunks_equals_one_pass(monkeypatch):
    data = [list(np.arange(50.0)), list(np.arange(50.0) * 2)]
    whole = stats.bootstrap_replicates(data, stats.row_mean, 64, seed=2)
    monkeypatch.setattr(stats, "_CHUNK_CELLS", 100)  # one replicate per chunk
    chunked = stats.bootstrap_replicates(data, stats.row_mean, 64, seed=2)
    assert whole.shape == chunked.shape == (64,)
    assert np.isfinite(chunked).all()
    assert chunked.min() >= 0 and chunked.max() <= 98


def test_shared_repeat_choice_pairs_two_cells():
    choice = stats.choose_repeats(5, 500, 3)
    a = stats.bootstrap_replicates([[1.0] * 4, [2.0] * 4, [3.0] * 4], stats.row_mean, 500, block=4,
                                   repeat_choice=choice)
    b = stats.bootstrap_replicates([[1.5] * 4, [2.5] * 4, [3.5] * 4], stats.row_mean, 500, block=4,
                                   repeat_choice=choice)
    assert np.allclose(a - b, -0.5)  # paired: the difference never varies
    with pytest.raises(ValueError):
        stats.bootstrap_replicates([[1.0]], stats.row_mean, 10, repeat_choice=np.zeros((10, 2), dtype=int))


def test_percentile_ci_hand_values():
    assert stats.percentile_ci(np.arange(101.0), level=0.9) == pytest.approx((5.0, 95.0))
    assert stats.percentile_ci(np.arange(101.0)) == pytest.approx((2.5, 97.5))


def test_interval_excludes():
    assert stats.interval_excludes((1.1, 1.3), 1.0)
    assert not stats.interval_excludes((0.9, 1.3), 1.0)
    assert not stats.interval_excludes((-0.01, 0.02), 0.0)
    assert not stats.interval_excludes(None, 0.0)


def test_tokens_per_second_from_milliseconds():
    assert stats.tokens_per_s_from_ms(32 * 1024, 100.0) == pytest.approx(327_680.0)
    assert list(stats.tokens_per_s_from_ms(1000, [1.0, 2.0])) == [1_000_000.0, 500_000.0]


def test_empty_input_is_an_error():
    with pytest.raises(ValueError):
        stats.percentile_summary([])
    with pytest.raises(ValueError):
        stats.bootstrap_replicates([[]], stats.row_mean)
