"""The token file's writer (data/tokenfile.py ``TokenWriter``): header and tokens as the native
loader reads them, and on a full disk (ENOSPC) or a read-only folder (EROFS, injected at the one
writer's flush) the writer's one line naming the file, with the file removed."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from fixtures.full_disk import fail_writes_under

from parallax.data.tokenfile import HEADER, MAGIC, TokenWriter
from parallax.errors import ParallaxError

NEEDS = {errno.ENOSPC: "the disk is full; free space there or choose another folder",
         errno.EROFS: "the file system is read-only; choose a writable folder"}


def test_the_header_counts_what_was_written(tmp_path):
    writer = TokenWriter(tmp_path / "train.bin", 300, 7)
    writer.write(np.array([1, 2, 7], dtype=np.int64))
    writer.write(np.array([299], dtype=np.int32))
    assert writer.finish() == 4
    raw = (tmp_path / "train.bin").read_bytes()
    assert HEADER.unpack(raw[:64])[:6] == (MAGIC, 1, 2, 4, 300, 7)
    np.testing.assert_array_equal(np.frombuffer(raw[64:], "<u2"), [1, 2, 7, 299])


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])
def test_a_disk_that_refuses_the_tokens_is_one_line_and_leaves_no_file(tmp_path, monkeypatch, code):
    (tmp_path / "validation.bin").write_bytes(b"kept")  # another file of the folder stays whole
    writer = TokenWriter(tmp_path / "train.bin", 300, 7, "--out")
    writer.write(np.arange(100, dtype=np.int64))
    fail_writes_under(monkeypatch, tmp_path, code)
    with pytest.raises(ParallaxError) as refused:
        writer.finish()
    assert str(refused.value) == f"cannot write {tmp_path / 'train.bin'} (from --out): {NEEDS[code]}"
    assert [p.name for p in tmp_path.iterdir()] == ["validation.bin"]
    assert (tmp_path / "validation.bin").read_bytes() == b"kept"


def test_a_write_that_fails_midway_removes_the_file(tmp_path):
    writer = TokenWriter(tmp_path / "train.bin", 300, 7)

    class Full:
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            pass

    writer._file.close()
    writer._file = Full()  # the file object that meets the full disk
    with pytest.raises(ParallaxError, match=rf"^cannot write {tmp_path / 'train.bin'}: the disk is full"):
        writer.write(np.arange(10, dtype=np.int64))
    assert list(tmp_path.iterdir()) == []


def test_a_token_file_under_a_file_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ParallaxError, match=r"a_file/train.bin: a file stands where a folder must be"):
        TokenWriter(tmp_path / "a_file" / "train.bin", 300, 7)
