"""Real-token batches for training: a prepared directory read by the native loader.

``TokenBatches`` is the BatchSource (engines/base.py) of runs with ``--data`` or ``--hf``.
Iterating it yields [batch_size, seq_len + 1] int32 NumPy arrays made by the C++ loader
(csrc/loader) on a background thread, straight from its ring of host buffers (pinned where
the CUDA driver is present): no copy and no per-step Python conversion. Batch k depends only
on (train.bin, seed, batch_size, seq_len), so the torch and JAX engines train on the same
tokens. docs/data.md states the sampling algorithm.

Pinning: ``pinned`` is True when the CUDA driver reports every ring slot page-locked
(cuMemHostRegister, checked with cuPointerGetAttribute). torch's ``Tensor.is_pinned()`` is
no such check: it answers False for every pointer until torch has initialised CUDA.

Several ranks: ``rank`` of ``world`` gets rows [rank·B, (rank+1)·B) of each global batch of
B·world rows (B = ``batch_size``), served by the native loader itself (its draw order is that of
one loader of batch B·world), and the same rows of each evaluation batch.

Lifetime: a yielded array stays valid while it is referenced, and its buffer is not refilled
until two more batches have been drawn, so a non-blocking host-to-device copy of batch k may
still be running while batch k + 1 is drawn.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np

from parallax.store.cache import cache_root
from parallax.spec.config import DataConfig, RunConfig
from parallax.data.prepare import META_FILE, PreparedData, prepare
from parallax.data.sample import TRAIN, VALID, allowed_epochs, is_sample
from parallax.data.sources import corpus_files, count_documents, file_source
from parallax.data.tokenfile import native_error, open_token_file
from parallax.errors import ParallaxError, say


class TokenBatches:
    """Training batches from ``data``'s train.bin and fixed evaluation batches from its
    validation.bin. ``steps`` (with ``epochs``) is checked against the tokens available."""

    def __init__(self, data: PreparedData, *, batch_size: int, seq_len: int, seed: int, vocab_size: int,
                 eval_batches: int = 0, steps: int | None = None, epochs: float | None = None,
                 start_step: int = 0, slots: int = 4, pin: bool = True, rank: int = 0, world: int = 1):
        from parallax import _native

        if data.vocab_size != vocab_size:
            raise ParallaxError(
                f"{data.directory} was tokenized with a {data.vocab_size:,}-token vocabulary but the model has "
                f"{vocab_size:,}; prepare it again with `parallax data prepare --vocab-size {vocab_size}`"
            )
        self.data, self.batch_size, self.seq_len, self.seed = data, batch_size, seq_len, seed
        self.rank, self.world, self.global_batch = rank, world, batch_size * world
        train = open_token_file(data.path("train"))
        self.n_windows = train.num_windows(seq_len)
        if steps is not None:
            check_enough_tokens(str(data.path("train")), train.n_tokens, self.n_windows, self.global_batch, seq_len,
                                start_step + steps, epochs)
        self._eval = self._eval_batches(eval_batches)
        try:
            self._loader = _native.BatchLoader(str(data.path("train")), batch_size, seq_len, seed,
                                               start_batch=start_step, slots=slots, pin=pin, rank=rank, world=world)
        except _native.LoaderError as exc:
            raise native_error(exc) from None
        # Every slot page-locked, by the driver's own account: engines copy batches to the
        # device straight from the ring (torch's is_pinned() cannot say so before torch has
        # initialised CUDA). A slot added if the ring grows is pinned the same way; were that
        # to fail, a non-blocking copy from it would still be correct, only staged by the driver.
        self.pinned: bool = bool(self._loader.info()["pinned_verified"])
        self.description = (f"tokens({data.directory}, {train.n_tokens:,} train tokens, "
                            f"tokenizer {data.meta['tokenizer']['sha256'][:12]}, seed={seed})")
        if world > 1:
            self.description += f", rows {rank * batch_size}:{(rank + 1) * batch_size} of {self.global_batch}"

    @classmethod
    def from_run(cls, run: RunConfig, log=None, rank: int = 0, world: int = 1) -> "TokenBatches":
        """The BatchSource of a ``--data PATH`` or ``--hf`` run: rank ``rank``'s rows of each of
        its global batches (``run.global_batch`` rows, split into ``world`` equal slices)."""
        return cls(
            resolve_data(run, log), batch_size=run.global_batch // world, seq_len=run.seq_len, seed=run.seed,
            vocab_size=run.model_config.vocab_size, eval_batches=run.eval_batches if run.eval_every > 0 else 0,
            steps=run.steps, epochs=allowed_epochs(run.data, run.epochs), rank=rank, world=world,
        )

    def _eval_batches(self, count: int) -> list[np.ndarray]:
        """``count`` batches of windows spread evenly over validation.bin, independent of the
        seed: every run of one global batch is evaluated on the same tokens (this rank's rows
        of each global evaluation batch)."""
        if count <= 0:
            return []
        path = self.data.path("validation")
        valid = open_token_file(path)
        available = valid.num_windows(self.seq_len)
        rows = self.global_batch
        needed = count * rows
        if available < needed:
            raise ParallaxError(
                f"{path} holds {valid.n_tokens:,} validation tokens, {available:,} sequences of "
                f"{self.seq_len + 1} tokens; {count} eval batches x batch {rows} need {needed:,} "
                f"sequences ({needed * self.seq_len + 1:,} tokens); lower --eval-batches or prepare more validation text"
            )
        windows = ((np.arange(needed, dtype=np.int64) * available) // needed).reshape(count, rows)
        mine = windows[:, self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
        tokens = valid.gather(np.ascontiguousarray(mine).reshape(-1), self.seq_len)
        return [tokens[i * self.batch_size:(i + 1) * self.batch_size] for i in range(count)]

    def __iter__(self):
        return iter(self._loader)

    def eval_batches(self) -> list[np.ndarray]:
        return self._eval

    def info(self) -> dict:
        """The loader and data facts a result may record (pinning, ring, token counts, hashes)."""
        meta = self.data.meta
        return {
            "directory": str(self.data.directory),
            "train_tokens": meta["splits"]["train"]["tokens"],
            "validation_tokens": meta["splits"]["validation"]["tokens"],
            "train_sha256": meta["splits"]["train"]["sha256"],
            "tokenizer_sha256": meta["tokenizer"]["sha256"],
            "windows": self.n_windows,
            "loader": self._loader.info(),
        }

    def close(self) -> None:
        self._loader.close()

    def __enter__(self) -> "TokenBatches":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_enough_tokens(path: str, n_tokens: int, n_windows: int, batch_size: int, seq_len: int, steps: int,
                        epochs: float | None) -> None:
    """ParallaxError unless ``steps`` batches fit in the data, repeated at most ``epochs`` times
    (None: no token is used twice)."""
    needed = steps * batch_size
    allowed = n_windows if epochs is None else math.floor(n_windows * epochs)
    if needed <= allowed:
        return
    tokens_needed = needed * seq_len + 1
    have = (f"{path} holds {n_tokens:,} training tokens, {n_windows:,} sequences of {seq_len + 1} tokens; "
            f"{steps:,} steps x batch {batch_size} need {needed:,} sequences ({tokens_needed:,} tokens)")
    if n_windows == 0:
        raise ParallaxError(f"{have}: give a larger corpus or a smaller --seq-len")
    epochs_needed = math.ceil(needed / n_windows * 100) / 100
    within = "" if epochs is None else f" within --epochs {epochs:g}"
    raise ParallaxError(
        f"{have}{within}: give a larger corpus, fewer --steps or a smaller --batch-size, "
        f"or allow repeated tokens with --epochs {epochs_needed:g}"
    )


# ----------------------------------------------------------------------------- --data resolution


def cache_dir(inputs: list[str], options: DataConfig, hold_out: bool = True) -> Path:
    """One cache directory per (inputs as given, preparation settings); the content check of
    ``prepare`` catches an input that changed in place."""
    key = {"inputs": [str(Path(p).resolve()) if Path(p).exists() else p for p in inputs],
           "options": {k: v for k, v in vars(options).items()}}
    if not hold_out:
        key["hold_out"] = False
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=list).encode()).hexdigest()[:16]
    return cache_root() / "data" / digest


def _stderr(message: str) -> None:
    say(f"parallax: {message}")


def resolve_data(run: RunConfig, log=None) -> PreparedData:
    """The prepared data behind ``--data PATH`` (a prepared directory, or a raw corpus that is
    prepared once into the cache) or ``--hf`` (``run.data`` None: TinyStories streamed)."""
    log = log or _stderr
    vocab = run.model_config.vocab_size
    if run.data is None:
        options = DataConfig(vocab_size=vocab, hf=True)
        return _prepare_cached([options.hf_dataset], options, log)
    if is_sample(run.data):  # the TinyStories sample shipped in the package
        options = DataConfig(vocab_size=vocab, valid=(str(VALID),))
        return _prepare_cached([str(TRAIN)], options, log)
    path = Path(run.data)
    if not path.exists():
        raise ParallaxError(f"--data {path}: no such file or directory")
    if path.is_dir() and (path / META_FILE).exists():
        return PreparedData.load(path)
    return prepare_raw(path, run, log)


HOLD_OUT_EVERY = round(1 / DataConfig().valid_fraction)  # what `data prepare` holds out: every 100th document


def prepare_raw(path: Path, run: RunConfig, log) -> PreparedData:
    """Raw text for ``train --data``, prepared once into the cache. Without evaluation every
    document trains. With it, every n-th document is held out for validation: n = 100 (as
    ``data prepare``), or the corpus's document count when smaller, lowered from the measured
    split until the evaluation batches have their sequences; each choice is its own cache."""
    vocab = run.model_config.vocab_size
    if run.eval_every == 0:
        return _prepare_cached([str(path)], DataConfig(vocab_size=vocab), log, hold_out=False)
    needed = run.eval_batches * run.global_batch
    sources = [file_source(p, DataConfig().text_field) for p in corpus_files([str(path)], "--data")]
    documents = count_documents(sources, HOLD_OUT_EVERY)
    if documents < 2:
        raise ParallaxError(
            f"--data {path}: {documents} document{'s' * (documents != 1)}, nothing to hold out for evaluation; "
            "separate its documents by blank lines or <|endoftext|>, or pass --eval-every 0")
    every = min(HOLD_OUT_EVERY, documents)
    while True:
        data = _prepare_cached([str(path)], DataConfig(vocab_size=vocab, valid_fraction=1 / every), log)
        valid, train = data.meta["splits"]["validation"], data.meta["splits"]["train"]
        have = max(0, (valid["tokens"] - 1) // run.seq_len)
        if have >= needed:
            return data
        if every == 2:
            raise ParallaxError(
                f"--data {path}: every 2nd document held out gives {have:,} validation sequences of "
                f"{run.seq_len + 1} tokens; {run.eval_batches} eval batches x batch {run.global_batch} need "
                f"{needed:,}; lower --eval-batches, --batch-size or --seq-len, or pass --eval-every 0")
        wanted = math.ceil(needed * run.seq_len * 1.25 * valid["documents"] / valid["tokens"])  # held-out documents
        every = max(2, min(every - 1, (train["documents"] + valid["documents"]) // wanted))
        held = f"{valid['documents']:,} held-out document" + (" gives" if valid["documents"] == 1 else "s give")
        log(f"{held} {have:,} of the {needed:,} evaluation sequences; "
            f"holding out every {every}-th document instead")


def _prepare_cached(inputs: list[str], options: DataConfig, log, hold_out: bool = True) -> PreparedData:
    out = cache_dir(inputs, options, hold_out)
    if not (out / META_FILE).exists():
        log(f"preparing {', '.join(inputs)} into {out} (once; later runs reuse it)")
    result = prepare(inputs, out, options, rebuild_stale=True, show_progress=sys.stderr.isatty(), log=log,
                     hold_out=hold_out)
    for warning in result.warnings:
        log(f"warning: {warning}")
    return result.data
