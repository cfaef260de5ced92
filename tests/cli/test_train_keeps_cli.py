"""``parallax train`` keeps what it did: Ctrl-C and SIGTERM leave an ``interrupted`` run.json
with the steps done; a folder that holds a run is refused unless --overwrite; one ``train`` at a
time in a folder; and a refusal leaves the file system as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.cli import one_error_line
from fixtures.fake_runs import steps_from, tiny_config, write_ok_run

from parallax.cli import main
from parallax.run.progress_file import ENV_VAR
from parallax.store import results
from parallax.store.lock import LOCK_FILE, locked

TINY = ["--framework", "torch", "--model", "tiny", "--batch-size", "2", "--seq-len", "16", "--device", "cpu",
        "--no-compile"]
LONG = [*TINY, "--steps", "100000", "--warmup", "2"]  # minutes of steps: a signal always comes first
START_S = 120  # a guard against a run that never starts, not a timing threshold


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def start(out: Path, progress: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, **{ENV_VAR: str(progress)})
    return subprocess.Popen([sys.executable, "-m", "parallax", "train", *LONG, "--output-dir", str(out), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_steps(proc: subprocess.Popen, progress: Path, steps: int) -> None:
    """Until the run's progress file reports step index ``steps`` or later."""
    deadline = time.monotonic() + START_S
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never reached its steps"
        lines = progress.read_text().splitlines() if progress.exists() else []
        if any(json.loads(line).get("step", -1) >= steps for line in lines):
            return
        time.sleep(0.05)


# --- Ctrl-C and SIGTERM ---

@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_keeps_the_steps_done(tmp_path, sig, code):
    out, progress = tmp_path / "run", tmp_path / "progress.jsonl"
    proc = start(out, progress)
    wait_for_steps(proc, progress, 4)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=START_S)
    assert proc.returncode == code, stderr
    run = results.load_run(out)
    steps = results.load_steps(out)
    assert run["status"] == "interrupted" and run["signal"] == sig.name
    assert run["steps_done"] > 4 and run["steps_done"] == len(steps)
    assert [s["step"] for s in steps] == list(range(len(steps)))
    assert [s["measured"] for s in steps[:3]] == [False, False, True]
    assert run["timing"]["measured_steps"] == len(steps) - 2
    assert run["timing"]["step_ms"]["count"] == len(steps) - 2 and run["throughput"]["tokens_per_s"] > 0
    assert run["error"] == f"interrupted by {sig.name} after {len(steps)} of 100000 steps"
    assert stdout.splitlines()[-1] == f"{run['error']}; kept them in {out}/run.json and steps.jsonl"
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "steps.jsonl"]  # the lock went with it


def test_a_second_train_in_the_folder_is_refused_naming_the_holder(tmp_path, capsys):
    out, progress = tmp_path / "run", tmp_path / "progress.jsonl"
    proc = start(out, progress)
    try:
        wait_for_steps(proc, progress, 1)
        before = tree(tmp_path)
        assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out), "--overwrite"]) == 2
        assert one_error_line(capsys) == (f"parallax: error: {out} is in use by 'parallax train' (pid {proc.pid}); "
                                          "wait for it to end or choose another --output-dir")
        assert tree(tmp_path) == before
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=START_S)
    assert proc.returncode == 143


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process of ours
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).write_text(f"{dead.pid} parallax train\n")
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out)]) == 0
    assert results.load_run(out)["status"] == "ok"
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "steps.jsonl"]


# --- a folder that holds a run ---

def test_a_folder_that_holds_a_run_is_refused_and_kept(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--seed", "1", "--output-dir", str(out)]) == 0
    capsys.readouterr()
    before = tree(tmp_path)
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--seed", "2", "--output-dir", str(out)]) == 2
    assert one_error_line(capsys) == (f"parallax: error: {out} already holds a run (run.json); pass --overwrite "
                                      "to replace it, or pick a fresh --output-dir")
    assert tree(tmp_path) == before
    (out / "run.json").unlink()  # steps.jsonl alone is a run too
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out)]) == 2
    assert "already holds a run (steps.jsonl)" in one_error_line(capsys)


def test_overwrite_replaces_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "4", "--warmup", "1", "--seed", "1", "--output-dir", str(out)]) == 0
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--seed", "2", "--output-dir", str(out),
                 "--overwrite"]) == 0
    run = results.load_run(out)
    assert (run["status"], run["config"]["seed"], len(results.load_steps(out))) == ("ok", 2, 3)


def test_a_refused_overwrite_keeps_the_run_it_would_replace(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out)]) == 0
    capsys.readouterr()
    before = tree(tmp_path)
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--recipe", "te-fp8-delayed",
                 "--output-dir", str(out), "--overwrite"]) == 2
    assert "this run is on the CPU" in one_error_line(capsys)
    assert tree(tmp_path) == before


def test_a_benchmark_folder_is_refused_even_with_overwrite(tmp_path, capsys):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / results.MATRIX_FILE).write_text("{}")
    before = tree(tmp_path)
    assert main(["train", *TINY, "--output-dir", str(bench), "--overwrite"]) == 2
    assert one_error_line(capsys) == (f"parallax: error: {bench} holds a benchmark (matrix.json); "
                                      "pick a fresh --output-dir")
    assert tree(tmp_path) == before


def test_a_benchmark_cell_is_refused_unless_overwrite(tmp_path, capsys):
    """Its run.json may not be there yet (a cell that is pending); the runner passes --overwrite."""
    bench = tmp_path / "bench"
    cell = bench / results.RUNS_DIR / "torch-bf16-seed0-rep0"
    cell.mkdir(parents=True)
    (bench / results.MATRIX_FILE).write_text("{}")
    before = tree(tmp_path)
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(cell)]) == 2
    assert one_error_line(capsys) == (f"parallax: error: {cell} is a cell of the benchmark in {bench}; pass "
                                      "--overwrite to run it by hand, or pick a fresh --output-dir")
    assert tree(tmp_path) == before
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(cell), "--overwrite"]) == 0


def test_overwrite_goes_with_a_config_file(tmp_path, capsys):
    out = tmp_path / "run"
    write_ok_run(out, tiny_config(), steps_from([1.0] * 12, [1.0] * 12, 2))
    config = tmp_path / "c.json"
    config.write_text(json.dumps(tiny_config(steps=3, warmup=1, batch_size=2, seq_len=16,
                                             output_dir=str(out)).to_dict()))
    assert main(["train", "--config", str(config)]) == 2
    assert "pass --overwrite" in one_error_line(capsys)
    assert main(["train", "--config", str(config), "--overwrite"]) == 0
    assert results.load_run(out)["config"]["steps"] == 3


# --- a refusal leaves the file system as it was ---

@pytest.mark.parametrize("args", [
    ["--batch-size", "0"],  # a bad option
    ["--recipe", "te-fp9"],  # an unknown recipe
    ["--recipe", "te-fp8-delayed"],  # a precision this machine cannot run: the engine's check, in the folder
    ["--data", "no-such-corpus"],  # a data source that cannot open, also past the folder's claim
])
def test_a_refused_run_leaves_no_folder(tmp_path, capsys, args):
    out = tmp_path / "new" / "run"
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out), *args]) == 2
    one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_in_a_held_folder_changes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    with locked(out, "parallax train"):
        before = tree(tmp_path)
        assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out)]) == 2
        assert one_error_line(capsys) == (f"parallax: error: {out} is in use by 'parallax train' (pid {os.getpid()}); "
                                          "wait for it to end or choose another --output-dir")
        assert tree(tmp_path) == before
    assert list(out.iterdir()) == []  # the holder removed its lock file


def test_a_signal_before_the_first_step_keeps_nothing(tmp_path, capsys, monkeypatch):
    from parallax.engines import get_engine
    from parallax.run.interrupt import Interrupted

    class Stopped:  # the torch engine, stopped by SIGTERM during its check
        def __getattr__(self, name):
            return getattr(get_engine("torch"), name)

        def check(self, plan):
            raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr("parallax.run.train.get_engine", lambda name: Stopped())
    out = tmp_path / "new" / "run"
    assert main(["train", *TINY, "--steps", "3", "--warmup", "1", "--output-dir", str(out)]) == 143
    assert one_error_line(capsys) == "parallax: error: interrupted by SIGTERM"
    assert list(tmp_path.iterdir()) == []


# --- the warm-up used is stated ---

def summary_row(out: str, name: str) -> str:
    """The summary table's value of row ``name``, its wrapped lines joined."""
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(f"│ {name} "))
    cells = [lines[first].split("│")[2]]
    for line in lines[first + 1:]:
        parts = line.split("│")
        if len(parts) < 4 or parts[1].strip():  # the table's end, or the next row
            break
        cells.append(parts[2])
    return " ".join(" ".join(cells).split())


@pytest.mark.parametrize("args, stated", [
    (["--steps", "4"], "2 of 4 steps, left out of the timing (the default for --steps 4: half the steps, at most 20)"),
    (["--steps", "4", "--warmup", "1"], "1 of 4 steps, left out of the timing"),
])
def test_the_summary_states_the_warmup_and_where_it_came_from(tmp_path, capsys, args, stated):
    out = tmp_path / "run"
    assert main(["train", *TINY, *args, "--output-dir", str(out)]) == 0
    assert summary_row(capsys.readouterr().out, "warm-up") == stated
    run = results.load_run(out)
    assert run["config"]["warmup"] == run["timing"]["warmup_steps"] == int(stated.split()[0])


def test_a_config_file_says_its_warmup_came_from_it(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(tiny_config(steps=3, warmup=1, batch_size=2, seq_len=16,
                                             output_dir=str(tmp_path / "run")).to_dict()))
    assert main(["train", "--config", str(config)]) == 0
    assert summary_row(capsys.readouterr().out, "warm-up") == "1 of 3 steps, left out of the timing (from --config)"
