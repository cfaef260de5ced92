"""Token files on disk: the layout csrc/loader/token_file.h reads, written and verified here.

A token file is a 64-byte little-endian header (magic ``PLXTOKNS``, format version 1, 2 bytes
per token, token count, vocabulary size, ``<|endoftext|>`` id, 32 reserved zero bytes)
followed by the tokens as uint16. Its checksum is the SHA-256 of the whole file
(``sha256sum train.bin`` agrees).
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from pathlib import Path

import numpy as np

from parallax.errors import ParallaxError
from parallax.store import files

MAGIC = b"PLXTOKNS"
VERSION = 1
HEADER = struct.Struct("<8sIIQII32x")
assert HEADER.size == 64


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


class TokenWriter:
    """Appends uint16 tokens to ``path``; ``finish()`` writes the header with the final count.
    ``path`` is a staging path (``data prepare`` writes into ``<out>/.staging`` and moves the
    files into place once every one is whole, meta.json last), so no reader sees a half file. A
    write that fails (a full or read-only disk) removes the file and is the one-line refusal
    naming it (``store/files.refusal``; ``option``: the option that chose the folder)."""

    def __init__(self, path: Path, vocab_size: int, eos_id: int, option: str | None = None):
        if vocab_size > 65536:
            raise ParallaxError(f"a vocabulary of {vocab_size:,} tokens does not fit uint16 token files")
        self.path, self.vocab_size, self.eos_id, self.option = Path(path), vocab_size, eos_id, option
        self.n_tokens = 0
        self.documents = 0
        try:
            self._file = open(self.path, "wb")
        except OSError as exc:
            raise files.refusal(self.path, exc, option) from None
        self._writing(lambda: self._file.write(self._header()))  # rewritten by finish()

    def _header(self) -> bytes:
        return HEADER.pack(MAGIC, VERSION, 2, self.n_tokens, self.vocab_size, self.eos_id)

    def _writing(self, write) -> None:
        """``write()``, or the refusal with the file removed when the disk refuses it."""
        try:
            write()
        except OSError as exc:
            self.abort()
            raise files.refusal(self.path, exc, self.option) from None

    def write(self, tokens: np.ndarray) -> None:
        tokens = np.ascontiguousarray(tokens, dtype="<u2")
        self._writing(lambda: self._file.write(tokens.tobytes()))
        self.n_tokens += int(tokens.size)

    def finish(self) -> int:
        self._writing(self._finish)
        return self.n_tokens

    def _finish(self) -> None:
        self._file.seek(0)
        self._file.write(self._header())
        self._file.flush()
        files._sync(self._file.fileno(), str(self.path))
        self._file.close()

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # its buffer cannot reach a full disk: the file goes anyway
            self._file.close()
        self.path.unlink(missing_ok=True)


def open_token_file(path: Path):
    """The native memory-mapped TokenFile; its header and size are checked (ParallaxError)."""
    from parallax import _native

    if not Path(path).is_file():
        raise ParallaxError(f"token file {path}: missing; re-run `parallax data prepare --force`")
    try:
        return _native.TokenFile(str(path))
    except _native.LoaderError as exc:
        raise native_error(exc) from None


# The native loader's advice (csrc/loader/token_file.cpp, kFix), worded as a command to type: the
# "--force" of it is data prepare's, and train and benchmark print it too.
NATIVE_FIX = "; re-run `parallax data prepare` (with --force) to rebuild it"


def native_error(exc: Exception) -> ParallaxError:
    """The ParallaxError of a native LoaderError, its advice naming the command of --force."""
    return ParallaxError(str(exc).replace(NATIVE_FIX, "; re-run `parallax data prepare --force` to rebuild it"))


def verify_token_file(path: Path, expected: dict, vocab_size: int, eos_id: int, checksum: bool = True) -> str | None:
    """None when ``path`` is the file ``expected`` (a split entry of meta.json) describes, else
    a sentence naming the file and what is wrong with it."""
    try:
        native = open_token_file(path)
    except ParallaxError as exc:
        return str(exc).split("; re-run")[0]
    if native.n_tokens != expected["tokens"]:
        return f"token file {path}: holds {native.n_tokens:,} tokens, meta.json says {expected['tokens']:,}"
    if (native.vocab_size, native.eos_id) != (vocab_size, eos_id):
        return (f"token file {path}: written for vocabulary {native.vocab_size:,} (eos {native.eos_id}), "
                f"meta.json says {vocab_size:,} (eos {eos_id})")
    if checksum and file_sha256(path) != expected["sha256"]:
        return f"token file {path}: corrupt (its SHA-256 differs from meta.json's)"
    return None
