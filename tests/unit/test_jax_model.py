"""The JAX engine on the CPU: model shape and numerics, converters, optimizer, timing loop, errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

import jax.numpy as jnp  # noqa: E402

from parallax.plan import capability as cap  # noqa: E402
from parallax.spec.config import OptimConfig, RunConfig, get_preset  # noqa: E402
from parallax.data.synthetic import SyntheticBatches, synthetic_batch  # noqa: E402
from parallax.engines import get_engine  # noqa: E402
from parallax.engines.base import NullProgress  # noqa: E402
from parallax.engines.jax import convert, timing  # noqa: E402
from parallax.engines.jax.model import Llama, RMSNorm, apply_rope, count_params, param_shapes, rope_tables  # noqa: E402
from parallax.engines.jax.runtime import make_optimizer  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402
from parallax.engines.schedule import lr_at  # noqa: E402
from parallax.engines.weights import init_weights  # noqa: E402
from parallax.plan.resolve import planned  # noqa: E402

TINY = get_preset("tiny")


def train_jax(run, batches, progress=None):
    engine = get_engine("jax")
    return engine.train(run, engine.check(planned(run)), batches, progress or NullProgress())


def tiny_run(**changes) -> RunConfig:
    base = RunConfig(framework="jax", model="tiny", batch_size=2, seq_len=16, steps=4, warmup=1, device="cpu")
    return base.replace(**changes)


# --- model shape ------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["llama-100m", "llama-100m-hd128"])
def test_llama_100m_has_exactly_the_spec_parameter_count(preset):
    # jax.eval_shape: shapes only, nothing allocated
    assert count_params(Llama(get_preset(preset))) == 100_313_856


def test_flax_tree_matches_the_canonical_shapes():
    shapes = param_shapes(Llama(TINY))
    flat = {}
    for name, shape in TINY.param_shapes().items():
        node = shapes
        for key in convert.flax_path(name):
            node = node[key]
        flat[name] = node
    assert flat == TINY.param_shapes()
    assert count_params(Llama(TINY)) == TINY.param_count() == 1_362_240


# --- converters -------------------------------------------------------------------------------

def test_converter_round_trip_is_bit_exact():
    weights = init_weights(TINY, seed=3)
    tree = convert.to_flax(weights, TINY)
    assert tree["layers_1"]["w_gate"]["kernel"] is not None
    back = convert.from_flax(tree)
    assert set(back) == set(weights)
    for name in weights:
        assert back[name].dtype == np.float32
        np.testing.assert_array_equal(back[name], weights[name])
    for name in weights:
        assert convert.canonical_name(convert.flax_path(name)) == name


def test_converter_rejects_wrong_shapes():
    weights = init_weights(TINY, seed=0)
    weights["lm_head"] = weights["lm_head"].T
    with pytest.raises(ValueError, match="lm_head"):
        convert.to_flax(weights, TINY)


def test_converted_weights_drive_the_flax_model():
    weights = init_weights(TINY, seed=0)
    model = Llama(TINY, dtype=jnp.float32)
    tokens = synthetic_batch(0, 0, 1, 8, TINY.vocab_size)[:, :-1]
    logits = model.apply({"params": convert.to_flax(weights, TINY)}, tokens)
    assert logits.shape == (1, 8, TINY.vocab_size) and logits.dtype == jnp.float32
    # lm_head is untied: zeroing it zeroes the logits, whatever the embeddings are
    weights["lm_head"] = np.zeros_like(weights["lm_head"])
    zero = model.apply({"params": convert.to_flax(weights, TINY)}, tokens)
    assert float(jnp.abs(zero).max()) == 0.0


# --- numerics ---------------------------------------------------------------------------------

def test_rmsnorm_matches_the_formula_and_casts_to_compute_dtype():
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    scale = np.linspace(0.5, 2.0, 8).astype(np.float32)
    out = RMSNorm(1e-5, jnp.bfloat16).apply({"params": {"scale": scale}}, x)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * scale
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=2 ** -7)


def test_rope_rotates_half_split_pairs_by_position_times_frequency():
    hd, seq, theta = 8, 5, 10_000.0
    cos, sin = rope_tables(seq, hd, theta)
    x = np.random.default_rng(1).standard_normal((1, seq, 1, hd)).astype(np.float32)
    out = np.asarray(apply_rope(jnp.asarray(x), cos, sin))
    # pair i is (x[i], x[i + hd/2]) rotated by pos · θ^(-2i/hd): a complex multiplication
    freq = theta ** (-2.0 * np.arange(hd // 2) / hd)
    z = (x[0, :, 0, : hd // 2] + 1j * x[0, :, 0, hd // 2:]) * np.exp(1j * np.arange(seq)[:, None] * freq)
    np.testing.assert_allclose(out[0, :, 0, : hd // 2], z.real, atol=1e-6)
    np.testing.assert_allclose(out[0, :, 0, hd // 2:], z.imag, atol=1e-6)
    np.testing.assert_array_equal(out[0, 0], x[0, 0])  # position 0 is not rotated


def test_embedding_gradient_accumulates_in_float32():
    from parallax.engines.jax.model import Embedding

    module = Embedding(10, 4, jnp.bfloat16)
    table = jnp.zeros((10, 4), jnp.float32)
    tokens = jnp.full((1, 4096), 3)
    out, vjp = jax.vjp(lambda t: module.apply({"params": {"embedding": t}}, tokens), table)
    assert out.dtype == jnp.bfloat16
    (grad,) = vjp(jnp.ones_like(out))
    # 4096 ones summed in bf16 would stop at 256 (256 + 1 rounds back to 256)
    np.testing.assert_array_equal(np.asarray(grad[3]), 4096.0)
    assert float(jnp.abs(grad).sum()) == 4 * 4096.0


def test_attention_is_causal():
    model = Llama(TINY, dtype=jnp.float32)
    params = convert.to_flax(init_weights(TINY, seed=0), TINY)
    tokens = synthetic_batch(0, 0, 1, 12, TINY.vocab_size)[:, :-1]
    changed = tokens.copy()
    changed[0, 8:] = (changed[0, 8:] + 1) % TINY.vocab_size
    a = np.asarray(model.apply({"params": params}, tokens))
    b = np.asarray(model.apply({"params": params}, changed))
    np.testing.assert_array_equal(a[:, :8], b[:, :8])
    assert np.abs(a[:, 8:] - b[:, 8:]).max() > 1e-3


# --- optimizer --------------------------------------------------------------------------------

def test_kth_update_uses_lr_at_k():
    """A 1-D parameter (no weight decay) with a constant gradient 1: Adam's update is 1, so the
    parameter moves by exactly -lr of that step."""
    optim = OptimConfig(lr=1e-2, lr_warmup_steps=3)
    total = 10
    tx = make_optimizer(optim, total)
    params = {"gain": jnp.zeros((1,), jnp.float32)}
    state = tx.init(params)
    for k in range(total):
        updates, state = tx.update({"gain": jnp.ones((1,), jnp.float32)}, state, params)
        assert float(updates["gain"][0]) == pytest.approx(-float(lr_at(k, optim, total)), rel=1e-6)


def test_weight_decay_applies_to_matrices_only():
    optim = OptimConfig(lr=1e-2, lr_warmup_steps=0, weight_decay=0.5)
    tx = make_optimizer(optim, 5)
    params = {"matrix": jnp.ones((2, 2)), "gain": jnp.ones((2,))}
    zero = {"matrix": jnp.zeros((2, 2)), "gain": jnp.zeros((2,))}
    updates, _ = tx.update(zero, tx.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["matrix"]), -1e-2 * 0.5, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(updates["gain"]), 0.0)


def test_loss_falls_on_a_repeated_batch():
    run = tiny_run(steps=20, optim=OptimConfig(lr=3e-3, lr_warmup_steps=0))
    trainer = get_engine("jax").reference_trainer(run, init_weights(TINY, 0), "float32", "cpu")
    batch = synthetic_batch(0, 0, 2, 16, TINY.vocab_size)
    losses = [trainer.step(batch) for _ in range(6)]
    assert losses[0] == pytest.approx(np.log(TINY.vocab_size), abs=0.1)  # uniform at init
    assert losses[-1] < losses[0] - 1.0
    assert all(b < a for a, b in zip(losses, losses[1:]))


def test_reference_trainer_grads_are_canonical_and_match_a_finite_difference():
    run = tiny_run()
    weights = init_weights(TINY, 0)
    trainer = get_engine("jax").reference_trainer(run, weights, "float32", "cpu")
    batch = synthetic_batch(0, 0, 2, 16, TINY.vocab_size)
    loss, grads = trainer.loss_and_grads(batch)
    assert set(grads) == set(weights) and grads["layers.0.wq"].shape == weights["layers.0.wq"].shape
    # directional derivative along the gradient of the final norm gain
    eps = 1e-2
    shifted = dict(weights, norm=weights["norm"] + eps * grads["norm"] / np.linalg.norm(grads["norm"]))
    moved = get_engine("jax").reference_trainer(run, shifted, "float32", "cpu").loss_and_grads(batch)[0]
    assert (moved - loss) / eps == pytest.approx(np.linalg.norm(grads["norm"]), rel=2e-2)


# --- timing loop ------------------------------------------------------------------------------

class _Metrics:
    """Stands for a device array: records when the host blocks on it."""

    def __init__(self, k, log):
        self.k, self.log = k, log

    def block_until_ready(self):
        self.log.append(("block", self.k))

    def __array__(self, dtype=None, copy=None):
        return np.array([self.k, 10.0 * self.k], dtype=np.float32)


def test_timed_steps_keeps_one_step_in_flight_and_drains_for_pauses():
    log, done, paused = [], [], []

    def step_fn(params, opt_state, batch):
        log.append(("dispatch", batch))
        return params + 1, opt_state, _Metrics(batch, log)

    state = timing.timed_steps(step_fn, (0, None), iter(range(5)), range(5),
                               lambda k, metrics, ms, wait: done.append((k, metrics.tolist(), ms, wait)),
                               pause_after=lambda k: k == 2, on_pause=lambda s: paused.append(s[0]))
    assert log == [("dispatch", 0), ("dispatch", 1), ("block", 0), ("dispatch", 2), ("block", 1),
                   ("block", 2), ("dispatch", 3), ("dispatch", 4), ("block", 3), ("block", 4)]
    assert [d[:2] for d in done] == [(k, [k, 10.0 * k]) for k in range(5)]
    assert all(d[2] >= 0 and d[3] >= 0 for d in done)  # step time and data wait
    assert paused == [3] and state == (5, None)


def test_device_batches_copy_before_the_source_reuses_its_buffer():
    buffer = np.zeros((2, 3), np.int32)

    def reusing_source():
        for k in range(3):
            buffer[:] = k  # the source overwrites the array it yielded before
            yield buffer

    out = [np.asarray(b) for b in timing.device_batches(reusing_source(), jax.devices("cpu")[0])]
    assert [int(b[0, 0]) for b in out] == [0, 1, 2]


# --- the engine -------------------------------------------------------------------------------

def test_train_records_every_step_and_the_timing_overhead():
    run = tiny_run(steps=5, warmup=1, eval_every=5, eval_batches=1)
    batches = SyntheticBatches(run.seed, run.batch_size, run.seq_len, TINY.vocab_size, run.eval_batches)
    out = train_jax(run, batches)
    assert [s.step for s in out.steps] == list(range(5))
    assert all(np.isfinite(s.loss) and s.step_ms > 0 for s in out.steps)
    assert [s.lr for s in out.steps] == [float(lr_at(k, run.optim, 5)) for k in range(5)]
    assert all(s.grad_norm > 0 for s in out.steps)
    assert out.steps[0].loss == pytest.approx(np.log(TINY.vocab_size), abs=0.1)
    assert [e.step for e in out.evals] == [4]
    assert len(out.evals[0].batch_losses) == 1 and out.evals[0].loss == out.evals[0].batch_losses[0]
    assert out.framework["attention_backend"] == "xla" and out.framework["name"] == "jax"
    assert out.precision.precision == "bf16"
    # compile_s is compilation plus the first step, as the torch engine reports it
    assert out.compile_s == pytest.approx(out.extra["aot_compile_s"] + out.steps[0].step_ms / 1e3)
    assert out.peak_allocated_bytes is None  # the CPU reports no memory statistics
    overhead = out.extra["timing_overhead"]
    assert overhead["steps_per_round"] == 5 and overhead["single_block_mean_ms"] > 0


def test_check_returns_the_bf16_label_of_the_device_that_will_run():
    plan = get_engine("jax").check(planned(tiny_run()))
    info = plan.precision
    # tiny_run trains on the CPU, where XLA computes bf16 dots in float32: emulated.
    assert (info.precision, info.backend, info.recipe, info.native) == ("bf16", "flax", "bf16", False)
    assert plan.recipe.name == "bf16" and plan.device == "cpu:0"
    assert info.details["device_platform"] == "cpu"
    assert info.details["param_dtype"] == "float32" and info.details["compute_dtype"] == "bfloat16"


@pytest.fixture
def planned_jax_recipe(monkeypatch):
    """A planned JAX recipe in the registry (every real one is implemented today)."""
    from parallax.spec import registry
    from parallax.spec.recipe import Backend, Recipe

    real = registry.recipes()
    planned = Recipe(framework="jax", name="planned-fp8", format="fp8", backend=Backend("flax", module="flax"),
                     hooks=None, summary="a recipe still to come", planned="a later issue")
    monkeypatch.setattr(registry, "recipes", lambda: real + (planned,))
    return planned


def test_a_planned_recipe_is_refused_with_one_line(planned_jax_recipe):
    with pytest.raises(ParallaxError) as err:
        get_engine("jax").check(planned(tiny_run(precision=None, recipe="planned-fp8")))
    assert str(err.value).startswith("jax recipe 'planned-fp8' is not implemented yet (planned: a later issue")


def test_no_compile_is_refused():
    with pytest.raises(ParallaxError, match="always compiles"):
        get_engine("jax").check(planned(tiny_run(compile=False)))


def test_missing_jax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` now raises ImportError
    monkeypatch.delitem(sys.modules, "parallax.engines.jax.engine", raising=False)
    engine = get_engine("jax")  # importing the engine module needs no JAX
    with pytest.raises(ParallaxError) as err:
        engine.check(planned(tiny_run()))
    assert str(err.value) == "jax is not installed; install it with: pip install 'slm-parallax[jax]'"


def test_gpu_device_without_a_gpu_is_refused_with_the_fix():
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("this machine has a GPU")
    with pytest.raises(ParallaxError, match="JAX sees no GPU; install the CUDA build"):
        get_engine("jax").check(planned(tiny_run(device="gpu")))


def test_unknown_device_is_refused():
    with pytest.raises(ParallaxError, match="unknown device 'tpu'"):
        get_engine("jax").check(planned(tiny_run(device="tpu")))


# --- through the shared driver and the CLI ----------------------------------------------------

def test_the_driver_writes_a_valid_jax_run(tmp_path):
    from parallax.store.results import load_run, load_steps
    from parallax.run.train import run_training

    run = tiny_run(steps=4, warmup=1, output_dir=str(tmp_path))
    run_training(run)
    result = load_run(tmp_path)
    assert result["status"] == "ok" and result["framework"]["name"] == "jax"
    assert result["timing"]["measured_steps"] == 3
    assert result["precision"]["backend"] == "flax" and result["recipe"]["name"] == "bf16"
    # XLA:CPU computes bf16 matmuls in float32: not native; labelled 'cpu', as torch's CPU bf16 is
    assert result["precision"]["native"] is False and result["precision"]["details"]["device_platform"] == "cpu"
    assert cap.run_label(result["precision"]) == "cpu"
    assert result["engine_extra"]["timing_overhead"]["steps_per_round"] == 4
    steps = load_steps(tmp_path)
    assert [s["measured"] for s in steps] == [False, True, True, True]
    assert all(s["grad_norm"] > 0 for s in steps)


def test_cli_refuses_a_planned_jax_recipe_in_one_line(planned_jax_recipe, tmp_path, capsys):
    from parallax.cli import main

    code = main(["train", "--framework", "jax", "--recipe", "planned-fp8", "--model", "tiny", "--seq-len", "32",
                 "--device", "cpu", "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("parallax: error: jax recipe 'planned-fp8' is not implemented yet (planned: ")
    assert err.count("\n") == 1
    assert not (tmp_path / "run" / "run.json").exists()


# --- on the GPU (scripts/device/bench_jax.sh runs these) ----------------------------------------

@pytest.mark.gpu
def test_gpu_bf16_attention_is_cudnn():
    from parallax.engines.jax.runtime import choose_attention, resolve_device

    attention, why = choose_attention(jnp.bfloat16, resolve_device("gpu"), (2, 128, 12, 64))
    assert attention == "cudnn", why


@pytest.mark.gpu
def test_gpu_train_reports_memory_cudnn_and_the_device():
    run = tiny_run(device="gpu", batch_size=4, seq_len=128, steps=6, warmup=2)
    batches = SyntheticBatches(run.seed, run.batch_size, run.seq_len, TINY.vocab_size)
    out = train_jax(run, batches)
    assert out.framework["attention_backend"] == "cudnn" and out.framework["platform"] == "gpu"
    assert out.framework["compute_capability"] and out.framework["preallocate"] == "false"
    assert out.precision.native is True  # bf16 tensor cores (compute capability 8.0+)
    assert out.peak_allocated_bytes > 0
    assert out.steps[0].loss == pytest.approx(np.log(TINY.vocab_size), abs=0.1)
