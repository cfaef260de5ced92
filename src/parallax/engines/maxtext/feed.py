"""Real tokens into MaxText at full speed: our loader's batches handed to MaxText's DataLoader.

MaxText 0.2.5 reads our tokens through Grain's ``mmap_npy`` pipeline (``data.py``), which hands
its worker processes' samples to the training loop one at a time (``mp_prefetch`` before
``batch``); on the H200 that leaves MaxText input-bound on real tokens, with eight workers or
none (docs/results/2026-12-04-h200-c/: 478k and 485k tokens/s against 624k and 611k synthetic).
So by default the engine feeds MaxText the way it feeds torch and JAX: the native loader
(``data/loader.py``, a background thread filling a ring of host buffers) makes each batch of
``batch_size`` windows, in the same order as every other engine's (batch k depends only on the
tokens, the seed, the batch and the sequence length).

How: MaxText's config says ``dataset_type: synthetic`` (so it builds no Grain pipeline), and
MaxText's process (``child.py``) replaces ``DataLoader.load_next_batch_pre_sharding``, the one
call of its training loop that takes a batch off its iterator, with ``Feed.next_batch``. MaxText's
own ``load_next_batch`` then places the batch on the devices with its input sharding, as it does a
Grain batch. The batch is what Grain's pipeline would make of the same windows with the engine's
keys (``reset_attention_mask: false``, ``eod_mask_loss: false``; MaxText's
``MegatronSplitInputsTargets``): ``inputs`` = window[:-1], ``targets`` = window[1:], positions
0..S-1, segmentation all ones (every position attends causally across ``<|endoftext|>`` and counts
in the loss). ``--tuning grain`` (and the other Grain knob sets) feed through Grain instead.

The parent hands the loader's arguments over in ``FEED_ENV`` (JSON); the child prints
``FEED_TAG`` + JSON once training ends (the batches handed over, the first batch's SHA-256), and
the engine refuses a run whose count is not its step count: a MaxText that never called the
replaced method would have trained on its own synthetic batch.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

FEED_ENV = "PARALLAX_MAXTEXT_FEED"  # the loader's arguments (spec), JSON, in MaxText's process
FEED_TAG = "[parallax] fed batches: "  # + JSON: Feed.record(), printed by child.py once training has ended

LOADER_METHOD = "load_next_batch_pre_sharding"  # MaxText 0.2.5's DataLoader: next(iterator), reuse, checks
DESCRIPTION = ("Parallax's native loader (the batches torch and JAX train on) into MaxText's DataLoader "
               "(engines/maxtext/feed.py), MaxText's dataset_type synthetic never read")


def spec(batches, run) -> dict:
    """What the child needs to open the same loader as ``batches`` (a data.loader.TokenBatches)."""
    return {"directory": str(batches.data.directory), "batch_size": run.global_batch, "seq_len": run.seq_len,
            "seed": run.seed, "vocab_size": run.model_config.vocab_size, "steps": run.steps,
            "epochs": batches_epochs(run)}


def batches_epochs(run) -> float | None:
    from parallax.data.sample import allowed_epochs

    return allowed_epochs(run.data, run.epochs)


def open_loader(feed: dict):
    """The TokenBatches of ``feed`` (``spec``'s dict). Its ring is not page-locked: each batch is
    copied into fresh arrays (``as_maxtext``), which JAX may still be reading from when the ring's
    slot is refilled, and no CUDA call is made before MaxText sets up its devices."""
    from pathlib import Path

    from parallax.data.loader import TokenBatches
    from parallax.data.prepare import META_FILE, PreparedData

    directory = Path(feed["directory"])
    data = PreparedData(directory, json.loads((directory / META_FILE).read_text()))
    return TokenBatches(data, batch_size=feed["batch_size"], seq_len=feed["seq_len"], seed=feed["seed"],
                        vocab_size=feed["vocab_size"], steps=feed["steps"], epochs=feed["epochs"], pin=False)


def as_maxtext(windows: np.ndarray, positions: np.ndarray, ones: np.ndarray) -> dict:
    """MaxText's batch of [B, S + 1] ``windows``: the six arrays its training step takes."""
    return {"inputs": np.ascontiguousarray(windows[:, :-1]), "inputs_position": positions,
            "inputs_segmentation": ones, "targets": np.ascontiguousarray(windows[:, 1:]),
            "targets_position": positions, "targets_segmentation": ones}


class Feed:
    """Batches of the loader in order, as MaxText's; counts them and fingerprints the first."""

    def __init__(self, loader, batch_size: int, seq_len: int):
        self.loader, self.windows = loader, iter(loader)
        self.positions = np.ascontiguousarray(np.broadcast_to(np.arange(seq_len, dtype=np.int32),
                                                              (batch_size, seq_len)))
        self.ones = np.ones((batch_size, seq_len), dtype=np.int32)
        self.count, self.first_sha256 = 0, None

    def next_batch(self) -> dict:
        windows = next(self.windows)
        if self.first_sha256 is None:
            self.first_sha256 = hashlib.sha256(np.ascontiguousarray(windows, dtype=np.int32).tobytes()).hexdigest()
        self.count += 1
        return as_maxtext(windows, self.positions, self.ones)

    def record(self) -> dict:
        return {"batches": self.count, "first_batch_sha256": self.first_sha256}


def install(loader_class, feed: Feed) -> None:
    """``loader_class.load_next_batch_pre_sharding`` returns ``feed``'s batches; a MaxText whose
    DataLoader lacks that method stops here, before it could train on its own batch."""
    if not hasattr(loader_class, LOADER_METHOD):
        raise RuntimeError(f"MaxText's DataLoader has no {LOADER_METHOD} (a MaxText other than 0.2.5?): Parallax "
                           "cannot hand it batches; run with --tuning grain to feed it through Grain")

    def load_next_batch_pre_sharding(self):
        self.last_batch = feed.next_batch()
        return self.last_batch

    setattr(loader_class, LOADER_METHOD, load_next_batch_pre_sharding)


def from_environment() -> Feed | None:
    """The child's Feed when the engine asked for one (``FEED_ENV``), else None."""
    text = os.environ.get(FEED_ENV)
    if not text:
        return None
    feed = json.loads(text)
    return Feed(open_loader(feed), feed["batch_size"], feed["seq_len"])


def fed(record: dict | None, steps: int) -> str | None:
    """Why a fed run did not train on our batches (None when it did): ``record`` is the child's
    FEED_TAG line, None when it printed none."""
    if record is None:
        return "MaxText's process printed no count of Parallax's batches: it may have trained on its own"
    if record.get("batches") != steps:
        return f"MaxText took {record.get('batches')} of Parallax's batches in {steps} steps"
    return None
