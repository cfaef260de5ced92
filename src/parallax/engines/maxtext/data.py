"""Our prepared tokens as MaxText input: Grain's ``mmap_npy`` pipeline, in our batch order.

MaxText 0.2.5 reads Megatron-LM indexed datasets (``grain_file_type: mmap_npy``): a ``.bin``
of tokens, a ``.idx`` of sequences (size, byte offset) and three ``.npy`` indices —
``document_index`` (document order), ``sample_index`` (sample i spans document positions
``sample_index[i]`` .. ``sample_index[i + 1]`` inclusive, plus one token: ``S + 1`` tokens) and
``shuffle_index`` (the i-th sample read). Its ``MegatronSplitInputsTargets`` makes
``inputs = tokens[:-1]``, ``targets = tokens[1:]``; with ``reset_attention_mask: false`` and
``eod_mask_loss: false`` every position attends causally across ``<|endoftext|>`` and counts in
the loss — exactly our packed windows (docs/data.md). It needs only NumPy and Grain (no
TensorFlow, no ``datasets``, no ``array_record``).

What is written (no token is copied):

- ``train.bin``: a symbolic link to our ``train.bin``; the 64-byte header is skipped by the
  byte offsets of the ``.idx``.
- ``train.idx``: n + 1 sequences, one per window start: sequence d is tokens ``[d·S, d·S + S)``
  (the last one the remainder), so window w is sequence w plus the first token of w + 1.
- ``{hash}-document_index.npy`` = 0..n, ``{hash}-sample_index.npy`` = rows ``[w, 0]`` for
  w = 0..n, ``{hash}-shuffle_index.npy`` = the windows of draws 0 .. steps·B − 1 in our order
  (``_native.window_order``, epoch by epoch). MaxText batch k is then our batch k, row for row.

Each file is written through ``store/files.py`` (beside its name, renamed over it; the link
too), so a full or read-only disk is one line naming the file.

MaxText picks index files by a hash of its own parameters; the engine computes it with
MaxText's own functions and proves, before training, that MaxText finds our files
(``engine.verify_cache_hit``) — otherwise it would silently build indices in its own order.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Callable

import numpy as np

from parallax.spec.config import RunConfig
from parallax.data.tokenfile import HEADER
from parallax.store import files

MMAP_MAGIC = b"MMIDIDX\x00\x00"
MMAP_VERSION = 1
UINT16_CODE = 8  # Megatron's dtype code of uint16
PREFIX = "train"
INDEX_NAMES = ("document_index", "sample_index", "shuffle_index")
OPTION = "--output-dir"  # the files go under the run's folder

# (bin/idx prefix, number of samples, sequence length, seed) -> MaxText's index hash
IndexHash = Callable[[str, int, int, int], str]


def token_count(train_bin: Path) -> tuple[int, int]:
    """(tokens, eos id) from a Parallax token file's header."""
    with open(train_bin, "rb") as f:
        _, _, _, n_tokens, _, eos_id = HEADER.unpack(f.read(HEADER.size))
    return n_tokens, eos_id


def write_idx(path: Path, n_tokens: int, seq_len: int) -> int:
    """A Megatron ``.idx`` over a Parallax ``train.bin``: one sequence per window start; the
    number of windows n (sequences: n + 1)."""
    n = (n_tokens - 1) // seq_len
    starts = np.arange(n + 1, dtype=np.int64) * seq_len
    sizes = np.full(n + 1, seq_len, dtype=np.int32)
    sizes[-1] = n_tokens - n * seq_len
    pointers = HEADER.size + 2 * starts
    doc_idx = np.arange(n + 2, dtype=np.int64)  # Megatron: documents + 1 entries
    with files.replacing(path, OPTION) as tmp, open(tmp, "wb") as f:
        f.write(MMAP_MAGIC + struct.pack("<Q", MMAP_VERSION) + struct.pack("<B", UINT16_CODE))
        f.write(struct.pack("<Q", n + 1) + struct.pack("<Q", n + 1))
        f.write(sizes.tobytes() + pointers.tobytes() + doc_idx.tobytes())
    return n


def draw_order(n_windows: int, seed: int, draws: int) -> np.ndarray:
    """The windows of draws 0 .. draws − 1 (docs/data.md: epoch e visits window_order(n, seed, e))."""
    from parallax import _native

    parts, left, epoch = [], draws, 0
    while left > 0:
        order = np.asarray(_native.window_order(n_windows, seed, epoch), dtype=np.int64)
        parts.append(order[:left])
        left -= len(parts[-1])
        epoch += 1
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def write(train_bin: Path, out_dir: Path, run: RunConfig, index_hash: IndexHash) -> dict:
    """Write the files into ``out_dir``; the MaxText data keys that read them."""
    out_dir = Path(out_dir)
    npy_dir = out_dir / "npy"
    files.make_folder(npy_dir, OPTION)
    n_tokens, eos_id = token_count(train_bin)
    prefix = out_dir / PREFIX
    files.symlink(prefix.with_suffix(".bin"), Path(train_bin).resolve(), OPTION)
    n = write_idx(prefix.with_suffix(".idx"), n_tokens, run.seq_len)
    draws = run.steps * run.batch_size
    digest = index_hash(str(prefix), draws, run.seq_len, run.seed)
    arrays = {
        "document_index": np.arange(n + 1, dtype=np.int64),
        "sample_index": np.stack([np.arange(n + 1, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)], axis=1),
        "shuffle_index": draw_order(n, run.seed, draws),
    }
    for name in INDEX_NAMES:
        with files.replacing(npy_dir / f"{digest}-{name}.npy", OPTION) as tmp, open(tmp, "wb") as f:
            np.save(f, arrays[name], allow_pickle=False)
    return keys_for(str(npy_dir), str(prefix), eos_id)


def keys_for(npy_dir: str, prefix: str, eos_id: int) -> dict:
    """The MaxText keys that read an ``mmap_npy`` directory as our batches."""
    return {
        "dataset_type": "grain",
        "grain_file_type": "mmap_npy",
        "grain_train_files": f"{npy_dir}|{prefix}",
        "mmap_eod_id": eos_id,
        "mmap_split_sentences": False,
        "reset_attention_mask": False,
        "eod_mask_loss": False,
    }


def sample_reader(out_dir: Path, seq_len: int) -> Callable[[int], np.ndarray]:
    """``read(draw)``: sample ``draw`` as the Megatron layout defines it (what MaxText's reader
    returns): sequences document_index[p0] .. document_index[p1], from offset o0 to o1
    inclusive. The indices and tokens are read once. For tests and for checking a written
    directory by hand."""
    out_dir = Path(out_dir)
    (doc,), (sample,), (shuffle,) = (sorted((out_dir / "npy").glob(f"*-{name}.npy")) for name in INDEX_NAMES)
    doc, sample, shuffle = np.load(doc), np.load(sample), np.load(shuffle)
    idx = _read_idx(out_dir / f"{PREFIX}.idx")
    raw = np.memmap(out_dir / f"{PREFIX}.bin", dtype="<u2", mode="r")

    def read(draw: int) -> np.ndarray:
        i = int(shuffle[draw])
        (p0, o0), (p1, o1) = sample[i], sample[i + 1]
        parts = []
        for p in range(int(p0), int(p1) + 1):
            d = int(doc[p])
            start, size = (int(idx["pointers"][d]) // 2), int(idx["sizes"][d])
            lo = int(o0) if p == p0 else 0
            hi = int(o1) + 1 if p == p1 else size
            parts.append(raw[start:start + size][lo:hi])
        return np.concatenate(parts)[:seq_len + 1].astype(np.int32)

    return read


def _read_idx(path: Path) -> dict:
    data = Path(path).read_bytes()
    assert data[:9] == MMAP_MAGIC
    n_seq, = struct.unpack_from("<Q", data, 18)
    offset = 34
    sizes = np.frombuffer(data, dtype=np.int32, count=n_seq, offset=offset)
    pointers = np.frombuffer(data, dtype=np.int64, count=n_seq, offset=offset + 4 * n_seq)
    return {"sizes": sizes, "pointers": pointers}
