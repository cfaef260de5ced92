"""The writers of store/files.py for what is not written in one go: a streamed log (``streaming``),
a link (``symlink``), and the files written in place (``append``, ``open_in_place``,
``write_in_place``). Each on a full disk (ENOSPC) and a read-only folder (EROFS, injected:
tests run as root, whom chmod does not stop): one line naming the path and the need, no
temporary file left, the earlier file whole."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from fixtures.full_disk import fail_writes_under

from parallax.errors import ParallaxError
from parallax.store import files

NEEDS = {errno.ENOSPC: "the disk is full; free space there or choose another folder",
         errno.EROFS: "the file system is read-only; choose a writable folder"}
CODES = pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])


def names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- streaming: a log written while something runs

def test_a_stream_becomes_its_file_when_it_ends(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("the earlier run\n")
    with files.streaming(log) as stream:
        stream.write("step 1\n")
        stream.flush()
        assert log.read_text() == "the earlier run\n"  # whole until the stream ends
        (beside,) = [p for p in tmp_path.iterdir() if p.name.startswith(".train.log.")]
        assert beside.read_text() == "step 1\n" and beside.suffix == ".log"
    assert log.read_text() == "step 1\n" and names(tmp_path) == ["train.log"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(log.stat().st_mode) == 0o666 & ~umask  # as open() makes it, not mkstemp's 0600


def test_a_binary_stream_for_a_child_makes_its_folders(tmp_path):
    with files.streaming(tmp_path / "a" / "b" / "run.log", binary=True) as stream:
        os.write(stream.fileno(), b"from the child\n")  # as a child writes its stdout
    assert (tmp_path / "a" / "b" / "run.log").read_bytes() == b"from the child\n"


def test_the_log_of_a_failure_is_kept(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with files.streaming(tmp_path / "train.log") as stream:
            stream.write("step 1\nstep 2\n")
            raise KeyboardInterrupt
    assert (tmp_path / "train.log").read_text() == "step 1\nstep 2\n" and names(tmp_path) == ["train.log"]


@CODES
def test_a_stream_on_a_disk_that_fills_is_one_line_and_leaves_the_earlier_log(tmp_path, monkeypatch, code):
    log = tmp_path / "train.log"
    log.write_text("the earlier run\n")
    fail_writes_under(monkeypatch, tmp_path, code, probes=False)
    with pytest.raises(ParallaxError) as refused:
        with files.streaming(log, "--output-dir") as stream:
            stream.write("step 1\n")
    assert str(refused.value) == f"cannot write {log} (from --output-dir): {NEEDS[code]}"
    assert names(tmp_path) == ["train.log"] and log.read_text() == "the earlier run\n"


def test_a_write_of_the_stream_that_fails_is_one_line(tmp_path):
    log = tmp_path / "train.log"
    with pytest.raises(ParallaxError, match=rf"^cannot write {log}: the disk is full"):
        with files.streaming(log):
            raise OSError(errno.ENOSPC, "No space left on device")  # what stream.write raises
    assert names(tmp_path) == []


def test_another_files_error_in_the_body_is_its_own(tmp_path):
    with pytest.raises(FileNotFoundError):
        with files.streaming(tmp_path / "train.log") as stream:
            stream.write("x\n")
            open(tmp_path / "missing")
    assert (tmp_path / "train.log").read_text() == "x\n"


@CODES
def test_a_stream_into_a_folder_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, code):
    fail_writes_under(monkeypatch, tmp_path, code)
    with pytest.raises(ParallaxError, match=rf"^cannot write {tmp_path / 'new'}: {NEEDS[code]}"):
        with files.streaming(tmp_path / "new" / "train.log"):
            pytest.fail("the stream opened")
    assert names(tmp_path) == []


# --- symlink

def test_a_link_replaces_what_stood_there(tmp_path):
    (tmp_path / "tokens.bin").write_bytes(b"t")
    (tmp_path / "train.bin").write_text("an old file")
    files.symlink(tmp_path / "train.bin", tmp_path / "tokens.bin")
    assert os.readlink(tmp_path / "train.bin") == str(tmp_path / "tokens.bin")
    files.symlink(tmp_path / "train.bin", tmp_path / "other.bin")  # a link replaces a link
    assert os.readlink(tmp_path / "train.bin") == str(tmp_path / "other.bin")
    assert names(tmp_path) == ["tokens.bin", "train.bin"]


@CODES
def test_a_link_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, code):
    (tmp_path / "train.bin").write_text("an old file")

    def refused(target, path):
        raise OSError(code, os.strerror(code), path)

    monkeypatch.setattr(os, "symlink", refused)
    with pytest.raises(ParallaxError) as refusal:
        files.symlink(tmp_path / "train.bin", tmp_path / "tokens.bin", "--output-dir")
    assert str(refusal.value) == f"cannot write {tmp_path / 'train.bin'} (from --output-dir): {NEEDS[code]}"
    assert names(tmp_path) == ["train.bin"] and (tmp_path / "train.bin").read_text() == "an old file"


# --- written in place

def test_appends_are_whole_lines_at_the_end(tmp_path):
    path = tmp_path / "progress.jsonl"
    files.append(path, b"")
    assert path.read_bytes() == b""
    files.append(path, b'{"step": 1}\n')
    files.append(path, b'{"step": 2}\n')
    assert path.read_bytes() == b'{"step": 1}\n{"step": 2}\n'


@CODES
def test_an_append_that_fails_is_one_line_and_keeps_the_lines_before(tmp_path, monkeypatch, code):
    path = tmp_path / "progress.jsonl"
    files.append(path, b'{"step": 1}\n')
    fail_writes_under(monkeypatch, tmp_path, code, in_place=True)
    with pytest.raises(ParallaxError) as refused:
        files.append(path, b'{"step": 2}\n', "PARALLAX_PROGRESS_JSONL")
    assert str(refused.value) == f"cannot write {path} (from PARALLAX_PROGRESS_JSONL): {NEEDS[code]}"
    assert path.read_bytes() == b'{"step": 1}\n'


def test_an_exclusive_file_is_made_once(tmp_path):
    marker = tmp_path / ".first-failure"
    fd = files.open_in_place(marker, exclusive=True)
    assert fd is not None
    os.close(fd)
    assert files.open_in_place(marker, exclusive=True) is None  # another process made it first
    assert names(tmp_path) == [".first-failure"]


@pytest.mark.parametrize("code, need", [(errno.EROFS, NEEDS[errno.EROFS]),
                                        (errno.EACCES, "permission denied; choose a folder you can write")])
def test_a_file_in_place_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, code, need):
    fail_writes_under(monkeypatch, tmp_path, code, in_place=True)
    for exclusive in (False, True):
        with pytest.raises(ParallaxError) as refused:
            files.open_in_place(tmp_path / ".parallax.lock", "--output-dir", exclusive=exclusive)
        assert str(refused.value) == f"cannot write {tmp_path / '.parallax.lock'} (from --output-dir): {need}"
    assert names(tmp_path) == []


def test_a_path_under_a_file_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ParallaxError, match="a file stands where a folder must be"):
        files.open_in_place(tmp_path / "a_file" / ".parallax.lock")


@CODES
def test_a_write_in_place_replaces_the_content_or_is_one_line(tmp_path, monkeypatch, code):
    path = tmp_path / ".parallax.lock"
    fd = files.open_in_place(path)
    try:
        files.write_in_place(fd, b"123 parallax benchmark\n", path)
        files.write_in_place(fd, b"7 parallax train\n", path)
        assert path.read_bytes() == b"7 parallax train\n"
        fail_writes_under(monkeypatch, tmp_path, code, in_place=True)
        with pytest.raises(ParallaxError, match=rf"^cannot write {path}: {NEEDS[code]}"):
            files.write_in_place(fd, b"8 parallax train\n", path)
    finally:
        os.close(fd)
