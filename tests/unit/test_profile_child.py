"""A torch profile on a GPU runs in a child process (``run/profile_child.py``): a child killed by a
signal before writing its files is run once more, one killed after writing them keeps them, a
child's exit 2 is the command's; the child gets TEARDOWN_CUPTI=0 and its whole run as --config.
The child is faked: no torch, no GPU."""

from __future__ import annotations

import errno
import json
import re
import subprocess
import tempfile

import pytest

from fixtures.full_disk import fail_writes_under

from parallax.errors import ParallaxError
from parallax.run import profile_child

RUN = {"framework": "torch", "model": "tiny", "batch_size": 2, "seq_len": 16}


class Child:
    """subprocess.run's stand-in: each call takes the next of ``script``: (exit code, write
    profile.json first?)."""

    def __init__(self, out, script):
        self.out, self.script, self.calls = out, list(script), []

    def __call__(self, cmd, env):
        self.calls.append((cmd, env))
        code, writes = self.script.pop(0)
        assert json.loads(open(cmd[cmd.index("--config") + 1]).read()) == RUN
        if writes:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "profile.json").write_text(json.dumps({"title": f"attempt {len(self.calls)}"}))
        return subprocess.CompletedProcess(cmd, code)


def test_a_child_killed_before_writing_runs_again(tmp_path):
    out, lines = tmp_path / "out", []
    child = Child(out, [(-6, False), (0, True)])
    assert profile_child.profile(RUN, 3, 2, out, runner=child, say=lines.append) == (0, {"title": "attempt 2"})
    cmd, env = child.calls[0]
    assert cmd[3:] == ["profile", "--config", cmd[5], "--warmup", "3", "--steps", "2", "--output-dir", str(out),
                       "--overwrite"]
    assert env["TEARDOWN_CUPTI"] == "0" and env[profile_child.CHILD_ENV] == "1"
    assert lines == ["parallax profile: the profiling process died by signal 6 before writing its files (a crash in "
                     "torch.profiler/CUPTI; attempt 1 of 2); running it again"]


def test_a_child_killed_after_writing_keeps_its_files(tmp_path):
    out, lines = tmp_path / "out", []
    child = Child(out, [(-6, True)])
    assert profile_child.profile(RUN, 3, 2, out, True, runner=child, say=lines.append) == (0, {"title": "attempt 1"})
    assert child.calls[0][0][-1] == "--keep-trace" and len(child.calls) == 1
    assert "after writing its files" in lines[0]


def test_an_old_profile_json_is_not_taken_for_this_attempts(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "profile.json").write_text("{}")
    child = Child(out, [(-11, False), (-11, False)])
    assert profile_child.profile(RUN, 3, 2, out, runner=child, say=lambda line: None) == (1, None)
    assert len(child.calls) == profile_child.ATTEMPTS


def test_bad_input_in_the_child_is_the_commands(tmp_path):
    child = Child(tmp_path, [(2, False)])
    assert profile_child.profile(RUN, 3, 2, tmp_path, runner=child, say=lambda line: None) == (2, None)
    assert len(child.calls) == 1


def test_only_torch_on_a_gpu_and_not_inside_the_child(monkeypatch):
    monkeypatch.delenv(profile_child.CHILD_ENV, raising=False)
    assert profile_child.wanted("torch", True)
    assert not profile_child.wanted("torch", False) and not profile_child.wanted("jax", True)
    monkeypatch.setenv(profile_child.CHILD_ENV, "1")
    assert not profile_child.wanted("torch", True)


@pytest.mark.parametrize("code, need", [(errno.ENOSPC, "the disk is full; free space there or choose another folder"),
                                        (errno.EROFS, "the file system is read-only; choose a writable folder")])
def test_a_temporary_folder_that_refuses_the_config_is_one_line(tmp_path, monkeypatch, code, need):
    """The child's config is written through store/files.py: the writer's one line naming the
    file and TMPDIR, nothing left in the temporary folder, no child started."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    fail_writes_under(monkeypatch, scratch, code, probes=False)
    child = Child(tmp_path / "out", [])
    with pytest.raises(ParallaxError) as refused:
        profile_child.profile(RUN, 3, 2, tmp_path / "out", runner=child, say=lambda line: None)
    assert re.fullmatch(rf"cannot write {scratch}/parallax-profile-\w+/run\.json \(from TMPDIR\): {need}",
                        str(refused.value)), str(refused.value)
    assert child.calls == [] and list(scratch.iterdir()) == []


def test_a_temporary_folder_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a_file"))
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ParallaxError, match=rf"^cannot write {tmp_path}/a_file/parallax-profile-\w+ \(from TMPDIR\): "
                                            "a file stands where a folder must be"):
        profile_child.profile(RUN, 3, 2, tmp_path / "out", runner=Child(tmp_path / "out", []), say=lambda line: None)
