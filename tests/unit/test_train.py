"""The shared training driver: result files, statistics, failure paths, synthetic data."""

from __future__ import annotations

import math
import signal

import numpy as np
import pytest

from parallax.plan import capability as cap
from parallax.store import results
from parallax.run import interrupt, train
from parallax.spec.config import RunConfig
from parallax.data.source import make_batch_source
from parallax.data.synthetic import synthetic_batch
from parallax.engines.base import Engine, EngineOutput, EvalRecord, Plan, StepRecord
from parallax.engines.schedule import lr_at
from parallax.errors import ParallaxError
from parallax.spec.precision import PrecisionInfo
from parallax.spec import registry

BF16 = PrecisionInfo("bf16", "fake", "fake recipe", True)
PLAN = Plan(recipe=registry.get("torch", "bf16"), precision=BF16, device="cpu")


def tiny_run(tmp_path, **changes) -> RunConfig:
    base = dict(model="tiny", batch_size=2, seq_len=16, steps=6, warmup=2, compile=False,
                device="cpu", output_dir=str(tmp_path / "run"))
    return RunConfig(**{**base, **changes})


class FakeEngine(Engine):
    """Known step times and losses, or a chosen exception, instead of training."""

    name = "fake"

    def __init__(self, step_ms=None, error: Exception | None = None, losses=None, grad_norm=0.5,
                 bad_layers=None):
        self.step_ms, self.error, self.losses, self.grad_norm = step_ms, error, losses, grad_norm
        self.bad_layers = bad_layers or {}  # step -> names

    def check(self, run):
        return PLAN

    def train(self, run, plan, batches, progress):
        assert plan is PLAN  # train consumes what check decided
        if self.error is not None:
            raise self.error
        losses = self.losses or [5.0 - 0.1 * k for k in range(len(self.step_ms))]
        steps = [StepRecord(k, loss, ms, 1e-4, self.grad_norm, self.bad_layers.get(k))
                 for k, (loss, ms) in enumerate(zip(losses, self.step_ms))]
        return EngineOutput(steps=steps, precision=BF16, framework={"name": "fake", "device": "cpu"},
                            timing_method="fake", compile_s=1.5, evals=[EvalRecord.of(len(steps) - 1, [3.5, 4.5])])

    def reference_trainer(self, run, weights, compute_dtype, device):
        raise NotImplementedError


@pytest.fixture
def use_engine(monkeypatch):
    def install(engine):
        monkeypatch.setattr(train, "get_engine", lambda name: engine)
    return install


# --- synthetic data ---

def test_synthetic_batches_are_reproducible_from_seed_and_step():
    run = RunConfig(model="tiny", batch_size=3, seq_len=16, seed=11)
    first = [b.copy() for b, _ in zip(make_batch_source(run), range(4))]
    again = [b.copy() for b, _ in zip(make_batch_source(run), range(4))]
    for k, (a, b) in enumerate(zip(first, again)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, synthetic_batch(11, k, 3, 16, 10_000))
        assert a.shape == (3, 17) and a.dtype == np.int32
        assert a.min() >= 0 and a.max() < 10_000
    assert not np.array_equal(first[0], first[1])  # distinct each step
    other_seed = next(iter(make_batch_source(run.replace(seed=12))))
    assert not np.array_equal(first[0], other_seed)


# --- results of a finished run ---

def test_result_statistics_use_only_the_measured_steps(tmp_path, use_engine):
    use_engine(FakeEngine(step_ms=[1000.0, 900.0, 10.0, 20.0, 30.0, 40.0]))
    run = tiny_run(tmp_path)
    result = train.run_training(run)
    assert result["status"] == "ok" and train.exit_code(result) == 0
    timing, tput = result["timing"], result["throughput"]
    assert timing["measured_steps"] == 4 and timing["warmup_ms_total"] == 1900.0
    assert timing["step_ms"]["median"] == 25.0 and timing["step_ms"]["mean"] == 25.0
    assert timing["compile_s"] == 1.5
    assert tput["tokens_per_step"] == 32
    assert tput["tokens_per_s"] == pytest.approx(32 / 0.025)
    assert tput["tokens_per_s_p10"] < tput["tokens_per_s"] < tput["tokens_per_s_p90"]
    spec = result["flops"]["accountings"]["spec"]
    assert spec["tflops"] == pytest.approx(32 / 0.025 * spec["flops_per_token"] / 1e12)
    assert spec["mfu_precision_peak"] is None  # a CPU run has no honest peak
    assert result["loss"]["first"] == 5.0 and result["loss"]["final"] == pytest.approx(4.5)
    assert result["eval"] == [{"step": 5, "loss": 4.0, "perplexity": pytest.approx(math.exp(4.0)), "batch_losses": [3.5, 4.5]}]


def test_all_zero_gradients_are_a_failed_run_with_its_measurements_kept(tmp_path, use_engine):
    use_engine(FakeEngine(step_ms=[50.0] * 6, grad_norm=0.0))
    result = train.run_training(tiny_run(tmp_path))
    assert result["status"] == "failed" and train.exit_code(result) == 1
    assert result["error"] == ("the gradient norm is exactly 0 at all 6 steps: nothing trained "
                               "(a precision recipe that drops gradients?)")
    assert result["throughput"]["tokens_per_s"] == pytest.approx(32 / 0.05)
    assert results.load_run(tmp_path / "run")["status"] == "failed"


def test_a_quantized_layer_with_zero_or_nan_gradient_fails_the_run_naming_step_and_layer(tmp_path, use_engine):
    bad = {2: ["layers.1.attention.wqkv.weight (zero)"], 4: ["layers.0.feed_forward.w_down.weight (nan)"]}
    use_engine(FakeEngine(step_ms=[50.0] * 6, bad_layers=bad))
    result = train.run_training(tiny_run(tmp_path))
    assert result["status"] == "failed" and train.exit_code(result) == 1
    assert result["error"] == ("numerics guard: quantized layer gradient all zero or not finite at step 2: "
                               "layers.1.attention.wqkv.weight (zero) (2 of 6 steps)")
    assert result["throughput"]["tokens_per_s"] == pytest.approx(32 / 0.05)
    rows = results.load_steps(tmp_path / "run")
    assert rows[2]["bad_layers"] == bad[2] and "bad_layers" not in rows[3]


def test_zero_quantized_gradients_in_the_first_two_steps_only_are_recorded_not_failed(tmp_path, use_engine):
    # fp8's first steps: scales not yet calibrated (seen with TE and Flax fp8 on the H200, steps 0
    # and 1 at llama-860m)
    use_engine(FakeEngine(step_ms=[50.0] * 6, bad_layers={0: ["layers.0.wq (zero)", "layers.1.wq (zero)"],
                                                          1: ["layers.0.wq (zero)"]}))
    result = train.run_training(tiny_run(tmp_path))
    assert result["status"] == "ok" and result["guards"]["tolerated_zero_gradients"] == [
        {"step": 0, "layers": 2}, {"step": 1, "layers": 1}]
    use_engine(FakeEngine(step_ms=[50.0] * 6, bad_layers={0: ["layers.0.wq (nan)"]}))
    result = train.run_training(tiny_run(tmp_path))
    assert result["status"] == "failed" and "at step 0: layers.0.wq (nan)" in result["error"]


def test_a_loss_that_turns_nan_is_a_failed_run(tmp_path, use_engine):
    use_engine(FakeEngine(step_ms=[50.0] * 6, losses=[5.0, 4.9, 4.8, float("nan"), float("nan"), float("nan")]))
    result = train.run_training(tiny_run(tmp_path))
    assert result["status"] == "failed"
    assert result["error"] == "the loss is not finite from step 3 on (3 of 6 steps)"


def test_peak_tflops_override_gives_mfu(tmp_path, use_engine):
    use_engine(FakeEngine(step_ms=[50.0] * 6))
    result = train.run_training(tiny_run(tmp_path, peak_tflops=100.0))
    spec = result["flops"]["accountings"]["spec"]
    assert spec["mfu_precision_peak"] == pytest.approx(spec["tflops"] / 100.0)
    assert spec["mfu_bf16_peak"] == spec["mfu_precision_peak"]


def test_result_is_written_read_back_and_validated(tmp_path, use_engine):
    use_engine(FakeEngine(step_ms=[100.0, 12.0, 11.0, 13.0, 12.5, 11.5]))
    run = tiny_run(tmp_path)
    train.run_training(run)
    loaded = results.load_run(run.output_dir)
    assert loaded["schema"] == results.SCHEMA and loaded["status"] == "ok"
    assert RunConfig.from_dict(loaded["config"]) == run.replace(recipe="bf16")  # the recipe is named
    assert loaded["recipe"]["name"] == "bf16" and loaded["recipe"]["format"] == "bf16"
    for key in results.REQUIRED_OK_KEYS + ("environment", "model", "per_step", "started_at", "finished_at"):
        assert key in loaded, key
    assert loaded["model"]["parameters"] == run.model_config.param_count()
    assert loaded["per_step"]["step_ms"] == [100.0, 12.0, 11.0, 13.0, 12.5, 11.5]
    steps = results.load_steps(run.output_dir)
    assert [s["step"] for s in steps] == list(range(6))
    assert [s["measured"] for s in steps] == [False, False, True, True, True, True]
    assert set(steps[0]) == {"step", "loss", "step_ms", "lr", "grad_norm", "measured"}


def test_a_real_tiny_torch_run_writes_a_valid_result(tmp_path):
    torch = pytest.importorskip("torch")
    run = tiny_run(tmp_path, steps=4, warmup=1)
    result = train.run_training(run)
    loaded = results.load_run(run.output_dir)
    assert loaded["status"] == "ok" == result["status"]
    assert loaded["framework"]["name"] == "torch" and loaded["framework"]["attention_backend"]
    assert loaded["precision"]["recipe"] == "bf16" and loaded["precision"]["backend"] == "torch.autocast"
    assert loaded["precision"]["details"]["summary"].startswith("torch.autocast(bfloat16) over fp32 master weights")
    assert loaded["engine_extra"]["quantized_parameters"] == []
    # a CPU run is never native, in any engine (plan.capability.runs_natively); it reads 'cpu'
    assert loaded["precision"]["native"] is False and loaded["precision"]["details"]["device_type"] == "cpu"
    assert cap.run_label(loaded["precision"]) == "cpu"
    assert "gpus" in loaded["environment"]
    assert len(results.load_steps(run.output_dir)) == 4
    assert loaded["timing"]["method"].startswith("perf_counter")


# --- runs that fail after starting ---

def test_out_of_memory_is_recorded_with_status_oom_and_exit_code_3(tmp_path, use_engine):
    class OutOfMemoryError(RuntimeError):
        pass

    use_engine(FakeEngine(error=OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")))
    run = tiny_run(tmp_path)
    result = train.run_training(run)
    assert result["status"] == "oom" and train.exit_code(result) == 3
    loaded = results.load_run(run.output_dir)
    assert loaded["error"].startswith("out of memory: OutOfMemoryError: CUDA out of memory")
    assert results.load_steps(run.output_dir) == []


def test_an_exception_during_training_is_recorded_as_failed_with_the_traceback(tmp_path, use_engine, capsys):
    use_engine(FakeEngine(error=ValueError("bad shapes\nsecond line")))
    run = tiny_run(tmp_path)
    result = train.run_training(run)
    assert result["status"] == "failed" and train.exit_code(result) == 1
    loaded = results.load_run(run.output_dir)
    assert loaded["error"] == "ValueError: bad shapes"
    assert "Traceback" in loaded["traceback"] and "bad shapes" in loaded["traceback"]
    assert "ValueError: bad shapes" in capsys.readouterr().err


def test_a_stale_steps_file_is_replaced_when_a_rerun_fails(tmp_path, use_engine):
    run = tiny_run(tmp_path)
    use_engine(FakeEngine(step_ms=[10.0] * 6))
    train.run_training(run)
    use_engine(FakeEngine(error=RuntimeError("boom")))
    train.run_training(run)
    assert results.load_steps(run.output_dir) == []



class StoppedEngine(FakeEngine):
    """Reports ``step_ms`` step by step, then is stopped as a signal would stop it."""

    def __init__(self, step_ms, stop: BaseException):
        super().__init__(step_ms=step_ms)
        self.stop = stop

    def train(self, run, plan, batches, progress):
        for k, ms in enumerate(self.step_ms):
            progress.step(k, 5.0 - 0.5 * k, ms)
        raise self.stop


def test_a_signal_keeps_the_steps_done_and_their_statistics(tmp_path, use_engine):
    use_engine(StoppedEngine([900.0, 800.0, 10.0, 30.0], interrupt.Interrupted(signal.SIGTERM)))
    run = tiny_run(tmp_path)
    result = train.run_training(run)
    assert (result["status"], result["signal"], result["steps_done"]) == ("interrupted", "SIGTERM", 4)
    assert result["error"] == "interrupted by SIGTERM after 4 of 6 steps"
    assert train.exit_code(result) == 143
    assert result["timing"]["measured_steps"] == 2 and result["timing"]["step_ms"]["median"] == 20.0
    assert result["throughput"]["tokens_per_s"] == pytest.approx(32 / 0.020)
    assert result["loss"] == {"first": 5.0, "final": 3.5, "final_smoothed": pytest.approx(4.25)}
    assert results.load_run(run.output_dir)["steps_done"] == 4
    steps = results.load_steps(run.output_dir)
    assert [(s["step"], s["step_ms"], s["measured"], s["grad_norm"]) for s in steps] == [
        (0, 900.0, False, None), (1, 800.0, False, None), (2, 10.0, True, None), (3, 30.0, True, None)]
    assert steps[1]["lr"] == pytest.approx(float(lr_at(1, run.optim, run.steps)))


def test_ctrl_c_before_a_timed_step_keeps_the_warmup_steps(tmp_path, use_engine):
    use_engine(StoppedEngine([900.0], KeyboardInterrupt()))  # Python's own Ctrl-C: SIGINT
    run = tiny_run(tmp_path)
    result = train.run_training(run)
    assert (result["status"], result["signal"], result["steps_done"]) == ("interrupted", "SIGINT", 1)
    assert train.exit_code(result) == 130
    assert result["timing"]["step_ms"] is None and result["throughput"] is None
    assert len(results.load_steps(run.output_dir)) == 1


def test_a_run_refused_by_its_check_keeps_the_run_before_it(tmp_path, use_engine):
    run = tiny_run(tmp_path)
    use_engine(FakeEngine(step_ms=[10.0] * 6))
    train.run_training(run)
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}

    class Refusing(FakeEngine):
        def check(self, run):
            raise ParallaxError("no such precision here")

    use_engine(Refusing())
    with pytest.raises(ParallaxError):
        train.run_training(run)
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before


# --- refusals before any work ---

def test_a_bad_run_raises_before_anything_is_written(tmp_path, use_engine):
    use_engine(FakeEngine(step_ms=[10.0] * 6))
    run = tiny_run(tmp_path, steps=2, warmup=2)
    with pytest.raises(ParallaxError, match="--steps"):
        train.run_training(run)
    assert not (tmp_path / "run").exists()


def test_an_output_dir_below_a_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ParallaxError, match="is not writable"):
        results.writable_output_dir(str(blocker / "run"))


def test_the_engine_check_runs_before_the_batch_source_opens(tmp_path, use_engine, monkeypatch):
    class Refusing(FakeEngine):
        def check(self, run):
            raise ParallaxError("no such precision here")

    opened = []
    monkeypatch.setattr(train, "make_batch_source", lambda run: opened.append(run))
    use_engine(Refusing())
    with pytest.raises(ParallaxError, match="no such precision"):
        train.run_training(tiny_run(tmp_path))
    assert opened == [] and not (tmp_path / "run" / "run.json").exists()


# --- which GPU's peaks apply ---

def test_run_gpu_matches_the_probe_entry_by_uuid_then_name():
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaa"}, {"name": "NVIDIA H200", "uuid": "GPU-bbbb"}]
    assert train.run_gpu({"device": "cuda:0", "device_uuid": "BBBB"}, gpus) is gpus[1]
    assert train.run_gpu({"device": "cuda:0", "device_name": "NVIDIA H200"}, gpus) is gpus[1]
    assert train.run_gpu({"device": "cpu"}, gpus) is None
    assert train.run_gpu({"device": "cuda:0"}, gpus[:1]) is gpus[0]
    assert train.run_gpu({"device": "NVIDIA H200", "platform": "gpu"}, []) is None
    # no native probe: the engine's own report of the device still finds its peaks
    engine_view = {"device": "cuda:0", "device_name": "NVIDIA H200", "compute_capability": "9.0"}
    assert train.run_gpu(engine_view, []) == {"name": "NVIDIA H200", "compute_capability": "9.0"}


def test_the_h200_resolves_to_its_dense_bf16_peak():
    from parallax.plan import hardware

    device = train.run_gpu({"device": "cuda:0", "device_name": "NVIDIA H200", "compute_capability": "9.0"}, [])
    denominators, _ = hardware.denominators(device, "bf16")
    assert denominators.precision_peak == denominators.bf16_peak == 989


def test_out_of_memory_detection_covers_torch_and_xla_messages():
    assert results.is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate"))
    assert results.is_out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"))
    assert not results.is_out_of_memory(RuntimeError("shape mismatch"))

