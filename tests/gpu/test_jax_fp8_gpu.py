"""The JAX engine's Flax fp8 recipes on a real GPU (fp8 tensor cores: compute capability 8.9+;
run on the device, skipped elsewhere): tiny trains on real tokens within the loss band of bf16
(tests/fixtures/loss_band.py), the label says native, and XLA really compiled the block GEMMs to
fp8 cuBLASLt calls. Their layers against the formats' bounds: test_layer_error_bounds_gpu.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:The Fp8DotGeneralOp is deprecated:DeprecationWarning")]

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")

import jax.numpy as jnp  # noqa: E402

from fixtures.batches import RepeatedBatch  # noqa: E402
from parallax.spec.config import OptimConfig, RunConfig, get_preset  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines import get_engine  # noqa: E402
from parallax.engines.base import NullProgress  # noqa: E402
from parallax.engines.jax import convert, runtime  # noqa: E402
from parallax.run.train import training_problem  # noqa: E402
from parallax.spec import registry  # noqa: E402
from parallax.engines.weights import init_weights  # noqa: E402

TINY = get_preset("tiny")
RECIPES = ("flax-fp8-delayed", "flax-fp8-direct")
BATCH = synthetic_batch(0, 0, 4, 128, TINY.vocab_size)


def gpu_run(recipe: str) -> RunConfig:
    return RunConfig(framework="jax", recipe=recipe, precision=None, model="tiny", batch_size=4, seq_len=128,
                     steps=20, warmup=2, device="gpu", optim=OptimConfig(lr=3e-3, lr_warmup_steps=0))


def in_fresh_process(body: str) -> dict:
    """Run ``body`` (which sets ``result``) in a new interpreter and return ``result``: XLA reads
    the recipe's XLA_FLAGS once, when JAX starts, so each recipe needs a process of its own."""
    import json
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(body) + "\nimport json; print('RESULT ' + json.dumps(result))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          cwd=str(Path(__file__).resolve().parents[1]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@pytest.mark.parametrize("recipe", RECIPES)
def test_fp8_recipe_trains_natively_within_the_band_of_bf16(recipe):
    """tiny from the same weights on the same 30 distinct real-token batches as JAX bf16
    (tests/fixtures/gpu_trajectories.py): the loss within loss_band.LOSS_BAND of bf16's at every
    step, falling by FALL; native, with the recipe's XLA flags, no numerics-guard problem."""
    from fixtures import loss_band
    from fixtures.gpu_trajectories import FALL, jax_trajectory

    result, bf16 = jax_trajectory(recipe), jax_trajectory(None)
    losses = result["losses"]
    print(recipe, "largest |loss - bf16| %.4f at step %d" % loss_band.largest_gap(losses, bf16["losses"]))
    assert result["native"] is True and result["recipe"] == recipe
    assert loss_band.band_problems(losses, bf16["losses"], FALL) == []
    assert result["problem"] is None
    assert len(result["quantized"]) == 7 * TINY.n_layers
    assert result["attention"] == bf16["attention"]
    for flag in registry.get("jax", recipe).params["xla_flags"]:
        assert flag in result["xla_flags"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_xla_keeps_fp8_in_the_compiled_block_gemms(recipe):
    """The compiled step of the engine's own pieces, with the flags the engine sets: fp8 operands
    survive optimisation (without --xla_allow_excess_precision=false the delayed op's had none),
    and with --xla_gpu_enable_triton_gemm=false every block GEMM (3 per linear: forward, dgrad,
    wgrad) is cuBLASLt's fp8 matmul."""
    result = in_fresh_process(f"""
        import jax, jax.numpy as jnp
        from gpu.test_jax_fp8_gpu import BATCH, TINY, gpu_run
        from parallax.spec.config import OptimConfig
        from parallax.engines import get_engine
        from parallax.plan.resolve import planned
        from parallax.engines.jax import convert, runtime
        from parallax.engines.weights import init_weights
        plan = get_engine("jax").check(planned(gpu_run({recipe!r})))
        hooks, device = plan.handles["precision"].hooks, plan.handles["device"]
        model, _, _ = runtime.build_model(TINY, "bfloat16", device, 4, 128, hooks.dot_general_cls())
        params = jax.device_put(convert.to_flax(init_weights(TINY, 0), TINY), device)
        extra = runtime.init_extra(model, hooks.extra_collections(), (4, 128), device)
        tx = runtime.make_optimizer(OptimConfig(), 20)
        step = runtime.jit_train_step(model, tx, runtime.quantized_kernels(TINY, hooks.dot_general_cls()))
        batch = jax.device_put(jnp.asarray(BATCH), device)
        hlo = step.lower(params, extra, jax.device_put(tx.init(params), device), batch).compile().as_text()
        result = dict(e4m3=hlo.count("f8e4m3fn"), e5m2=hlo.count("f8e5m2"),
                      fp8_gemms=hlo.count('custom_call_target="__cublas$lt$matmul$f8"'))
    """)
    assert result["e4m3"] > 0 and result["e5m2"] > 0, result
    if "--xla_gpu_enable_triton_gemm=false" in registry.get("jax", recipe).params["xla_flags"]:
        assert result["fp8_gemms"] == 3 * 7 * TINY.n_layers, result
