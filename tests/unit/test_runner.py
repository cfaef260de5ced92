"""The benchmark runner with a fake trainer: outcomes, output directory, resume after SIGKILL."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.fake_runs import tiny_config
from fixtures.fake_train import SKIP_REASON
from fixtures.matrix import FAKE_TRAIN, fake_command, small_matrix

from parallax.run import runner
from parallax.store import lock
from parallax.errors import ParallaxError
from parallax.store.results import load_run, load_steps

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class Recorder:
    """A Display that keeps every event."""

    def __init__(self):
        self.events = []

    def matrix_started(self, matrix, results):
        self.events.append(("matrix_started", [r.status for r in results]))

    def cell_started(self, cell):
        self.events.append(("started", cell.id))

    def cell_progress(self, cell, record):
        self.events.append(("progress", cell.id, record))

    def cell_finished(self, result):
        self.events.append(("finished", result.cell.id, result.status))

    def warning(self, text):
        self.events.append(("warning", text))

    def matrix_finished(self, results):
        self.events.append(("matrix_finished", len(results)))


def run(out, matrix=None, plan=None, monkeypatch=None, **kw):
    if monkeypatch is not None:
        monkeypatch.setenv("FAKE_TRAIN_PLAN", json.dumps(plan or {}))
    kw.setdefault("environment", lambda: {"fake": True})
    return runner.run_matrix(matrix or small_matrix(), out, command_for=fake_command, poll_s=0.05, **kw)


def by_id(results):
    return {r.cell.id: r for r in results}


# ----------------------------------------------------------------------------- the matrix

def test_cells_run_repeat_then_seed_then_framework_then_precision():
    m = small_matrix(seeds=(0, 1), repeats=2)
    ids = [c.id for c in m.cells()]
    assert len(ids) == 16
    assert ids[:5] == ["torch-bf16-seed0-rep0", "torch-te-fp8-delayed-seed0-rep0", "jax-bf16-seed0-rep0",
                       "jax-flax-fp8-delayed-seed0-rep0", "torch-bf16-seed1-rep0"]
    assert ids[8] == "torch-bf16-seed0-rep1"


def test_matrix_file_holds_the_benchmark_not_the_cells():
    d = small_matrix().to_dict()
    assert d["frameworks"] == ["torch", "jax"] and d["seeds"] == [0] and d["repeats"] == 1
    assert not set(runner.CELL_FIELDS) & set(d["run"])
    assert d["run"]["model"] == "tiny" and d["run"]["steps"] == 12
    assert runner.Matrix.from_dict(d).to_dict() == d


@pytest.mark.parametrize("changes, message", [
    ({"frameworks": ("torch", "maxtextx")}, "unknown framework 'maxtextx'; choose one of: torch, jax, maxtext"),
    ({"recipes": ("bf16", "fp4")}, "no framework of torch, jax has a recipe 'fp4'; give a format (bf16, fp8, mxfp8, nvfp4, mxfp4)"),
    ({"recipes": ("bf16", "bf16")}, "--precisions/--recipes lists 'bf16' twice"),
    ({"max_loss_gap": 0.0}, "--max-loss-gap must be positive"),
    ({"frameworks": ()}, "--frameworks is empty"),
    ({"seeds": ()}, "--seeds is empty"),
    ({"seeds": (-1,)}, "--seeds must not be negative"),
    ({"repeats": 0}, "--repeats must be at least 1"),
    ({"concurrent": 0}, "--concurrent must be at least 1"),
    ({"base": tiny_config(steps=2, warmup=2)}, "--steps (2) must be greater than --warmup (2)"),
])
def test_bad_matrix_is_one_line_naming_the_fix(changes, message):
    with pytest.raises(ParallaxError) as err:
        small_matrix(**changes).validate()
    assert message in str(err.value)


def test_cell_configuration_travels_as_a_file_that_train_reads_back(tmp_path):
    from parallax.cli.train import load_config

    run = tiny_config(framework="jax", precision="fp8", recipe="flax-fp8-direct", seed=3, peak_tflops=989.0,
                      eval_every=5, synthetic=False, data="/d/tokens.bin", epochs=4.0)
    cmd = runner.train_command(run, tmp_path)
    assert cmd == [sys.executable, "-m", "parallax", "train", "--config", str(tmp_path / "config.json"), "--overwrite"]
    runner.write_cell_config(tmp_path, run)
    assert load_config(cmd[5], {}) == run.replace(output_dir=str(tmp_path))


def test_no_compile_applies_to_the_frameworks_that_run_eagerly(tmp_path):
    m = small_matrix()  # tiny_config has compile=False
    configs = {c.framework: m.run_config(c, tmp_path) for c in m.cells()}
    assert configs["torch"].compile is False and configs["jax"].compile is True
    assert "--no-compile" not in runner.train_command(configs["jax"], tmp_path)


def test_children_never_let_jax_preallocate(tmp_path):
    env = runner.child_env(tmp_path / "p.jsonl")
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["PARALLAX_PROGRESS_JSONL"] == str(tmp_path / "p.jsonl")


# ----------------------------------------------------------------------------- a whole matrix

def test_matrix_of_ok_cells_writes_runs_index_and_environment(tmp_path, monkeypatch):
    rec = Recorder()
    results = run(tmp_path, plan={}, monkeypatch=monkeypatch, display=rec)
    assert [r.status for r in results] == ["ok"] * 4
    for r in results:
        files = sorted(p.name for p in r.run_dir.iterdir())
        assert files == ["config.json", "run.json", "run.log", "steps.jsonl"]  # the progress file is removed
        saved = load_run(r.run_dir)
        assert saved["config"]["framework"] == r.cell.framework and saved["config"]["seed"] == 0
        assert len(load_steps(r.run_dir)) == 12
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["counts"]["ok"] == 4 and index["counts"]["pending"] == 0
    assert [c["dir"] for c in index["cells"]][0] == "runs/torch-bf16-seed0-rep0"
    assert json.loads((tmp_path / "environment.json").read_text()) == {"fake": True}
    assert json.loads((tmp_path / "matrix.json").read_text()) == small_matrix().to_dict()
    kinds = [e[0] for e in rec.events]
    assert kinds[0] == "matrix_started" and kinds[-1] == "matrix_finished"
    assert kinds.count("started") == kinds.count("finished") == 4
    # the fake trainer reports through PARALLAX_PROGRESS_JSONL; the runner relays it
    progress = [e[2] for e in rec.events if e[0] == "progress"]
    assert {"phase": "compiling"} in progress and any(p.get("step") == 0 for p in progress)


def test_every_failure_is_recorded_and_the_matrix_goes_on(tmp_path, monkeypatch):
    m = small_matrix(frameworks=("torch", "jax"), recipes=("bf16", "fp8", "nvfp4"), seeds=(0, 1))
    plan = {"torch-te-fp8-delayed-seed0": "oom", "torch-te-fp8-delayed-seed1": "oom_silent", "torch-emulated-nvfp4-seed0": "crash",
            "torch-emulated-nvfp4-seed1": "failed_json", "jax-fp8": "skip", "jax-emulated-nvfp4-seed0": "hang",
            "jax-emulated-nvfp4-seed1": "signal", "jax-bf16-seed1": "zero_no_json"}
    results = by_id(run(tmp_path, m, plan, monkeypatch, timeout_s=3))
    status = {k: r.status for k, r in results.items()}
    assert status == {
        "torch-bf16-seed0-rep0": "ok", "torch-te-fp8-delayed-seed0-rep0": "oom", "torch-emulated-nvfp4-seed0-rep0": "failed",
        "jax-bf16-seed0-rep0": "ok", "jax-flax-fp8-delayed-seed0-rep0": "skipped", "jax-emulated-nvfp4-seed0-rep0": "timeout",
        "torch-bf16-seed1-rep0": "ok", "torch-te-fp8-delayed-seed1-rep0": "oom", "torch-emulated-nvfp4-seed1-rep0": "failed",
        "jax-bf16-seed1-rep0": "failed", "jax-flax-fp8-delayed-seed1-rep0": "skipped", "jax-emulated-nvfp4-seed1-rep0": "failed",
    }

    def saved(cell_id):
        return load_run(results[cell_id].run_dir)

    assert saved("torch-te-fp8-delayed-seed0-rep0")["error"] == "CUDA out of memory at step 3"  # the trainer's own
    silent = saved("torch-te-fp8-delayed-seed1-rep0")
    assert silent["error"].startswith("out of memory (exit code 3)")
    assert "Tried to allocate 2.00 GiB" in silent["error"] and silent["exit_code"] == 3
    crash = saved("torch-emulated-nvfp4-seed0-rep0")
    assert crash["error"].splitlines()[0] == "exit code 1: RuntimeError: boom"
    assert "Traceback (most recent call last):" in crash["error"]  # the log tail
    assert saved("torch-emulated-nvfp4-seed1-rep0")["error"] == "loss became NaN at step 4"
    skipped = saved("jax-flax-fp8-delayed-seed0-rep0")
    assert skipped["error"] == SKIP_REASON and skipped["config"]["precision"] == "fp8"
    timeout = saved("jax-emulated-nvfp4-seed0-rep0")
    assert timeout["error"].splitlines()[0] == "exceeded --timeout-per-run of 3 s after step 12 of 12"
    assert saved("jax-emulated-nvfp4-seed1-rep0")["error"].startswith("killed by SIGKILL")
    assert saved("jax-bf16-seed1-rep0")["error"].startswith("exited 0 without writing an ok run.json")
    hung_pid = int((results["jax-emulated-nvfp4-seed0-rep0"].run_dir / "fake.pid").read_text())
    assert not _alive(hung_pid)
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["counts"] == {"ok": 3, "failed": 4, "oom": 2, "timeout": 1, "skipped": 2, "interrupted": 0,
                               "pending": 0}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


# ----------------------------------------------------------------------------- output directory

def test_an_output_dir_of_another_configuration_is_refused(tmp_path, monkeypatch):
    run(tmp_path, small_matrix(recipes=("bf16",), frameworks=("torch",)), {}, monkeypatch)
    other = small_matrix(recipes=("bf16",), frameworks=("torch",), base=tiny_config(steps=8))
    for resume in (False, True):
        with pytest.raises(ParallaxError) as err:
            run(tmp_path, other, {}, monkeypatch, resume=resume)
        assert "holds results of a different benchmark configuration" in str(err.value)
        assert "run.steps 12 → 8" in str(err.value) and "--resume" in str(err.value)


def test_the_same_configuration_needs_resume(tmp_path, monkeypatch):
    m = small_matrix(recipes=("bf16",), frameworks=("torch",))
    run(tmp_path, m, {}, monkeypatch)
    with pytest.raises(ParallaxError, match="add --resume to run only the missing cells"):
        run(tmp_path, m, {}, monkeypatch)


def test_a_resumed_benchmark_may_add_cells_and_keeps_the_runs_there(tmp_path, monkeypatch):
    calls = tmp_path / "calls.txt"
    run(tmp_path / "out", small_matrix(recipes=("bf16", "fp8"), frameworks=("torch",)), {}, monkeypatch)
    first = (tmp_path / "out" / "runs" / "torch-bf16-seed0-rep0" / "run.json").read_text()
    bigger = small_matrix(recipes=("bf16", "fp8", "jax:flax-fp8-direct"), frameworks=("torch", "jax"))
    with pytest.raises(ParallaxError, match="add --resume|different benchmark configuration"):
        run(tmp_path / "out", bigger, {}, monkeypatch)  # without --resume nothing is added
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))
    rec = Recorder()
    results = run(tmp_path / "out", bigger, {}, monkeypatch, resume=True, display=rec)
    assert {r.cell.id: r.reused for r in results} == {
        "torch-bf16-seed0-rep0": True, "torch-te-fp8-delayed-seed0-rep0": True, "jax-bf16-seed0-rep0": False,
        "jax-flax-fp8-delayed-seed0-rep0": False, "jax-flax-fp8-direct-seed0-rep0": False}
    assert sorted(calls.read_text().splitlines()) == ["jax bf16 0", "jax flax-fp8-delayed 0", "jax flax-fp8-direct 0"]
    assert (tmp_path / "out" / "runs" / "torch-bf16-seed0-rep0" / "run.json").read_text() == first
    warnings = [e[1] for e in rec.events if e[0] == "warning"]
    assert len(warnings) == 1 and "extending the benchmark by 3 run(s) of jax bf16, jax flax-fp8-delayed, " \
        "jax flax-fp8-direct" in warnings[0]
    stored = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert stored["frameworks"] == ["torch", "jax"] and len(stored["cells"]) == 5


def test_a_resumed_benchmark_may_add_seeds_and_repeats(tmp_path, monkeypatch):
    calls = tmp_path / "calls.txt"
    run(tmp_path, small_matrix(recipes=("bf16",), frameworks=("torch",)), {}, monkeypatch)
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))
    results = run(tmp_path, small_matrix(recipes=("bf16",), frameworks=("torch",), seeds=(0, 1), repeats=2), {},
                  monkeypatch, resume=True)
    assert {r.cell.id: r.reused for r in results} == {
        "torch-bf16-seed0-rep0": True, "torch-bf16-seed1-rep0": False,
        "torch-bf16-seed0-rep1": False, "torch-bf16-seed1-rep1": False}
    assert sorted(calls.read_text().splitlines()) == ["torch bf16 0", "torch bf16 1", "torch bf16 1"]
    with pytest.raises(ParallaxError, match="different benchmark configuration"):  # fewer seeds again: refused
        run(tmp_path, small_matrix(recipes=("bf16",), frameworks=("torch",), seeds=(1,), repeats=2), {},
            monkeypatch, resume=True)


def test_a_resumed_benchmark_may_not_drop_cells_or_change_anything_else(tmp_path, monkeypatch):
    run(tmp_path, small_matrix(recipes=("bf16", "fp8"), frameworks=("torch",)), {}, monkeypatch)
    fewer = small_matrix(recipes=("bf16",), frameworks=("torch",))
    with pytest.raises(ParallaxError, match="different benchmark configuration"):
        run(tmp_path, fewer, {}, monkeypatch, resume=True)
    more_but_other_steps = small_matrix(recipes=("bf16", "fp8"), frameworks=("torch", "jax"),
                                        base=tiny_config(steps=8))
    with pytest.raises(ParallaxError, match=r"run.steps 12 → 8"):
        run(tmp_path, more_but_other_steps, {}, monkeypatch, resume=True)


def test_a_second_runner_on_the_same_dir_is_refused(tmp_path, monkeypatch):
    with lock.locked(tmp_path, "parallax benchmark"):
        with pytest.raises(ParallaxError) as refused:
            run(tmp_path, small_matrix(), {}, monkeypatch)
    assert str(refused.value) == (f"{tmp_path} is in use by 'parallax benchmark' (pid {os.getpid()}); wait for it "
                                  "to end or choose another --output-dir")


def test_a_corrupt_run_file_is_named_and_its_cell_runs_again(tmp_path, monkeypatch):
    m = small_matrix(recipes=("bf16",))
    calls = tmp_path / "calls.txt"
    run(tmp_path / "out", m, {}, monkeypatch)
    bad = tmp_path / "out" / "runs" / "jax-bf16-seed0-rep0" / "run.json"
    bad.write_text('{"schema": "parallax.run/1", "status": "ok", "con')  # truncated
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))
    rec = Recorder()
    results = run(tmp_path / "out", m, {}, monkeypatch, resume=True, display=rec)
    assert [r.status for r in results] == ["ok", "ok"]
    assert calls.read_text() == "jax bf16 0\n"
    warnings = [e[1] for e in rec.events if e[0] == "warning"]
    assert len(warnings) == 1 and str(bad) in warnings[0] and "corrupt or truncated" in warnings[0]


def test_an_ok_run_without_its_steps_runs_again(tmp_path, monkeypatch):
    m = small_matrix(recipes=("bf16",), frameworks=("torch",))
    run(tmp_path, m, {}, monkeypatch)
    (tmp_path / "runs" / "torch-bf16-seed0-rep0" / "steps.jsonl").unlink()
    rec = Recorder()
    results = run(tmp_path, m, {}, monkeypatch, resume=True, display=rec)
    assert results[0].status == "ok" and not results[0].reused
    assert "steps.jsonl: missing beside an ok run.json (the cell will run again)" in rec.events[0][1]


def test_a_command_that_cannot_start_fails_its_cell_only(tmp_path, monkeypatch):
    def command_for(run_config, run_dir):
        if run_config.framework == "torch":
            return [str(tmp_path / "no-such-interpreter")]
        return fake_command(run_config, run_dir)

    monkeypatch.setenv("FAKE_TRAIN_PLAN", "{}")
    results = runner.run_matrix(small_matrix(recipes=("bf16",)), tmp_path / "out", command_for=command_for,
                                environment=dict, poll_s=0.05)
    assert [r.status for r in results] == ["failed", "ok"]
    assert results[0].error.startswith(f"could not start {tmp_path / 'no-such-interpreter'}")


def test_resume_after_sigkill_runs_only_the_missing_cells(tmp_path, monkeypatch):
    out = tmp_path / "out"
    env = dict(os.environ, FAKE_TRAIN_PLAN=json.dumps({"jax-bf16": "hang"}))
    proc = subprocess.Popen([sys.executable, str(FIXTURES / "run_fake_matrix.py"), str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pid_file = out / "runs" / "jax-bf16-seed0-rep0" / "fake.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the fake matrix never reached its hanging cell"
        time.sleep(0.05)
    finished = {c: (out / "runs" / c / "run.json").read_bytes()
                for c in ("torch-bf16-seed0-rep0", "torch-te-fp8-delayed-seed0-rep0")}
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the cell's process dies with its runner (PR_SET_PDEATHSIG), so a resume never races it
    hung = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(hung) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(hung)

    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))
    results = run(out, small_matrix(), {}, monkeypatch, resume=True)
    assert calls.read_text().splitlines() == ["jax bf16 0", "jax flax-fp8-delayed 0"]
    assert [r.status for r in results] == ["ok"] * 4
    assert [r.reused for r in results] == [True, True, False, False]
    for cell, content in finished.items():
        assert (out / "runs" / cell / "run.json").read_bytes() == content  # nothing finished was lost
    assert not (out / "runs" / "jax-bf16-seed0-rep0" / "fake.pid").exists()  # the leftovers were cleared
    assert json.loads((out / "index.json").read_text())["counts"]["ok"] == 4


def test_interrupt_records_the_running_cell_as_interrupted(tmp_path, monkeypatch):
    class Interrupt(Recorder):
        def cell_progress(self, cell, record):
            if cell.id == "torch-te-fp8-delayed-seed0-rep0" and "step" in record:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, small_matrix(), {"torch-fp8": "hang"}, monkeypatch, display=Interrupt())
    index = json.loads((tmp_path / "index.json").read_text())
    assert [c["status"] for c in index["cells"]] == ["ok", "interrupted", "pending", "pending"]
    record = json.loads((tmp_path / "runs" / "torch-te-fp8-delayed-seed0-rep0" / "run.json").read_text())
    assert (record["status"], record["signal"]) == ("interrupted", "SIGINT")  # scan() runs it again on --resume
    pid = int((tmp_path / "runs" / "torch-te-fp8-delayed-seed0-rep0" / "fake.pid").read_text()) \
        if (tmp_path / "runs" / "torch-te-fp8-delayed-seed0-rep0" / "fake.pid").exists() else None
    assert pid is None or not _alive(pid)



def test_a_cell_stopped_by_a_signal_is_recorded_and_runs_again_on_resume(tmp_path, monkeypatch):
    m = small_matrix(recipes=("bf16",), frameworks=("torch",))
    results = run(tmp_path, m, {"torch-bf16": "interrupted"}, monkeypatch)
    assert [(r.status, r.error) for r in results] == [("interrupted", "interrupted by SIGTERM after 3 of 12 steps")]
    assert json.loads((tmp_path / "index.json").read_text())["counts"]["interrupted"] == 1
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))
    results = run(tmp_path, m, {}, monkeypatch, resume=True)
    assert [(r.status, r.reused) for r in results] == [("ok", False)]
    assert calls.read_text() == "torch bf16 0\n"


def test_a_cells_log_is_streamed_beside_it_and_kept_when_the_cell_is_stopped(tmp_path, monkeypatch):
    seen = []

    class Look(Recorder):
        def cell_progress(self, cell, record):
            folder = tmp_path / "runs" / cell.id
            seen.append(sorted(p.name for p in folder.iterdir() if "run.log" in p.name))
            if "step" in record:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, small_matrix(recipes=("bf16",), frameworks=("torch",)), {"torch-bf16": "hang"}, monkeypatch,
            display=Look())
    assert seen[0][0].startswith(".run.log.") and len(seen[0]) == 1  # while the cell runs
    folder = tmp_path / "runs" / "torch-bf16-seed0-rep0"
    assert [p.name for p in folder.iterdir() if "run.log" in p.name] == ["run.log"]  # the stopped cell's log


@pytest.mark.parametrize("code, need", [(errno.ENOSPC, "the disk is full; free space there or choose another folder"),
                                        (errno.EROFS, "the file system is read-only; choose a writable folder")])
def test_a_cells_log_the_disk_refuses_is_one_line(tmp_path, monkeypatch, code, need):
    """Only the log fails (the child, another process, wrote its result): one line naming it, no
    temporary file left, the cell's result kept for --resume."""
    from parallax.store import files

    real = files._sync

    def sync(fd, path):
        if Path(path).name.startswith(".run.log."):
            raise OSError(code, os.strerror(code), path)
        real(fd, path)

    monkeypatch.setattr(files, "_sync", sync)
    with pytest.raises(ParallaxError) as refused:
        run(tmp_path, small_matrix(recipes=("bf16",), frameworks=("torch",)), {}, monkeypatch)
    folder = tmp_path / "runs" / "torch-bf16-seed0-rep0"
    assert str(refused.value) == f"cannot write {folder / 'run.log'} (from --output-dir): {need}"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "run.json", "steps.jsonl"]
    assert load_run(folder)["status"] == "ok"


def test_environment_json_is_written_once(tmp_path, monkeypatch):
    calls = []

    def environment():
        calls.append(1)
        return {"n": len(calls)}

    m = small_matrix(recipes=("bf16",), frameworks=("torch",))
    run(tmp_path, m, {"torch-bf16": "crash"}, monkeypatch, environment=environment)
    (tmp_path / "runs" / "torch-bf16-seed0-rep0" / "run.json").unlink()
    run(tmp_path, m, {}, monkeypatch, environment=environment, resume=True)
    # written once; a resume asks again only to compare the machine (below)
    assert calls == [1, 1] and json.loads((tmp_path / "environment.json").read_text()) == {"n": 1}


class Warnings(runner.NullDisplay):
    def __init__(self):
        self.said = []

    def warning(self, text):
        self.said.append(text)


def test_a_benchmark_resumed_on_another_machine_is_warned_before_any_cell(tmp_path, monkeypatch):
    def on(uuid):
        return lambda: {"hostname": "vm", "gpus": [{"name": "NVIDIA H200", "uuid": f"GPU-{uuid}"}]}

    m = small_matrix(recipes=("bf16",), frameworks=("torch",))
    run(tmp_path, m, {"torch-bf16": "crash"}, monkeypatch, environment=on("aaaa"))
    (tmp_path / "runs" / "torch-bf16-seed0-rep0" / "run.json").unlink()
    same, other = Warnings(), Warnings()
    run(tmp_path, m, {"torch-bf16": "crash"}, monkeypatch, environment=on("aaaa"), resume=True, display=same)
    (tmp_path / "runs" / "torch-bf16-seed0-rep0" / "run.json").unlink()
    run(tmp_path, m, {}, monkeypatch, environment=on("bbbb"), resume=True, display=other)
    assert same.said == []
    assert other.said == [f"{tmp_path} was started on vm (NVIDIA H200 GPU-aaaa), this is vm (NVIDIA H200 GPU-bbbb): "
                          "the report refuses ratios between cells of two machines; run every cell here (a new "
                          "--output-dir), or the bf16 twins here too and compare with --cross-machine"]


def test_collect_environment_runs_in_a_child_and_never_fails(monkeypatch):
    env = runner.collect_environment(timeout_s=120)
    assert env["parallax_version"] and env["python"]
    assert "gpus" in env or env["error"].startswith("parallax.plan.envinfo")


def test_fake_trainer_is_the_contract(tmp_path):
    # the fake accepts exactly the command line the runner builds for parallax train
    assert FAKE_TRAIN.exists()
    cmd = fake_command(tiny_config(), tmp_path)
    runner.write_cell_config(tmp_path, tiny_config())
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, FAKE_TRAIN_PLAN="{}"))
    assert proc.returncode == 0, proc.stderr
    assert load_run(tmp_path)["status"] == "ok"


# ----------------------------------------------------------------------------- the progress file

def test_progress_file_rate_limits_and_flushes_the_last_step(tmp_path, monkeypatch):
    from parallax.run import progress_file

    path = tmp_path / "p.jsonl"
    monkeypatch.setenv(progress_file.ENV_VAR, str(path))
    class Live:
        def __init__(self):
            self.steps = []

        def step(self, step, loss, step_ms):
            self.steps.append(step)

        def phase(self, text):
            pass

    live = Live()
    progress = progress_file.attach(live)
    for step in range(5):
        progress.step(step, 9.0 - step, float("nan") if step == 1 else 10.0)
    progress.phase("evaluating")
    progress.close()
    records, offset = progress_file.read_new(path, 0)
    # the first step goes out at once, steps 1-3 are held back, step 4 is flushed at the phase
    assert records == [{"step": 0, "loss": 9.0, "step_ms": 10.0}, {"step": 4, "loss": 5.0, "step_ms": 10.0},
                       {"phase": "evaluating"}]
    assert offset == path.stat().st_size
    assert live.steps == [0, 1, 2, 3, 4]  # the terminal bar still sees every step
    monkeypatch.delenv(progress_file.ENV_VAR)
    assert progress_file.attach(live) is live


def test_progress_reader_waits_for_whole_lines(tmp_path):
    from parallax.run import progress_file

    path = tmp_path / "p.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "lo')
    records, offset = progress_file.read_new(path, 0)
    assert records == [{"step": 1}] and offset == len('{"step": 1}\n')
    with open(path, "a") as f:
        f.write('ss": 3.0}\nnot json\n')
    records, offset = progress_file.read_new(path, offset)
    assert records == [{"step": 2, "loss": 3.0}] and offset == path.stat().st_size
    assert progress_file.read_new(tmp_path / "missing", 7) == ([], 7)


@pytest.mark.parametrize("code, need", [(errno.ENOSPC, "the disk is full; free space there or choose another folder"),
                                        (errno.EROFS, "the file system is read-only; choose a writable folder")])
def test_a_progress_file_the_disk_refuses_is_one_line_and_keeps_its_lines(tmp_path, monkeypatch, code, need):
    """Made by a read-only folder (EROFS) or written on a full disk (ENOSPC): the writer's one
    line naming the file and its variable; the records before stay whole."""
    from fixtures.full_disk import fail_writes_under
    from parallax.run import progress_file

    path = tmp_path / "p.jsonl"
    progress = progress_file.ProgressFile(path, min_interval_s=0.0)
    progress.phase("compiling")
    with monkeypatch.context() as patch:
        fail_writes_under(patch, tmp_path, code, in_place=True)
        with pytest.raises(ParallaxError) as refused:
            progress.step(0, 9.0, 10.0)
        assert str(refused.value) == f"cannot write {path} (from {progress_file.ENV_VAR}): {need}"
    assert path.read_text() == '{"phase": "compiling"}\n' and [p.name for p in tmp_path.iterdir()] == ["p.jsonl"]


def test_a_progress_file_in_a_read_only_folder_stops_the_run_before_it_starts(tmp_path, monkeypatch):
    from fixtures.full_disk import fail_writes_under
    from parallax.run import progress_file

    fail_writes_under(monkeypatch, tmp_path, errno.EROFS, in_place=True)
    monkeypatch.setenv(progress_file.ENV_VAR, str(tmp_path / "p.jsonl"))
    with pytest.raises(ParallaxError) as refused:
        progress_file.attach(None)
    assert str(refused.value) == (f"cannot write {tmp_path / 'p.jsonl'} (from {progress_file.ENV_VAR}): "
                                  "the file system is read-only; choose a writable folder")
    assert list(tmp_path.iterdir()) == []


def test_cells_start_without_forking_a_process_that_runs_jax(tmp_path):
    """The runner may have imported JAX (check-env, a test session): starting a cell must not
    fork it (JAX warns that fork after its threads start can deadlock). The death signal is
    taken in the child instead (``parallax.native.lifeline``)."""
    pytest.importorskip("jax")
    script = ("import sys, warnings; sys.path.insert(0, %r)\n"
              "warnings.simplefilter('error')\n"  # the fork warning would fail the cell's start
              "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()\n"
              "from pathlib import Path\n"
              "from fixtures.matrix import fake_command, small_matrix\n"
              "from parallax.run.runner import run_matrix\n"
              "rs = run_matrix(small_matrix(recipes=('bf16',)), Path(sys.argv[1]), command_for=fake_command,\n"
              "                environment=lambda: {'fake': True}, poll_s=0.05)\n"
              "print([r.status for r in rs])\n") % str(FIXTURES.parent)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu", FAKE_TRAIN_PLAN="{}"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['ok', 'ok']"
    assert "os.fork()" not in proc.stderr


def test_a_cell_whose_runner_is_gone_exits_at_once(tmp_path):
    """The runner's pid in the environment is not the child's parent: the child stops."""
    code = ("import os; os.environ['PARALLAX_RUNNER_PID'] = '1' if os.getppid() != 1 else '2'\n"
            "from parallax.native.lifeline import die_with_runner; die_with_runner(); print('still here')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (1, "")
    proc = subprocess.run([sys.executable, "-c", "from parallax.native.lifeline import die_with_runner; "
                           "die_with_runner(); print('still here')"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PARALLAX_RUNNER_PID": str(os.getpid())})
    assert (proc.returncode, proc.stdout.strip()) == (0, "still here")


# ----------------------------------------------------------------------------- the loss guard

def test_loss_guard_fails_a_low_precision_cell_far_above_its_bf16_twin(tmp_path, monkeypatch):
    m = small_matrix(frameworks=("torch",), recipes=("bf16", "fp8", "torchao-fp8-tensorwise"))
    results = by_id(run(tmp_path, m, {"torch-te-fp8-delayed": "lossy"}, monkeypatch))
    bad, good = results["torch-te-fp8-delayed-seed0-rep0"], results["torch-torchao-fp8-tensorwise-seed0-rep0"]
    assert results["torch-bf16-seed0-rep0"].status == "ok" and good.status == "ok"
    assert bad.status == "failed" and bad.error.startswith("numerics guard: final loss +1.0")
    stored = load_run(bad.run_dir)
    verdict = stored["guards"]["loss_gap"]
    assert stored["status"] == "failed" and verdict["twin"] == "torch-bf16-seed0-rep0"
    assert verdict["gap"] == pytest.approx(1.0 + 0.0, abs=0.05) and verdict["ok"] is False
    assert stored["throughput"]["tokens_per_s"] > 0  # measurements are kept
    assert load_run(good.run_dir)["guards"]["loss_gap"]["ok"] is True
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["counts"]["failed"] == 1 and index["counts"]["ok"] == 2


def test_loss_guard_threshold_is_the_matrix_setting(tmp_path, monkeypatch):
    m = small_matrix(frameworks=("torch",), recipes=("bf16", "fp8"), max_loss_gap=2.0)
    results = by_id(run(tmp_path, m, {"torch-te-fp8-delayed": "lossy"}, monkeypatch))
    assert results["torch-te-fp8-delayed-seed0-rep0"].status == "ok"
    assert json.loads((tmp_path / "matrix.json").read_text())["max_loss_gap"] == 2.0


# ----------------------------------------------------------------------------- --concurrent

def test_concurrent_cells_run_at_once_and_their_runs_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_TRAIN_RENDEZVOUS", f"{tmp_path / 'meeting'}:2")  # a lone cell fails
    rec = Recorder()
    results = run(tmp_path / "out", small_matrix(concurrent=2), {}, monkeypatch, display=rec)
    assert [r.status for r in results] == ["ok"] * 4
    kinds = [e[0] for e in rec.events if e[0] in ("started", "finished")]
    assert kinds[:2] == ["started", "started"]  # the second cell started before the first ended
    assert kinds.count("started") == kinds.count("finished") == 4
    for r in results:
        assert load_run(r.run_dir)["timing"]["concurrent_runs"] == 2
        assert len(load_steps(r.run_dir)) == 12  # steps untouched by the stamp
    assert json.loads((tmp_path / "out" / "matrix.json").read_text())["concurrent"] == 2
    assert json.loads((tmp_path / "out" / "index.json").read_text())["counts"]["ok"] == 4


def test_concurrent_cells_have_loss_but_no_throughput_in_the_report(tmp_path, monkeypatch):
    from parallax.analysis.compare import build_comparison

    run(tmp_path, small_matrix(concurrent=2), {}, monkeypatch)
    record = build_comparison(tmp_path)
    for cell in record["cells"]:
        assert cell["n_ok"] == 1
        assert cell["tokens_per_s"] is None and cell["step_ms"] is None and cell["flops"] is None
        assert any("throughput not measured: up to 2 runs shared the device" in n for n in cell["notes"])
        assert cell["final_loss"]["value"] is not None
    assert record["speedups"] == []
    assert {d["framework"] for d in record["loss_deltas"]} == {"torch", "jax"}
    from parallax.analysis.report import markdown
    text = markdown.render(record)
    assert "No throughput to compare: the cells' speed was not measured" in text
    assert "No cell finished with a result." not in text  # every cell did


def test_interrupt_stops_every_concurrent_cell(tmp_path, monkeypatch):
    class Interrupt(Recorder):
        def cell_progress(self, cell, record):
            if cell.id == "torch-te-fp8-delayed-seed0-rep0" and record.get("phase") == "evaluating":
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, small_matrix(concurrent=2), {"*": "hang"}, monkeypatch, display=Interrupt())
    pids = [int(p.read_text()) for p in tmp_path.glob("runs/*/fake.pid")]
    assert pids and not any(_alive(pid) for pid in pids)
    index = json.loads((tmp_path / "index.json").read_text())
    assert (index["counts"]["interrupted"], index["counts"]["pending"]) == (2, 2)  # the two running, recorded


def test_a_matrix_file_from_before_concurrent_resumes(tmp_path, monkeypatch):
    run(tmp_path, small_matrix(), {}, monkeypatch)
    path = tmp_path / "matrix.json"
    old = json.loads(path.read_text())
    del old["concurrent"]
    path.write_text(json.dumps(old))
    results = run(tmp_path, small_matrix(), {}, monkeypatch, resume=True)
    assert all(r.reused for r in results)


# ----------------------------------------------------------------------------- GPUs per cell

def test_gpus_are_a_matrix_axis_with_cell_ids_unchanged_for_one_gpu(tmp_path):
    m = small_matrix(frameworks=("torch",), gpus=(1, 2), seeds=(0, 1))
    ids = [c.id for c in m.cells()]
    assert ids == ["torch-bf16-seed0-rep0", "torch-te-fp8-delayed-seed0-rep0",
                   "torch-bf16-g2-seed0-rep0", "torch-te-fp8-delayed-g2-seed0-rep0",
                   "torch-bf16-seed1-rep0", "torch-te-fp8-delayed-seed1-rep0",
                   "torch-bf16-g2-seed1-rep0", "torch-te-fp8-delayed-g2-seed1-rep0"]
    two = m.cells()[2]
    assert two.label == "torch bf16 2 GPUs seed 0 rep 0"
    assert m.run_config(two, tmp_path).gpus == 2 and m.run_config(m.cells()[0], tmp_path).gpus == 1
    d = m.to_dict()
    assert d["gpus"] == [1, 2] and "gpus" not in d["run"] and d["run"]["sharding"] == "ddp"
    assert runner.Matrix.from_dict(d) == m


@pytest.mark.parametrize("gpus, message", [((), "--gpus is empty"), ((2, 2), "--gpus lists 2 twice"),
                                           ((0,), "--gpus counts must be at least 1")])
def test_bad_gpu_axis_is_one_line(gpus, message):
    with pytest.raises(ParallaxError, match=message):
        small_matrix(gpus=gpus).validate()


def test_the_loss_guard_twin_has_the_same_gpu_count(tmp_path):
    m = small_matrix(frameworks=("torch",), gpus=(1, 2))
    results = [runner.CellResult(c, "ok", tmp_path / c.id) for c in m.cells()]
    fp8_two = next(r.cell for r in results if r.cell.precision == "fp8" and r.cell.gpus == 2)
    assert runner.bf16_twin(fp8_two, results).cell.id == "torch-bf16-g2-seed0-rep0"


def test_a_matrix_file_from_before_the_gpu_axis_resumes(tmp_path, monkeypatch):
    run(tmp_path, small_matrix(), {}, monkeypatch)
    path = tmp_path / "matrix.json"
    old = json.loads(path.read_text())
    del old["gpus"]
    for key in ("sharding", "dist_timeout_s"):
        del old["run"][key]
    path.write_text(json.dumps(old))
    results = run(tmp_path, small_matrix(), {}, monkeypatch, resume=True)
    assert all(r.reused for r in results)
    index = json.loads((tmp_path / "index.json").read_text())
    assert {c["gpus"] for c in index["cells"]} == {1}
