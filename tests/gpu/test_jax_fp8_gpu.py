"""The JAX engine's Flax fp8 recipes on a real GPU (fp8 tensor cores: compute capability 8.9+;
run on the device, skipped elsewhere): tiny trains with a finite, falling loss, the label says
native, and XLA really compiled the block GEMMs to fp8 cuBLASLt calls."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:The Fp8DotGeneralOp is deprecated:DeprecationWarning")]

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")

import jax.numpy as jnp  # noqa: E402

from parallax.config import OptimConfig, RunConfig, get_preset  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines import get_engine  # noqa: E402
from parallax.engines.base import NullProgress  # noqa: E402
from parallax.engines.jax import convert, runtime  # noqa: E402
from parallax.train import training_problem  # noqa: E402
from parallax.weights import init_weights  # noqa: E402

TINY = get_preset("tiny")
RECIPES = ("flax-fp8-delayed", "flax-fp8-direct")
BATCH = synthetic_batch(0, 0, 4, 128, TINY.vocab_size)


class Repeated:
    description = "one synthetic batch, repeated"

    def __iter__(self):
        return itertools.repeat(BATCH)

    def eval_batches(self):
        return [BATCH]

    def close(self):
        pass


def gpu_run(recipe: str) -> RunConfig:
    return RunConfig(framework="jax", recipe=recipe, precision=None, model="tiny", batch_size=4, seq_len=128,
                     steps=20, warmup=2, device="gpu", optim=OptimConfig(lr=3e-3, lr_warmup_steps=0))


@pytest.mark.parametrize("recipe", RECIPES)
def test_fp8_recipe_trains_natively_on_the_gpu(recipe):
    run = gpu_run(recipe)
    engine = get_engine("jax")
    plan = engine.check(run)
    out = engine.train(run, plan, Repeated(), NullProgress())
    losses = [s.loss for s in out.steps]
    assert out.precision.native is True and out.precision.recipe == recipe
    assert all(np.isfinite(losses)) and losses[-1] < losses[0] - 1.0
    assert training_problem(out) is None
    assert len(out.extra["quantized_parameters"]) == 7 * TINY.n_layers
    assert out.framework["attention_backend"] == "cudnn"


@pytest.mark.parametrize("recipe", RECIPES)
def test_xla_compiles_the_block_gemms_to_fp8(recipe):
    """The compiled step of the engine's own pieces: fp8 operands and cuBLASLt's fp8 matmul."""
    from parallax.precision import registry

    hooks = registry.get("jax", recipe).load_hooks()
    device = jax.devices("gpu")[0]
    model, _, _ = runtime.build_model(TINY, "bfloat16", device, 4, 128, hooks.dot_general_cls())
    params = jax.device_put(convert.to_flax(init_weights(TINY, 0), TINY), device)
    extra = runtime.init_extra(model, hooks.extra_collections(), (4, 128), device)
    tx = runtime.make_optimizer(OptimConfig(), 20)
    step = runtime.jit_train_step(model, tx, runtime.quantized_kernels(TINY, hooks.dot_general_cls()))
    batch = jax.device_put(jnp.asarray(BATCH), device)
    hlo = step.lower(params, extra, jax.device_put(tx.init(params), device), batch).compile().as_text()
    assert "f8e4m3fn" in hlo and "f8e5m2" in hlo
    assert "__cublas$lt$matmul$f8" in hlo, "XLA did not rewrite the fp8 dots to cuBLASLt fp8 GEMMs"
