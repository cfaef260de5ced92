"""The output folder's lock (``store/lock.py``): one holder, named with its pid; taken over from a
dead process; removed on every way out."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from fixtures.full_disk import fail_writes_under

from parallax.errors import ParallaxError
from parallax.store.lock import LOCK_FILE, locked


def test_a_second_holder_is_refused_naming_the_first_and_its_pid(tmp_path):
    with locked(tmp_path, "parallax train"):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()} parallax train\n"
        with pytest.raises(ParallaxError) as refused:
            with locked(tmp_path, "parallax benchmark"):
                pass
    assert str(refused.value) == (f"{tmp_path} is in use by 'parallax train' (pid {os.getpid()}); wait for it to "
                                  "end or choose another --output-dir")
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_of_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_FILE).write_text(f"{dead.pid} parallax train\n")
    with locked(tmp_path, "parallax benchmark"):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()} parallax benchmark\n"
    assert list(tmp_path.iterdir()) == []


def test_the_lock_goes_when_the_holder_fails(tmp_path):
    with pytest.raises(RuntimeError):
        with locked(tmp_path, "parallax train"):
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_a_lock_held_in_another_process_names_that_process(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from parallax.store.lock import locked\n"
                               f"with locked(sys.argv[1], 'parallax benchmark'):\n"
                               "    print('held', flush=True); time.sleep(600)", str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(ParallaxError, match=rf"in use by 'parallax benchmark' \(pid {holder.pid}\)"):
            with locked(tmp_path, "parallax train"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with locked(tmp_path, "parallax train"):  # killed: the OS released its lock
        pass


@pytest.mark.parametrize("code, need", [
    (errno.ENOSPC, "the disk is full; free space there or choose another folder"),
    (errno.EROFS, "the file system is read-only; choose a writable folder"),
    (errno.EACCES, "permission denied; choose a folder you can write"),
])
def test_a_folder_that_cannot_take_the_lock_is_one_line(tmp_path, monkeypatch, code, need):
    """Made (a read-only folder refuses it) or written (a full disk): the writer's refusal, no lock left."""
    fail_writes_under(monkeypatch, tmp_path, code, in_place=True)
    with pytest.raises(ParallaxError) as refused:
        with locked(tmp_path, "parallax benchmark"):
            pytest.fail("the lock was taken")
    assert str(refused.value) == f"cannot write {tmp_path / LOCK_FILE} (from --output-dir): {need}"
    assert list(tmp_path.iterdir()) == []
