"""``--log tensorboard`` and ``--log wandb``: a CPU tiny run's event files and offline W&B run,
read back with TensorBoard's reader and as wandb's records, hold every step of steps.jsonl."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from fixtures.cli import one_error_line
from fixtures.watch_readers import (tensorboard_events, tensorboard_hparams, tensorboard_scalars, wandb_history,
                                    wandb_run)

from parallax.cli import main
from parallax.run import live_log

TINY = ["--model", "tiny", "--batch-size", "2", "--seq-len", "16", "--steps", "4", "--warmup", "1",
        "--eval-every", "2", "--eval-batches", "1", "--device", "cpu"]
TOKENS = 2 * 16
ROW_TAGS = {"loss": "train/loss", "step_ms": "train/step_ms", "lr": "train/lr", "grad_norm": "train/grad_norm"}


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """W&B offline, its own files in the test's folder; PARALLAX_LOG restored after the test."""
    monkeypatch.setenv(live_log.ENV_VAR, "")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_PROJECT", "parallax-test")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))


def steps_and_run(out):
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    return steps, json.loads((out / "run.json").read_text())


def check_tensorboard(out, steps, run):
    """Every step's scalars equal steps.jsonl's (TensorBoard keeps float32), tokens/s and TFLOP/s
    follow from its step time, the evaluations equal run.json's."""
    scalars = tensorboard_scalars(out / "tensorboard")
    for row in steps:
        for key, tag in ROW_TAGS.items():
            assert scalars[tag][row["step"]] == np.float32(row[key]), (tag, row)
        assert scalars["perf/tokens_per_s"][row["step"]] == np.float32(TOKENS * 1e3 / row["step_ms"])
    assert sorted(scalars["train/loss"]) == [r["step"] for r in steps]
    per_token = run["flops"]["accountings"]["spec"]["flops_per_token"]
    for row in steps:
        expected = TOKENS * 1e3 / row["step_ms"] * per_token / 1e12
        assert scalars["perf/tflops_per_gpu"][row["step"]] == np.float32(expected)
    assert {e["step"]: np.float32(e["loss"]) for e in run["eval"]} == scalars.get("eval/loss", {})
    assert {e["step"]: np.float32(e["perplexity"]) for e in run["eval"]} == scalars.get("eval/perplexity", {})
    assert scalars["summary/tokens_per_s"][0] == np.float32(run["throughput"]["tokens_per_s"])
    assert "perf/mfu" not in scalars  # the CPU has no peak: MFU n/a, as in run.json


def test_a_torch_run_logs_every_step_to_tensorboard_and_wandb(tmp_path, offline):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    assert main(["train", *TINY, "--no-compile", "--output-dir", str(out), "--log", "tensorboard,wandb"]) == 0
    steps, run = steps_and_run(out)
    check_tensorboard(out, steps, run)
    hparams = tensorboard_hparams(out / "tensorboard")
    assert (hparams["config.model"], hparams["config.batch_size"], hparams["recipe.name"], hparams["machine.gpu"]) \
        == ("tiny", 2, run["recipe"]["name"], "cpu")
    history = wandb_history(out)
    assert sorted(history) == [r["step"] for r in steps]
    for row in steps:  # W&B keeps the JSON numbers: exactly steps.jsonl's
        logged = history[row["step"]]
        assert {key: logged[tag] for key, tag in ROW_TAGS.items()} == {key: row[key] for key in ROW_TAGS}
        assert logged["perf/tokens_per_s"] == TOKENS * 1e3 / row["step_ms"]
    for e in run["eval"]:
        assert (history[e["step"]]["eval/loss"], history[e["step"]]["eval/perplexity"]) == (e["loss"], e["perplexity"])
    record = wandb_run(out)
    assert (record.display_name, record.project, record.run_group) == ("run", "parallax-test", "")
    config = {u.key: json.loads(u.value_json) for u in record.config.update}
    assert config["config"]["model"] == "tiny" and config["recipe"]["name"] == run["recipe"]["name"]
    assert config["machine"]["gpu"] == "cpu"


def test_a_jax_run_logs_through_the_same_writer(tmp_path, offline):
    pytest.importorskip("jax")
    out = tmp_path / "run"
    # no evaluation: its step would be a second XLA compilation, and torch's run checks evaluations
    options = [*TINY, "--framework", "jax", "--steps", "3", "--eval-every", "0"]
    assert main(["train", *options, "--output-dir", str(out), "--log", "tensorboard"]) == 0
    steps, run = steps_and_run(out)
    check_tensorboard(out, steps, run)
    assert not (out / "wandb").exists()


def test_a_benchmark_cell_is_its_own_run_named_by_the_cell(tmp_path, offline):
    pytest.importorskip("torch")
    out = tmp_path / "bench"
    assert main(["benchmark", "--frameworks", "torch", "--precisions", "bf16", "--model", "tiny", "--batch-size", "2",
                 "--seq-len", "16", "--steps", "3", "--warmup", "1", "--eval-every", "0", "--device", "cpu",
                 "--no-compile", "--output-dir", str(out), "--log", "wandb,tensorboard"]) == 0
    (cell,) = (out / "runs").iterdir()
    record = wandb_run(cell)
    assert (record.display_name, record.run_group) == (cell.name, "bench")
    steps, _ = steps_and_run(cell)
    assert tensorboard_scalars(cell / "tensorboard")["train/step_ms"] == \
        {r["step"]: np.float32(r["step_ms"]) for r in steps}
    assert {k: v["train/loss"] for k, v in wandb_history(cell).items()} == {r["step"]: r["loss"] for r in steps}


def test_two_ranks_end_with_the_slowest_ranks_step_times(tmp_path, offline):
    """Rank 0 logs its own step times live; the result's are the slowest rank's: each tag the
    result corrected is written again, so that either reading of the event file (every value
    kept, or a step written again as a restart) ends as steps.jsonl."""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    options = [*TINY, "--no-compile", "--gpus", "2", "--eval-every", "0"]
    proc = subprocess.run([sys.executable, "-m", "parallax", "train", *options, "--output-dir", str(out),
                           "--log", "tensorboard"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps, run = steps_and_run(out)
    assert all(len(r["rank_step_ms"]) == 2 and r["step_ms"] == max(r["rank_step_ms"]) for r in steps)
    corrected = [r["step"] for r in steps if r["rank_step_ms"][0] != r["step_ms"]]  # rank 1 was slower
    written = [step for step, _ in tensorboard_events(out / "tensorboard")["train/step_ms"]]
    # live, every step; then from the first corrected step to the last, again
    assert written == [r["step"] for r in steps] + [r["step"] for r in steps if corrected and r["step"] >= corrected[0]]
    for restarts in (False, True):
        scalars = tensorboard_scalars(out / "tensorboard", restarts)
        for key, tag in ROW_TAGS.items():
            assert scalars[tag] == {r["step"]: np.float32(r[key]) for r in steps}, (tag, restarts)
        assert scalars["perf/tokens_per_s"] == {r["step"]: np.float32(2 * TOKENS * 1e3 / r["step_ms"]) for r in steps}


@pytest.mark.gpu
def test_a_gpu_run_logs_mfu_and_peak_memory_as_run_json_has_them(tmp_path, offline):
    """On a GPU with a known peak: each step's MFU is its TFLOP/s over run.json's peak, and the
    peak memory is run.json's."""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    options = ["--model", "tiny", "--steps", "6", "--warmup", "2", "--eval-every", "0", "--device", "cuda"]
    assert main(["train", *options, "--output-dir", str(out), "--log", "tensorboard"]) == 0
    steps, run = steps_and_run(out)
    scalars = tensorboard_scalars(out / "tensorboard")
    peak = run["flops"]["denominators_tflops"]["precision_peak"]
    assert peak, "this GPU has no datasheet peak for the run's precision"
    tflops = scalars["perf/tflops_per_gpu"]
    assert sorted(scalars["perf/mfu"]) == sorted(tflops) == [r["step"] for r in steps]
    for step, value in tflops.items():
        assert scalars["perf/mfu"][step] == pytest.approx(value / peak, rel=1e-6)
    for key in ("peak_allocated", "peak_reserved"):
        assert scalars[f"memory/{key}_gib"] == {steps[-1]["step"]: np.float32(run["memory"][f"{key}_bytes"] / 2**30)}
    spec = run["flops"]["accountings"]["spec"]
    assert scalars["summary/mfu"][0] == np.float32(spec["mfu_precision_peak"])


# ----------------------------------------------------------------------------- the writer, by hand

class Recorder:
    def __init__(self):
        self.calls, self.summaries, self.closed = [], [], False

    def scalars(self, step, values):
        self.calls.append((step, dict(values)))

    def summary(self, summary):
        self.summaries.append(summary)

    def close(self):
        self.closed = True


def test_the_end_writes_what_the_live_view_lacked_or_had_otherwise():
    """A value the result corrected (several ranks' slowest step, MaxText's metrics file) is
    written again, with every later step of its tag (TensorBoard takes an earlier step as a
    restart); the gradient norm, known only with the result, once; nothing else twice."""
    sink = Recorder()
    log = live_log.LiveLog([sink], live_log.Rates(tokens_per_step=1000, gpus=2, flops_per_token=6_000_000,
                                                  peak_tflops=0.01))
    for step, ms in enumerate((10.0, 20.0, 30.0)):
        log.step(step, 3.0 - step, ms, 1e-3)
    rows = [{"step": k, "loss": 3.0 - k, "step_ms": ms, "lr": 1e-3, "grad_norm": 0.5 / (k + 1), "measured": k > 0}
            for k, ms in enumerate((10.0, 25.0, 30.0))]  # step 1 corrected: 20 -> 25 ms
    log.finish(rows, {"status": "ok", "eval": [{"step": 2, "loss": 2.0, "perplexity": math.exp(2.0)}],
                      "memory": {"peak_allocated_bytes": 2**30, "peak_reserved_bytes": None},
                      "throughput": {"tokens_per_s": 40_000.0}})

    def rates(ms):
        tflops = 1000 * 1e3 / ms / 2 * 6_000_000 / 1e12
        return {"perf/tokens_per_s": 1000 * 1e3 / ms, "perf/tflops_per_gpu": tflops, "perf/mfu": tflops / 0.01}

    assert sink.calls[:3] == [(k, pytest.approx({"train/loss": 3.0 - k, "train/step_ms": ms, "train/lr": 1e-3,
                                                 **rates(ms)}, rel=1e-12))
                              for k, ms in enumerate((10.0, 20.0, 30.0))]
    assert sink.calls[3:] == [
        (0, {"train/grad_norm": 0.5}),
        (1, pytest.approx({"train/step_ms": 25.0, "train/grad_norm": 0.25, **rates(25.0)}, rel=1e-12)),
        (2, pytest.approx({"train/step_ms": 30.0, "train/grad_norm": 0.5 / 3, **rates(30.0)}, rel=1e-12)),
        (2, {"eval/loss": 2.0, "eval/perplexity": math.exp(2.0)}),
        (2, {"memory/peak_allocated_gib": 1.0}),
    ]
    assert sink.summaries == [{"status": "ok", "tokens_per_s": 40_000.0}] and sink.closed


def test_a_missing_library_names_its_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(live_log.ENV_VAR, "")
    monkeypatch.setattr(live_log, "installed", lambda module: module != "wandb")
    out = tmp_path / "run"
    assert main(["train", *TINY, "--output-dir", str(out), "--log", "tensorboard,wandb"]) == 2
    assert one_error_line(capsys) == "parallax: error: --log wandb needs wandb: pip install 'slm-parallax[wandb]'"
    assert not out.exists()


def test_an_unknown_sink_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(live_log.ENV_VAR, "")
    assert main(["train", *TINY, "--output-dir", str(tmp_path / "run"), "--log", "mlflow"]) == 2
    assert "--log mlflow: unknown; choose tensorboard, wandb or tensorboard,wandb" in one_error_line(capsys)


def test_wandb_that_cannot_start_is_one_line_and_no_result(tmp_path, offline, monkeypatch, capsys):
    pytest.importorskip("torch")

    def refuse(*args, **kwargs):
        raise RuntimeError("wandb-core exited\nmore lines")

    monkeypatch.setattr(live_log, "WandB", refuse)
    out = tmp_path / "run"
    assert main(["train", *TINY, "--no-compile", "--output-dir", str(out), "--log", "wandb"]) == 2
    assert one_error_line(capsys) == (f"parallax: error: --log wandb: W&B did not start its run (wandb-core exited); "
                                      f"see {out / 'wandb'}/debug.log, or drop wandb from --log")
    assert not (out / "run.json").exists()


def test_a_tensorboard_writer_that_stops_on_a_full_disk_never_blocks_the_run(tmp_path, capsys):
    """tensorboardX writes from a thread that a failed write (ENOSPC) ends; an event sent after that
    would block on the thread's full queue forever. The sink stops at the first sign, says so once,
    and closes without waiting, so that the run's own files still decide how the command ends."""
    import errno

    sink = live_log.TensorBoard(tmp_path, {"model": "tiny"})
    events = sink.writer.file_writer.event_writer

    def full(event):
        raise OSError(errno.ENOSPC, "No space left on device")

    events._ev_writer.write_event = full
    sink.scalars(1, {"train/loss": 9.0})  # the thread meets the full disk and ends
    events._worker.join(timeout=10)
    assert not events._worker.is_alive()
    def rest():
        for step in range(2, 40):  # more than the queue holds (10): each would have blocked
            sink.scalars(step, {"train/loss": 9.0})
        sink.summary({"tokens_per_s": 1.0})
        sink.close()

    import threading

    done = threading.Thread(target=rest, daemon=True)  # a regression hangs this thread, not the suite
    done.start()
    done.join(timeout=30)
    assert not done.is_alive(), "the TensorBoard sink blocked after its writer thread ended"
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("parallax: warning:")]
    assert warned == [f"parallax: warning: TensorBoard's event writer stopped writing to {tmp_path / 'tensorboard'} "
                      "(a full disk?); the TensorBoard view of this run ends there, run.json and steps.jsonl do not"]
