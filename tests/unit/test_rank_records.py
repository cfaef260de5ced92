"""What a failing rank writes (run/distributed.py): its record ``ranks/rank-<r>.json`` through
the one writer, and the first-failure marker (O_EXCL: one rank of a launch writes the run.json).
A full disk (ENOSPC) or a read-only folder (EROFS, injected: tests run as root) is the writer's
one line on stderr, not raised: the rank's own failure stays the error. No torch needed."""

from __future__ import annotations

import errno
import json
from types import SimpleNamespace

import pytest

from fixtures.full_disk import fail_writes_under

from parallax.plan.world import RankInfo
from parallax.run import distributed

RANK = RankInfo(rank=1, world=4, local_rank=1, local_world=2, host="node-a", launcher="torch.distributed.run")
NEEDS = {errno.ENOSPC: "the disk is full; free space there or choose another folder",
         errno.EROFS: "the file system is read-only; choose a writable folder"}
CODES = pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])


def failure() -> RuntimeError:
    try:
        raise RuntimeError("NCCL error: unhandled system error\nsecond line")
    except RuntimeError as exc:
        return exc


def test_a_ranks_record_is_written_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "launch-7")
    distributed.record_failure(failure(), RANK, step=12, folder=tmp_path)
    record = json.loads((tmp_path / "rank-1.json").read_text())
    assert {k: record[k] for k in ("rank", "world", "host", "run_id", "type", "message", "oom", "step")} == {
        "rank": 1, "world": 4, "host": "node-a", "run_id": "launch-7", "type": "RuntimeError",
        "message": "NCCL error: unhandled system error", "oom": False, "step": 12}
    assert record["traceback"].splitlines()[-2:] == ["RuntimeError: NCCL error: unhandled system error",
                                                     "second line"]
    assert [p.name for p in tmp_path.iterdir()] == ["rank-1.json"]


@CODES
def test_a_record_the_disk_refuses_is_one_line_and_the_earlier_one_stays(tmp_path, monkeypatch, capsys, code):
    (tmp_path / "rank-1.json").write_text('{"rank": 1, "message": "an earlier launch"}\n')
    fail_writes_under(monkeypatch, tmp_path, code, probes=False)
    distributed.record_failure(failure(), RANK, folder=tmp_path)  # returns: the rank's own failure goes on
    assert capsys.readouterr().err == (f"parallax: rank 1: cannot write {tmp_path / 'rank-1.json'}: "
                                       f"{NEEDS[code]}\n")
    assert [p.name for p in tmp_path.iterdir()] == ["rank-1.json"]
    assert json.loads((tmp_path / "rank-1.json").read_text())["message"] == "an earlier launch"


@pytest.fixture
def outer(tmp_path, monkeypatch):
    """outer_failure's plan, and the run.json writes it asks for."""
    written = []
    monkeypatch.setattr(distributed, "write_launch_failure", lambda plan, run_dir, *a, **k: written.append(run_dir))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "launch-7")
    return SimpleNamespace(run=SimpleNamespace(output_dir=str(tmp_path / "run"))), written


def test_only_the_first_failing_rank_writes_the_run(tmp_path, outer):
    plan, written = outer
    distributed.outer_failure(plan, RANK, failure())
    distributed.outer_failure(plan, RankInfo(2, 4, 0, 2, "node-b", "torch.distributed.run"), failure())
    assert written == [tmp_path / "run"]
    assert sorted(p.name for p in (tmp_path / "run" / "ranks").iterdir()) == [
        ".first-failure-launch-7", "rank-1.json", "rank-2.json"]


@CODES
def test_a_marker_the_disk_refuses_is_one_line_and_no_run_is_written(tmp_path, outer, monkeypatch, capsys, code):
    plan, written = outer
    ranks = tmp_path / "run" / "ranks"
    ranks.mkdir(parents=True)
    (ranks / "rank-1.json").write_text("{}")
    monkeypatch.setattr(distributed, "record_failure", lambda *a, **k: None)  # the marker alone
    fail_writes_under(monkeypatch, ranks, code, probes=False, in_place=True)
    distributed.outer_failure(plan, RANK, failure())
    marker = ranks / ".first-failure-launch-7"
    if code == errno.EROFS:  # a read-only folder refuses the marker
        assert capsys.readouterr().err == f"parallax: rank 1: cannot write {marker} (from --output-dir): " \
                                          f"{NEEDS[code]}\n"
        assert written == [] and [p.name for p in ranks.iterdir()] == ["rank-1.json"]
    else:  # a full disk still makes an empty file: the marker is made, this rank is the first
        assert capsys.readouterr().err == "" and written == [tmp_path / "run"] and marker.read_bytes() == b""


@CODES
def test_a_ranks_folder_that_cannot_be_made_is_one_line(tmp_path, outer, monkeypatch, capsys, code):
    plan, written = outer
    fail_writes_under(monkeypatch, tmp_path, code)
    distributed.outer_failure(plan, RANK, failure())
    assert capsys.readouterr().err == (f"parallax: rank 1: cannot write {tmp_path / 'run' / 'ranks'} "
                                       f"(from --output-dir): {NEEDS[code]}\n")
    assert written == [] and list(tmp_path.iterdir()) == []
