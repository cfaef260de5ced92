"""Paths that cannot be used are one line and exit 2, naming the variable or option
to set: the cache root (PARALLAX_CACHE_DIR, XDG_CACHE_HOME, HOME), PARALLAX_PROGRESS_JSONL and
``data prepare --out``."""

from __future__ import annotations

import errno

import pytest

from fixtures.cli import one_error_line
from fixtures.full_disk import fail_writes_under

from parallax.cli import main
from parallax.store.cache import cache_root

RUN = ["train", "--model", "tiny", "--device", "cpu", "--no-compile", "--steps", "3", "--warmup", "1"]


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a folder\n")
    (tmp_path / "t.txt").write_text("Once upon a time.\n\nThe end.\n")
    return tmp_path


def test_a_cache_dir_under_a_file_is_one_line(corpus, monkeypatch, capsys):
    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(corpus / "a_file" / "cache"))
    assert main([*RUN, "--data", "t.txt"]) == 2
    assert one_error_line(capsys) == (
        f"parallax: error: the cache folder {corpus}/a_file/cache (from PARALLAX_CACHE_DIR) cannot be made: "
        f"{corpus}/a_file is a file; point PARALLAX_CACHE_DIR at a writable folder")


def test_a_home_that_cannot_hold_a_cache_names_the_variables_to_set(corpus, monkeypatch, capsys):
    monkeypatch.delenv("PARALLAX_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(corpus / "a_file"))
    assert main([*RUN, "--data", "t.txt"]) == 2
    assert one_error_line(capsys) == (
        f"parallax: error: the cache folder {corpus}/a_file/.cache/parallax (from HOME) cannot be made: "
        f"{corpus}/a_file is a file; set PARALLAX_CACHE_DIR (or XDG_CACHE_HOME) to a writable folder")


def test_a_read_only_cache_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    assert cache_root() == tmp_path / "cache"  # not created by asking
    fail_writes_under(monkeypatch, tmp_path, errno.EROFS)  # a read-only HOME (root ignores chmod)
    with pytest.raises(Exception, match=rf"the cache folder {tmp_path}/cache \(from PARALLAX_CACHE_DIR\) "
                                        r"is not writable \(Read-only file system\); point PARALLAX_CACHE_DIR"):
        cache_root()


def test_an_unwritable_progress_file_is_one_line(corpus, monkeypatch, capsys):
    monkeypatch.setenv("PARALLAX_PROGRESS_JSONL", str(corpus / "a_file" / "p.jsonl"))
    assert main([*RUN, "--batch-size", "2", "--seq-len", "16", "--output-dir", "out"]) == 2
    assert one_error_line(capsys) == (
        f"parallax: error: cannot write {corpus}/a_file/p.jsonl (from PARALLAX_PROGRESS_JSONL): a file stands "
        "where a folder must be; choose another path")


def test_data_prepare_into_an_unwritable_out_is_one_line(corpus, capsys):
    assert main(["data", "prepare", "t.txt", "--out", "a_file/prepared"]) == 2
    assert one_error_line(capsys) == ("parallax: error: output directory 'a_file/prepared' is not writable "
                                      "(Not a directory); pass --out with a writable path")
