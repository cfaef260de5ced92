"""``parallax train`` keeps what it did: a signal writes an interrupted run, a folder that holds a
run is refused (``--overwrite`` replaces it), a lock keeps a second process out, and a refusal
leaves no folder behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parallax.cli import main
from parallax.run import interrupt
from parallax.store import lock, results

TINY = ["--framework", "torch", "--model", "tiny", "--batch-size", "2", "--seq-len", "16",
        "--device", "cpu", "--no-compile"]


def start_long_run(out: Path, progress: Path) -> subprocess.Popen:
    env = dict(os.environ, PARALLAX_PROGRESS_JSONL=str(progress))
    return subprocess.Popen([sys.executable, "-m", "parallax", "train", *TINY, "--steps", "100000", "--warmup", "2",
                             "--output-dir", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_steps(proc: subprocess.Popen, progress: Path, steps: int) -> None:
    deadline = time.monotonic() + 120
    while _steps_in(progress) < steps:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the run never reached its steps"
        time.sleep(0.05)


def _steps_in(progress: Path) -> int:
    if not progress.exists():
        return 0
    return sum('"step"' in line for line in progress.read_text().splitlines())


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_writes_an_interrupted_run_with_the_steps_done(tmp_path, sig, code):
    out, progress = tmp_path / "run", tmp_path / "progress.jsonl"
    proc = start_long_run(out, progress)
    wait_for_steps(proc, progress, 5)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == code
    run = results.load_run(out)
    steps = [json.loads(line) for line in (out / results.STEPS_FILE).read_text().splitlines()]
    assert run["status"] == "interrupted" and run["signal"] == sig.name
    assert run["steps_done"] == len(steps) >= 5
    assert [s["step"] for s in steps] == list(range(len(steps)))
    assert run["timing"]["measured_steps"] == len(steps) - 2 == sum(s["measured"] for s in steps)
    assert run["error"] == f"interrupted by {sig.name} after {len(steps)} steps ({len(steps) - 2} timed)"
    assert run["loss"]["final"] == steps[-1]["loss"]
    assert not (out / lock.LOCK_FILE).exists()


def test_interrupted_record_summarises_the_timed_steps_only():
    done = [interrupt.Done(0, 9.0, 500.0), interrupt.Done(1, 8.5, 20.0), interrupt.Done(2, 8.0, 30.0)]
    record = interrupt.interrupted_record(done, warmup=1, tokens_per_step=1000, signum=signal.SIGTERM)
    assert record["timing"]["step_ms"]["median"] == 25.0
    assert record["throughput"]["tokens_per_s"] == 40_000.0
    assert record["loss"] == {"first": 9.0, "final": 8.0}
    assert record["steps_done"] == 3 and record["timing"]["measured_steps"] == 2
    early = interrupt.interrupted_record(done[:1], warmup=1, tokens_per_step=1000, signum=signal.SIGINT)
    assert "throughput" not in early and early["error"] == "interrupted by SIGINT after 1 steps (0 timed)"


def test_a_folder_holding_a_run_is_refused_and_kept(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"parallax: error: {out} already holds a run (run.json); pass --overwrite to replace it, "
        "or choose a fresh --output-dir")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_overwrite_replaces_the_run(tmp_path):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out)]) == 0
    assert main(["train", *TINY, "--steps", "4", "--warmup", "1", "--output-dir", str(out), "--overwrite"]) == 0
    assert results.load_run(out)["config"]["steps"] == 4
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "steps.jsonl"]


def test_a_benchmarks_folder_is_refused_even_with_overwrite(tmp_path, capsys):
    (tmp_path / results.MATRIX_FILE).write_text("{}")
    assert main(["train", *TINY, "--steps", "3", "--output-dir", str(tmp_path), "--overwrite"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"parallax: error: {tmp_path} is a benchmark's folder; choose a fresh --output-dir for train")


def test_a_second_process_is_kept_out_by_the_lock(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with lock.locked(out, "parallax train"):  # another process holds the folder
        proc = subprocess.run([sys.executable, "-m", "parallax", "train", *TINY, "--steps", "3",
                               "--output-dir", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"parallax: error: {out} is in use by another 'parallax train' (pid {os.getpid()}); "
                                   "wait for it to end or choose another --output-dir")
    assert [p.name for p in out.iterdir()] == [lock.LOCK_FILE]  # nothing of a run written


def test_a_refusal_after_the_folder_was_made_removes_it(tmp_path, monkeypatch):
    from parallax.errors import ParallaxError
    from parallax.run import train

    def refuse(*_args, **_kwargs):
        raise ParallaxError("refused after the folder was made")

    monkeypatch.setattr(train, "run_training", refuse)
    out = tmp_path / "new" / "deeper"
    assert main(["train", *TINY, "--steps", "3", "--output-dir", str(out)]) == 2
    assert list(tmp_path.iterdir()) == []


def test_made_folders_that_hold_files_stay(tmp_path):
    kept = tmp_path / "a" / "b"
    results.writable_output_dir(kept)
    (kept / "report.md").write_text("x")
    results.remove_made_dirs()
    assert (kept / "report.md").exists()


def test_an_interrupted_cell_runs_again_on_resume(tmp_path):
    from parallax.run import runner

    from fixtures.matrix import small_matrix

    matrix = small_matrix(recipes=("bf16",))
    cell = matrix.cells()[0]
    run_dir = tmp_path / runner.RUNS_DIR / cell.id
    run_dir.mkdir(parents=True)
    results.write_run(run_dir, {"status": "interrupted", "error": "interrupted by SIGTERM after 3 steps (1 timed)",
                                "config": matrix.base.to_dict()}, [])
    scanned = runner.scan(tmp_path, matrix, runner.NullDisplay())
    assert scanned[0].status == "pending"
