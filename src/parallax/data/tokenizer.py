"""The tokenizer: a byte-level BPE of exactly ``vocab_size`` tokens, ``<|endoftext|>`` included.

Trained with Hugging Face ``tokenizers`` on the training text (GPT-2 style byte-level
pre-tokenization, every one of the 256 bytes in the base alphabet, so any UTF-8 text
round-trips). ``<|endoftext|>`` is id 0. Training is deterministic: the same text in the same
order gives the same merges, hence the same ``tokenizer.json`` bytes and hash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from parallax.errors import ParallaxError, require_module

EOT = "<|endoftext|>"


def _tokenizers():
    return require_module("tokenizers", "data")


RESERVED = "<|reserved_{}|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int, pad: bool = False):
    """A new byte-level BPE trained on ``texts``. When the text is too small to yield
    ``vocab_size`` distinct tokens: with ``pad``, the vocabulary is filled up to ``vocab_size``
    with reserved special tokens (``reserved_tokens`` counts them; they never occur in text, so
    the model's extra embedding rows are never used); without, a ParallaxError."""
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    got = tokenizer.get_vocab_size(with_added_tokens=True)
    if got < vocab_size and pad:
        tokenizer.add_special_tokens([RESERVED.format(i) for i in range(vocab_size - got)])
    elif got != vocab_size:
        raise ParallaxError(
            f"the training text yields only {got:,} distinct BPE tokens, not {vocab_size:,}: give more text "
            "(several files or a directory), or pass --tokenizer tokenizer.json"
        )
    return tokenizer


def reserved_tokens(tokenizer) -> int:
    """How many reserved tokens ``train_tokenizer(pad=True)`` added to fill the vocabulary."""
    return sum(1 for t in tokenizer.get_added_tokens_decoder().values()
               if t.content.startswith("<|reserved_") and t.content.endswith("|>"))


def load_tokenizer(path: str | Path, vocab_size: int):
    """A given tokenizer.json, checked to have exactly ``vocab_size`` tokens and ``<|endoftext|>``."""
    path = Path(path)
    if not path.is_file():
        raise ParallaxError(f"--tokenizer {path}: no such file")
    try:
        tokenizer = _tokenizers().Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises a bare Exception for bad JSON
        raise ParallaxError(f"--tokenizer {path}: not a Hugging Face tokenizer.json ({exc})") from None
    check_tokenizer(tokenizer, vocab_size, str(path))
    return tokenizer


def check_tokenizer(tokenizer, vocab_size: int, where: str) -> None:
    got = tokenizer.get_vocab_size(with_added_tokens=True)
    if got != vocab_size:
        raise ParallaxError(
            f"{where} has {got:,} tokens but the model's vocabulary is {vocab_size:,}; "
            f"use a tokenizer of exactly {vocab_size:,} tokens (or let `parallax data prepare` train one)"
        )
    if tokenizer.token_to_id(EOT) is None:
        raise ParallaxError(f"{where} has no {EOT} token, which separates documents; add it as a special token")
    if max(tokenizer.get_vocab(with_added_tokens=True).values()) >= min(vocab_size, 65536):
        raise ParallaxError(f"{where} uses token ids outside [0, {vocab_size:,}); its ids must be contiguous")


def eos_id(tokenizer) -> int:
    return tokenizer.token_to_id(EOT)

