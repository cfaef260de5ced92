"""engines/maxtext/feed.py: our loader's batches as MaxText's, handed to its DataLoader."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from parallax.engines.maxtext import feed


def test_a_batch_is_what_megatron_split_makes_of_the_windows():
    windows = np.arange(2 * 6, dtype=np.int32).reshape(2, 6)  # B=2, S=5
    positions = np.broadcast_to(np.arange(5, dtype=np.int32), (2, 5))
    ones = np.ones((2, 5), dtype=np.int32)
    batch = feed.as_maxtext(windows, positions, ones)
    assert batch["inputs"].tolist() == [[0, 1, 2, 3, 4], [6, 7, 8, 9, 10]]
    assert batch["targets"].tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 10, 11]]
    assert batch["inputs"].flags.c_contiguous and batch["targets"].flags.c_contiguous
    assert batch["inputs_position"].tolist() == [[0, 1, 2, 3, 4]] * 2
    assert batch["targets_segmentation"].tolist() == [[1] * 5] * 2
    windows[0, 0] = 99  # the loader refills its ring: the batch handed over keeps its tokens
    assert batch["inputs"][0, 0] == 0


class Loader:
    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)


def test_the_feed_hands_over_the_loaders_batches_in_order_and_counts_them():
    drawn = [np.full((3, 9), k, dtype=np.int32) for k in range(4)]
    fed = feed.Feed(Loader(drawn), batch_size=3, seq_len=8)
    got = [fed.next_batch() for _ in range(4)]
    assert [int(b["inputs"][0, 0]) for b in got] == [0, 1, 2, 3]
    assert got[0]["inputs_position"].shape == (3, 8) and got[0]["inputs_position"][2].tolist() == list(range(8))
    assert fed.record() == {"batches": 4, "first_batch_sha256": hashlib.sha256(drawn[0].tobytes()).hexdigest()}


def test_install_replaces_the_one_method_and_refuses_a_loader_without_it():
    class DataLoader:
        def load_next_batch_pre_sharding(self):
            return "maxtext's own"

    fed = feed.Feed(Loader([np.zeros((1, 3), dtype=np.int32)]), batch_size=1, seq_len=2)
    feed.install(DataLoader, fed)
    loader = DataLoader()
    assert loader.load_next_batch_pre_sharding()["targets"].shape == (1, 2)
    assert loader.last_batch["inputs"].shape == (1, 2) and fed.count == 1

    class Older:
        pass

    with pytest.raises(RuntimeError, match="no load_next_batch_pre_sharding .* run with --tuning grain"):
        feed.install(Older, fed)


@pytest.mark.parametrize("record, steps, why", [
    (None, 5, "MaxText's process printed no count of Parallax's batches: it may have trained on its own"),
    ({"batches": 4}, 5, "MaxText took 4 of Parallax's batches in 5 steps"),
    ({"batches": 5, "first_batch_sha256": "ab"}, 5, None),
])
def test_a_run_that_did_not_take_every_batch_is_named(record, steps, why):
    assert feed.fed(record, steps) == why


def test_the_child_opens_the_same_loader_from_the_spec(prepared, monkeypatch):
    """spec() in the engine, from_environment() in MaxText's process: the same batches, in order."""
    from parallax.data.loader import TokenBatches
    from parallax.spec.config import RunConfig

    run = RunConfig(framework="maxtext", model="tiny", batch_size=4, seq_len=32, steps=3, seed=7)
    with TokenBatches(prepared, batch_size=4, seq_len=32, seed=7, vocab_size=10_000, steps=3, pin=False) as ours:
        spec = feed.spec(ours, run)
        expected = [np.array(w) for w, _ in zip(ours, range(3))]
    assert spec == {"directory": str(prepared.directory), "batch_size": 4, "seq_len": 32, "seed": 7,
                    "vocab_size": 10_000, "steps": 3, "epochs": spec["epochs"]}
    monkeypatch.setenv(feed.FEED_ENV, json.dumps(spec))
    fed = feed.from_environment()
    got = [fed.next_batch() for _ in range(3)]
    fed.loader.close()
    for batch, windows in zip(got, expected):
        assert np.array_equal(batch["inputs"], windows[:, :-1]) and np.array_equal(batch["targets"], windows[:, 1:])


def test_no_spec_no_feed(monkeypatch):
    monkeypatch.delenv(feed.FEED_ENV, raising=False)
    assert feed.from_environment() is None
