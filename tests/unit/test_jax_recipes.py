"""The JAX engine's Flax fp8 recipes on the CPU: the ops in the block linears, the state the
delayed-scaling ops carry and overwrite through their gradient, the gradient norm that
excludes it, the numerics guard, and every low-precision JAX recipe's loss on real tokens within
the band of bf16's from the same weights (tests/fixtures/loss_band.py)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")
optax = pytest.importorskip("optax")

import jax.numpy as jnp  # noqa: E402

from fixtures import loss_band  # noqa: E402
from parallax.spec.config import OptimConfig, RunConfig, get_preset  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines import get_engine  # noqa: E402
from parallax.engines.base import NullProgress, bad_gradients  # noqa: E402
from parallax.engines.jax import convert, runtime  # noqa: E402
from parallax.engines.jax.model import BLOCK_LINEARS, Llama, loss_fn  # noqa: E402
from parallax.engines.jax.training import OVERHEAD_STEPS  # noqa: E402
from parallax.spec import registry  # noqa: E402
from parallax.engines.jax.recipes.flax_fp8 import FlaxFp8Hooks  # noqa: E402
from parallax.run.train import training_problem  # noqa: E402
from parallax.engines.weights import init_weights  # noqa: E402
from parallax.plan.resolve import planned  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:The Fp8DotGeneralOp is deprecated:DeprecationWarning")

TINY = get_preset("tiny")
FP8 = ("flax-fp8-delayed", "flax-fp8-direct")
OPS = {"flax-fp8-delayed": nn.Fp8DotGeneralOp, "flax-fp8-direct": nn.Fp8DirectDotGeneralOp}
COLLECTION = nn.fp8_ops.OVERWRITE_WITH_GRADIENT
STEPS = loss_band.STEPS
BATCH = synthetic_batch(0, 0, 2, 16, TINY.vocab_size)
# Every low-precision JAX recipe against bf16 from the same weights on the same STEPS distinct
# batches of 2 x 16 real tokens (the shape of BATCH, so the engine runs share _step_setup's
# compiled steps): the band, the fall and their measurements are tests/fixtures/loss_band.py's.
LOW_PRECISION = (*FP8, "emulated-nvfp4")
LOSS_FALL = loss_band.LOSS_FALL[(2, 16)]


def fp8_run(recipe: str | None, **changes) -> RunConfig:
    base = RunConfig(framework="jax", recipe=recipe, precision=None if recipe else "bf16", model="tiny",
                     batch_size=2, seq_len=16, steps=STEPS, warmup=1, device="cpu",
                     optim=OptimConfig(lr=3e-3, lr_warmup_steps=0))
    return base.replace(**changes)


def train(recipe: str | None, **changes):
    """(plan, EngineOutput) of ``recipe`` on distinct real batches, one a step."""
    from fixtures.real_tokens import TokenBatches, token_batches

    run = fp8_run(recipe, **changes)
    engine = get_engine("jax")
    plan = engine.check(planned(run))
    batches = TokenBatches(token_batches(run.batch_size, run.seq_len, run.steps))
    return plan, engine.train(run, plan, batches, NullProgress())


def have(recipe: str | None) -> bool:
    from parallax import quant

    return recipe != "emulated-nvfp4" or quant.available_bindings()["jax_ffi"]


@pytest.fixture(scope="module")
def trained():
    """{recipe: (plan, EngineOutput)} for bf16 and every low-precision recipe, from the same
    weights on the same real batches."""
    return {name: train(name) for name in ("bf16", *LOW_PRECISION) if have(name)}


def losses_of(out) -> np.ndarray:
    return np.array([s.loss for s in out.steps])


# --- the hooks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FP8)
def test_hooks_name_the_flax_op_its_collection_and_its_formats(name):
    hooks = registry.get("jax", name).load_hooks()
    assert isinstance(hooks, FlaxFp8Hooks)
    assert hooks.dot_general_cls() is OPS[name]
    # Flax 0.12's direct op keeps the same delayed-scaling state as the other one.
    assert hooks.extra_collections() == (COLLECTION,) == ("_overwrite_with_gradient",)
    details = hooks.details()
    assert (details["fwd_dtype"], details["bwd_dtype"]) == ("float8_e4m3fn", "float8_e5m2")
    assert details["amax_history_length"] == OPS[name].amax_history_length == 1024
    assert details["not_quantized"] == "embedding and lm_head in bf16"
    assert details["dot_general"].endswith(OPS[name].__name__)


def test_bf16_hooks_quantize_nothing():
    hooks = registry.get("jax", "bf16").load_hooks()
    assert hooks.dot_general_cls() is None and hooks.extra_collections() == ()
    assert runtime.quantized_kernels(TINY, None) == []


def test_the_fp8_op_changes_no_parameter_of_the_tree():
    tokens = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    plain = jax.eval_shape(Llama(TINY).init, jax.random.key(0), tokens)
    fp8 = jax.eval_shape(Llama(TINY, dot_general_cls=nn.Fp8DotGeneralOp).init, jax.random.key(0), tokens)
    assert set(plain) == {"params"} and set(fp8) == {"params", COLLECTION}
    assert jax.tree.map(lambda a: a.shape, plain["params"]) == jax.tree.map(lambda a: a.shape, fp8["params"])
    # the seven block linears of every layer carry fp8 state; embedding and lm_head none
    layers = {k for k in fp8[COLLECTION]}
    assert layers == {f"layers_{i}" for i in range(TINY.n_layers)}
    assert all(set(fp8[COLLECTION][layer]) == set(BLOCK_LINEARS) for layer in layers)


# --- the step: extra state overwritten by its gradient, norms over params only -----------------

@functools.cache
def _step_setup(op):
    """The model, state, optimizer and step of ``op``, built once: the engine's own jitted step
    (runtime.jit_train_step, as the engine builds it for one device) of the engine's model at the
    engine runs' settings below (fp8_run), so its step compiles once (~15 s on 2 cores) for the
    tests that read it and for the engine run of the same recipe (the session's JAX compilation
    cache, tests/conftest.py). The step donates params, extra and optimizer state: the tests
    hand it copies (``_inputs``)."""
    model = Llama(TINY, dtype=jnp.bfloat16, dot_general_cls=op)
    device = jax.devices("cpu")[0]
    params = jax.device_put(convert.to_flax(init_weights(TINY, 0), TINY), device)
    extra = runtime.init_extra(model, (COLLECTION,), BATCH[:, :-1].shape, device)
    tx = runtime.make_optimizer(OptimConfig(lr=3e-3, lr_warmup_steps=0), STEPS)
    watched = runtime.quantized_kernels(TINY, op)
    step = runtime.jit_train_step(model, tx, watched)
    return model, params, extra, tx, step


def _inputs(params, extra, tx):
    """(params, extra, opt_state, batch) for a first step: copies for the step to donate (the
    cached originals stay readable), every array on the device as the engine places them (an
    uncommitted one would lower to another program than the engine's)."""
    device = jax.devices("cpu")[0]
    own = jax.tree.map(jnp.copy, (params, extra))
    return (*own, jax.device_put(tx.init(params), device), jax.device_put(jnp.asarray(BATCH), device))


def _fp8_leaves(extra, layer="layers_0", linear="wq"):
    (op_vars,) = extra[COLLECTION][layer][linear].values()
    return {k: np.asarray(v) for k, v in op_vars.items()}


@pytest.mark.parametrize("name", FP8)
def test_the_step_overwrites_amax_history_and_scales_with_their_gradient(name):
    _, params, extra, tx, step = _step_setup(OPS[name])
    before = _fp8_leaves(extra)
    assert all((v == 1.0).all() for k, v in before.items() if k.endswith("scale"))
    assert all((v == 0.0).all() for k, v in before.items() if k.endswith("history"))
    *first, batch = _inputs(params, extra, tx)
    params1, extra1, opt1, _ = step(*first, batch)
    after1 = _fp8_leaves(extra1)
    for key in ("input_amax_history", "kernel_amax_history", "output_grad_amax_history"):
        assert after1[key][0] > 0 and (after1[key][1:] == 0).all(), key  # this step's amax, first
    _, extra2, _, _ = step(params1, extra1, opt1, batch)
    after2 = _fp8_leaves(extra2)
    for key in ("input_scale", "kernel_scale", "output_grad_scale"):
        # a scale is computed from the history before the step: it moves from step 2 on
        assert after2[key][0] != 1.0 and np.isfinite(after2[key]).all(), key
    # rolled (Flax rolls by -1: the last entry holds the previous amax), not summed
    assert after2["kernel_amax_history"][-1] == after1["kernel_amax_history"][0]


def test_the_grad_norm_and_clipping_exclude_the_fp8_meta():
    model, params, extra, tx, step = _step_setup(nn.Fp8DotGeneralOp)  # the delayed op's step test compiled it
    *first, batch = _inputs(params, extra, tx)
    _, _, _, metrics = step(*first, batch)
    grads_p, grads_e = jax.jit(jax.grad(lambda p, e: loss_fn(model, p, batch, e), argnums=(0, 1)))(params, extra)
    assert float(metrics[1]) == pytest.approx(float(optax.tree.norm(grads_p)), rel=1e-5)
    # the meta 'gradients' are amaxes and scales: counted in, they would dominate the norm
    assert float(optax.tree.norm((grads_p, grads_e))) > 2 * float(metrics[1])
    assert metrics.shape == (2 + 7 * TINY.n_layers,)
    wq0 = float(optax.tree.norm(grads_p["layers_0"]["wq"]["kernel"]))
    assert float(metrics[2]) == pytest.approx(wq0, rel=1e-5)


# --- through the engine -------------------------------------------------------------------------

@pytest.mark.parametrize("name", FP8)
def test_fp8_recipes_train_through_the_engine(trained, name):
    plan, out = trained[name]
    losses = losses_of(out)
    assert plan.precision.recipe == name and plan.precision.precision == "fp8"
    assert plan.precision.native is False  # the CPU has no fp8 tensor cores
    assert np.all(np.isfinite(losses)) and losses[-5:].mean() < losses[0] - LOSS_FALL
    assert out.extra["extra_collections"] == [COLLECTION]
    names = out.extra["quantized_parameters"]
    assert len(names) == 7 * TINY.n_layers and names[:7] == [f"layers.0.{n}" for n in BLOCK_LINEARS]
    assert all(s.bad_layers is None for s in out.steps) and training_problem(out) is None
    assert all(np.isfinite(s.grad_norm) and s.grad_norm > 0 for s in out.steps)
    assert [e.step for e in out.evals] == []
    assert out.extra["timing_overhead"]["steps_per_round"] == min(STEPS, OVERHEAD_STEPS)


def test_bf16_learns_the_real_text(trained):
    losses = losses_of(trained["bf16"][1])
    assert losses[0] == pytest.approx(np.log(TINY.vocab_size), abs=0.1)
    assert losses[-5:].mean() < losses[0] - LOSS_FALL - 0.2, losses


@pytest.mark.parametrize("name", LOW_PRECISION)
def test_low_precision_loss_stays_within_the_band_of_bf16_from_the_same_weights(trained, name):
    if name not in trained:
        pytest.skip(f"{name}: this build has no JAX FFI handlers")
    low, bf16 = losses_of(trained[name][1]), losses_of(trained["bf16"][1])
    print(name, "largest |loss - bf16| %.4f at step %d" % loss_band.largest_gap(low, bf16))
    assert loss_band.band_problems(low, bf16, LOSS_FALL) == []
    assert training_problem(trained[name][1]) is None


class _NoKernelGradient(nn.Fp8DirectDotGeneralOp):
    """The fp8 op with every block kernel's gradient cut: quantized layers that never train."""

    def __call__(self, x, kernel, dims, *args, **kwargs):
        return super().__call__(x, jax.lax.stop_gradient(kernel), dims, *args, **kwargs)


def test_a_planted_fault_leaves_the_band(trained, monkeypatch):
    monkeypatch.setattr(FlaxFp8Hooks, "dot_general_cls", lambda self: _NoKernelGradient)
    _, out = train("flax-fp8-direct")
    gap, step = loss_band.largest_gap(losses_of(out), losses_of(trained["bf16"][1]))
    print("kernel gradients cut: largest |loss - bf16| %.4f at step %d" % (gap, step))
    assert gap > loss_band.LOSS_BAND


def test_bf16_carries_no_extra_state_and_watches_no_layer(trained):
    _, out = trained["bf16"]
    assert out.extra["extra_collections"] == [] and out.extra["quantized_parameters"] == []
    assert all(s.bad_layers is None for s in out.steps)


# --- the numerics guard -------------------------------------------------------------------------

def test_bad_gradients_flags_zero_and_non_finite_norms_only():
    names = ["layers.0.wq", "layers.0.wk", "layers.0.wv", "layers.0.wo"]
    assert bad_gradients(names, [0.0, float("nan"), 1e-30, float("inf")]) == [
        "layers.0.wq (zero)", "layers.0.wk (nan)", "layers.0.wo (inf)"]
    assert bad_gradients(names, [1.0, 2.0, 3.0, 4.0]) is None


class _NoUpGradient(nn.Fp8DirectDotGeneralOp):
    """The fp8 op with the kernel's gradient cut in layers_1/w_up only: the failure TE's NVFP4
    recipe had on sm_120 (REFERENCE.md §1), planted in one quantized layer."""

    def __call__(self, x, kernel, dims, *args, **kwargs):
        if self.scope.path[:2] == ("layers_1", "w_up"):
            kernel = jax.lax.stop_gradient(kernel)
        return super().__call__(x, kernel, dims, *args, **kwargs)


def test_a_planted_zero_gradient_trips_the_guard(monkeypatch):
    monkeypatch.setattr(FlaxFp8Hooks, "dot_general_cls", lambda self: _NoUpGradient)
    _, out = train("flax-fp8-direct", steps=3)
    assert all(s.bad_layers == ["layers.1.w_up (zero)"] for s in out.steps)
    # steps 0 and 1 are the tolerated first steps (GUARD_GRACE_STEPS); the zero gradient at step 2 fails
    assert training_problem(out).startswith(
        "numerics guard: quantized layer gradient all zero or not finite at step 2: layers.1.w_up (zero)")


# ---- XLA flags: set before JAX starts, each case in a fresh interpreter (XLA reads them once)

def _run_fresh(code: str, xla_flags: str | None = None) -> str:
    """Run ``code`` in a new interpreter on the CPU; return what it printed last."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


SET_FLAGS = """
import os
from parallax.engines.jax.engine import set_xla_flags
set_xla_flags({flags!r})
{after}
print(repr(os.environ.get("XLA_FLAGS")))
"""


def test_set_xla_flags_sets_them_when_none_are_set_and_jax_still_starts():
    code = SET_FLAGS.format(flags=("--a=1", "--b=2"), after="")
    assert _run_fresh(code) == repr("--a=1 --b=2")
    code = SET_FLAGS.format(flags=("--xla_gpu_enable_triton_gemm=false",),
                            after="import jax; assert jax.devices()[0].platform == 'cpu'")
    assert _run_fresh(code) == repr("--xla_gpu_enable_triton_gemm=false")


def test_set_xla_flags_keeps_a_flag_the_user_set():
    code = SET_FLAGS.format(flags=("--a=1", "--b=2"), after="")
    assert _run_fresh(code, xla_flags="--b=7") == repr("--b=7 --a=1")


def test_set_xla_flags_without_flags_changes_nothing():
    code = SET_FLAGS.format(flags=(), after="")
    assert _run_fresh(code) == repr(None)
    assert _run_fresh(code, xla_flags="--b=7") == repr("--b=7")


def test_set_xla_flags_after_jax_started_on_the_cpu_leaves_xla_flags_alone():
    code = "import jax; jax.devices()\n" + SET_FLAGS.format(flags=("--a=1", "--b=2"), after="")
    assert _run_fresh(code) == repr(None)
    user = "--xla_gpu_enable_triton_gemm=true"  # a real flag: XLA refuses unknown ones when JAX starts
    assert _run_fresh(code, xla_flags=user) == repr(user)


def test_flax_fp8_hooks_ask_for_the_xla_flags_their_recipes_record():
    for name in ("flax-fp8-delayed", "flax-fp8-direct"):
        recipe = registry.get("jax", name)
        flags = recipe.load_hooks().xla_flags()
        assert flags == tuple(recipe.params["xla_flags"]), name
    # the delayed op keeps its quantize-dequantize pairs only with excess precision off, and
    # ran with cuBLASLt fp8 GEMMs; the direct op is fastest with XLA's autotuned (Triton) GEMMs
    assert registry.get("jax", "flax-fp8-delayed").load_hooks().xla_flags() == (
        "--xla_gpu_enable_triton_gemm=false", "--xla_allow_excess_precision=false")
    assert registry.get("jax", "flax-fp8-direct").load_hooks().xla_flags() == ()
    assert registry.get("jax", "bf16").load_hooks().xla_flags() == ()
