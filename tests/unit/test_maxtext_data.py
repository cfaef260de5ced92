"""Our prepared tokens as MaxText's mmap_npy input (engines/maxtext/data.py): sample k, read the
way the Megatron layout defines it, is row k of our loader's batches — MaxText trains on our
batches, in our order, across an epoch boundary too."""

from __future__ import annotations

import errno
import os
import struct

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from parallax.spec.config import RunConfig  # noqa: E402
from parallax.data.loader import TokenBatches  # noqa: E402
from parallax.data.tokenfile import TokenWriter  # noqa: E402
from parallax.engines.maxtext import data  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402

B, S = 4, 32


def fake_hash(prefix, samples, seq_len, seed):
    return f"h{samples}-{seq_len}-{seed}"


def test_samples_are_our_batches_row_for_row(prepared, tmp_path):
    train = prepared.path("train")
    n_tokens, eos = data.token_count(train)
    n = (n_tokens - 1) // S
    steps = n // B + 3  # past the end of epoch 0
    run = RunConfig(framework="maxtext", model="tiny", batch_size=B, seq_len=S, steps=steps, warmup=1, seed=7,
                    synthetic=False)
    keys = data.write(train, tmp_path / "mt", run, fake_hash)
    assert keys == {"dataset_type": "grain", "grain_file_type": "mmap_npy",
                    "grain_train_files": f"{tmp_path / 'mt' / 'npy'}|{tmp_path / 'mt' / 'train'}",
                    "mmap_eod_id": eos, "mmap_split_sentences": False,
                    "reset_attention_mask": False, "eod_mask_loss": False}
    assert sorted(p.name for p in (tmp_path / "mt" / "npy").iterdir()) == [
        f"h{steps * B}-{S}-7-{name}.npy" for name in ("document_index", "sample_index", "shuffle_index")]
    read = data.sample_reader(tmp_path / "mt", S)
    with TokenBatches(prepared, batch_size=B, seq_len=S, seed=7, vocab_size=10_000, epochs=2.0, steps=steps) as ours:
        for k, batch in zip(range(steps), ours):
            for row in range(B):
                np.testing.assert_array_equal(read(k * B + row), batch[row])


def test_the_idx_is_a_megatron_index_over_our_file_without_a_copy(prepared, tmp_path):
    train = prepared.path("train")
    n_tokens, _ = data.token_count(train)
    run = RunConfig(framework="maxtext", model="tiny", batch_size=B, seq_len=S, steps=3, warmup=1, synthetic=False)
    data.write(train, tmp_path / "mt", run, fake_hash)
    assert (tmp_path / "mt" / "train.bin").resolve() == train.resolve()
    raw = (tmp_path / "mt" / "train.idx").read_bytes()
    n = (n_tokens - 1) // S
    assert raw[:9] == b"MMIDIDX\x00\x00" and struct.unpack_from("<QBQQ", raw, 9) == (1, 8, n + 1, n + 1)
    sizes = np.frombuffer(raw, np.int32, n + 1, 34)
    pointers = np.frombuffer(raw, np.int64, n + 1, 34 + 4 * (n + 1))
    doc_idx = np.frombuffer(raw, np.int64, n + 2, 34 + 12 * (n + 1))
    assert sizes.sum() == n_tokens and set(sizes[:-1]) == {S} and 1 <= sizes[-1] <= S
    assert pointers[0] == 64 and (np.diff(pointers) == 2 * S).all()
    np.testing.assert_array_equal(doc_idx, np.arange(n + 2))
    assert len(raw) == 34 + 12 * (n + 1) + 8 * (n + 2)  # exactly what MaxText's reader expects


def small_token_file(path):
    """A token file of 1,000 tokens, written by our writer (no tokenizer needed)."""
    writer = TokenWriter(path, 300, 0)
    writer.write(np.arange(1000) % 300)
    writer.finish()
    return path


@pytest.mark.parametrize("failing", ["train.idx", "shuffle_index.npy"])
@pytest.mark.parametrize("code, need", [(errno.ENOSPC, "the disk is full; free space there or choose another folder"),
                                        (errno.EROFS, "the file system is read-only; choose a writable folder")],
                         ids=["ENOSPC", "EROFS"])
def test_a_data_file_the_disk_refuses_is_one_line_and_the_earlier_stays(tmp_path, monkeypatch, failing, code, need):
    from parallax.store import files

    train = small_token_file(tmp_path / "train.bin")
    run = RunConfig(framework="maxtext", model="tiny", batch_size=B, seq_len=S, steps=3, warmup=1, synthetic=False)
    out = tmp_path / "mt"
    data.write(train, out, run, fake_hash)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real = files._sync

    def sync(fd, path):
        if path.rsplit("/", 1)[-1].startswith(".") and failing in path:
            raise OSError(code, os.strerror(code), path)
        real(fd, path)

    monkeypatch.setattr(files, "_sync", sync)
    with pytest.raises(ParallaxError) as refused:
        data.write(train, out, run, fake_hash)
    (target,) = [p for p in before if p.name.endswith(failing)]
    assert str(refused.value) == f"cannot write {target} (from --output-dir): {need}"
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # no temp file, nothing half
    assert (out / "train.bin").resolve() == train.resolve()
