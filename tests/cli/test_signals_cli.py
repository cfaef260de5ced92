"""SIGINT and SIGTERM to each long command (``train``'s own cases are in test_train_keeps_cli.py):
what was done is kept, what is partial removed, the lock released, exit 128 + n with one line.
Each command runs in a child process, and the signal is sent once it reports the phase that is
long (never after a sleep: no timing threshold)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parallax.store import results

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
START_S = 180  # a guard against a child that never gets there, not a timing threshold
SIGNALS = pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["INT", "TERM"])
BENCH = ["benchmark", "--frameworks", "torch", "--precisions", "bf16", "--model", "tiny", "--batch-size", "2",
         "--seq-len", "16", "--steps", "12", "--warmup", "2", "--device", "cpu", "--no-compile"]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (ended, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def wait_until(proc: subprocess.Popen, ready) -> None:
    deadline = time.monotonic() + START_S
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the child never reached its long phase"
        time.sleep(0.05)


def ended(proc: subprocess.Popen, sig, code) -> list[str]:
    """Send ``sig``; the child's stderr lines after asserting its exit code and its one error line."""
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=START_S)
    lines = [row for row in err.splitlines() if row.strip()]
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    assert [row for row in lines if row.startswith("parallax: error: ")] == lines[-1:], err
    return lines


@SIGNALS
def test_benchmark_records_its_running_cell_and_resume_runs_it(tmp_path, sig, code):
    out = tmp_path / "bench"
    env = dict(os.environ, FAKE_TRAIN_PLAN=json.dumps({"*": "hang"}))
    proc = subprocess.Popen([sys.executable, str(FIXTURES / "run_fake_benchmark.py"), *BENCH, "--output-dir", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(proc, lambda: any(out.glob("runs/*/fake.pid")))
    [cell] = out.glob("runs/*/fake.pid")
    child = int(cell.read_text())
    lines = ended(proc, sig, code)
    assert lines[-1].startswith(f"parallax: error: interrupted by {sig.name}: the cells that finished are kept")
    run = results.load_run(cell.parent)
    assert (run["status"], run["signal"]) == ("interrupted", sig.name)
    assert not (out / ".parallax.lock").exists() and not (cell.parent / "progress.jsonl").exists()
    assert json.loads((out / "index.json").read_text())["counts"]["interrupted"] == 1
    deadline = time.monotonic() + START_S
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # the cell's process went with it
    env["FAKE_TRAIN_PLAN"] = "{}"
    again = subprocess.run([sys.executable, str(FIXTURES / "run_fake_benchmark.py"), *BENCH, "--output-dir", str(out),
                            "--resume"], env=env, capture_output=True, text=True, timeout=START_S)
    assert again.returncode == 0, again.stderr
    assert results.load_run(cell.parent)["status"] == "ok"


def test_data_prepare_leaves_no_staging_folder(tmp_path):
    pytest.importorskip("tokenizers")
    from fixtures.samples import TRAIN as STORIES

    corpus = tmp_path / "corpus.txt"
    stories = STORIES.read_text()
    corpus.write_text(stories * 40)  # ~16 MB: tokenizing takes a while after the log line
    out = tmp_path / "prepared"
    proc = subprocess.Popen([sys.executable, "-m", "parallax", "data", "prepare", str(corpus), "--out", str(out),
                             "--tokenizer-sample-mb", "0.2", "--vocab-size", "400"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(proc, lambda: (out / ".staging").is_dir())
    lines = ended(proc, signal.SIGTERM, 143)
    assert lines[-1] == "parallax: error: interrupted by SIGTERM"
    assert not out.exists()


def test_profile_stops_in_its_warm_up_with_one_line(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "profile"
    proc = subprocess.Popen([sys.executable, "-m", "parallax", "profile", "--model", "tiny", "--device", "cpu",
                             "--no-compile", "--batch-size", "2", "--seq-len", "16", "--warmup", "100000",
                             "--output-dir", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = []

    def warming() -> bool:  # its first warm-up step done: the progress says so
        said.append(proc.stderr.readline())
        return said[-1] == "warm-up step 1/100000\n"

    wait_until(proc, warming)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=START_S)
    assert proc.returncode == 143, err
    lines = [row for row in err.splitlines() if row.strip()]
    assert lines[-1] == "parallax: error: interrupted by SIGTERM"
    assert all(row.startswith("warm-up step ") for row in lines[:-1]), err  # a tenth of the warm-up at most
    assert not list(out.glob("profile.*"))


def test_train_stopped_while_jax_compiles_exits_143_not_a_crash(tmp_path):
    """SIGTERM while XLA compiles: the run is recorded, then the process ends without the
    interpreter's teardown, where the cut compilation crashed it (exit 139)."""
    pytest.importorskip("jax")
    out, progress = tmp_path / "run", tmp_path / "progress.jsonl"
    env = dict(os.environ, PARALLAX_PROGRESS_JSONL=str(progress))
    proc = subprocess.Popen([sys.executable, "-m", "parallax", "train", "--framework", "jax", "--model", "tiny",
                             "--device", "cpu", "--steps", "100000", "--warmup", "2", "--output-dir", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(proc, lambda: progress.exists() and "compiling" in progress.read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=START_S)
    assert proc.returncode == 143, err
    assert results.load_run(out)["status"] == "interrupted"
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "steps.jsonl"]


def test_parity_stops_with_one_line(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    proc = subprocess.Popen([sys.executable, "-m", "parallax", "parity", "--steps", "200", "--json",
                             str(tmp_path / "parity.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = []

    def building() -> bool:
        said.append(proc.stderr.readline())
        return said[-1].startswith("parallax: building torch and jax")

    wait_until(proc, building)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=START_S)
    assert proc.returncode == 130, err
    assert [row for row in err.splitlines() if row.strip()] == ["parallax: error: interrupted by SIGINT"]
    assert list(tmp_path.iterdir()) == []
