"""The torch fp8 recipes on a real GPU (H200): TransformerEngine and torchao float8 train the tiny
preset on real tokens within the loss band of bf16 (tests/fixtures/loss_band.py), TE in bf16
matches the plain model from the same canonical weights, export gives the canonical layout back;
each recipe's layers against the formats' bounds: test_layer_error_bounds_gpu.py. Skipped where
there is no GPU; a recipe whose library is absent is skipped with its name (tools/gpu-carry/
brings TE and torchao to the device)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parallax.errors import installed

torch = pytest.importorskip("torch")

from parallax.spec.config import OptimConfig, RunConfig, get_preset  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines.base import NullProgress  # noqa: E402
from parallax.engines.torch.engine import TorchEngine, Trainer, attention_context, probe_attention  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402
from parallax.spec import registry  # noqa: E402
from parallax.engines.torch.recipes.select import for_recipe  # noqa: E402
from parallax.engines.weights import init_weights  # noqa: E402
from parallax.plan.resolve import planned  # noqa: E402

pytestmark = pytest.mark.gpu

TINY = get_preset("tiny")
RECIPES = ("te-bf16", "te-fp8-delayed", "te-fp8-current", "torchao-fp8-tensorwise", "torchao-fp8-rowwise")


def recipe_run(name: str, **changes) -> RunConfig:
    recipe = registry.get("torch", name)
    if not installed(recipe.backend.module):  # found, not imported: TE loads its cuDNN only through the hooks
        pytest.skip(f"{recipe.backend.name} is not installed")
    base = dict(model="tiny", precision=recipe.format, recipe=name, batch_size=8, seq_len=128, steps=20,
                warmup=2, compile=True, device="cuda", optim=OptimConfig(lr=3e-3, lr_warmup_steps=0))
    return RunConfig(**{**base, **changes})


@pytest.fixture(scope="module")
def trajectories():
    """{recipe: (plan, EngineOutput)}: bf16 and every recipe of RECIPES whose library is
    installed, the tiny preset from the same weights on the same 30 distinct real-token batches
    (tests/fixtures/gpu_trajectories.py), compiled, TE's blocks in CUDA graphs (the defaults)."""
    from fixtures.gpu_trajectories import cached_torch_trajectory

    out = {"bf16": cached_torch_trajectory(None)}
    for name in RECIPES:
        if installed(name):
            out[name] = cached_torch_trajectory(name)
    return out


def installed(name: str) -> bool:
    """Whether the recipe's library is installed, read from package metadata as the registry
    reads it (importing TE before its hooks would load another cuDNN: recipes.te.prefer_torch_cudnn)."""
    from parallax.plan.envinfo import package_version

    return all(any(package_version(d) for d in options) for options in registry.get("torch", name).backend.distributions)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_trains_within_the_band_of_bf16_and_labels_itself_native(trajectories, name):
    """The loss at every step within loss_band.LOSS_BAND of bf16's (the first step within
    FIRST_STEP_GAP: the same weights and batch), falling by FALL over distinct batches."""
    from fixtures import loss_band
    from fixtures.gpu_trajectories import FALL

    if name not in trajectories:
        pytest.skip(f"{registry.get('torch', name).backend.name} is not installed")
    plan, out = trajectories[name]
    assert (plan.precision.recipe, plan.precision.native) == (name, True)
    losses, bf16 = [s.loss for s in out.steps], [s.loss for s in trajectories["bf16"][1].steps]
    print(name, "largest |loss - bf16| %.4f at step %d" % loss_band.largest_gap(losses, bf16))
    assert loss_band.band_problems(losses, bf16, FALL) == []
    assert all(math.isfinite(s.grad_norm) and s.grad_norm > 0 and s.bad_layers is None for s in out.steps)
    quantized = out.extra["quantized_parameters"]
    assert len(quantized) == (0 if name == "te-bf16" else 4 * TINY.n_layers), quantized
    assert not any("lm_head" in n for n in quantized)
    assert out.precision.to_dict()["recipe"] == name
    if name.startswith("te-"):
        assert out.framework["compile_scope"].startswith("torch.compile of the pure-torch glue")
        assert out.precision.details["te_version"] and out.precision.details["first_last_layers_bf16"] is False


def forward(name: str, weights, batch, device):
    """Logits, loss and canonical gradients of one forward/backward of ``name``'s model, eager."""
    recipe = registry.get("torch", name)
    if not installed(recipe.backend.module):  # found, not imported: TE loads its cuDNN only through the hooks
        pytest.skip(f"{recipe.backend.name} is not installed")
    precision = for_recipe(torch, recipe, device)
    hooks = precision.hooks
    model = hooks.build(torch, TINY, weights, device)
    attention = probe_attention(torch, device, torch.bfloat16, TINY, batch.shape[1] - 1)
    tokens = torch.from_numpy(batch).to(device)
    with torch.no_grad(), hooks.context(torch, device.type), attention_context(attention):
        logits = model(tokens[:, :-1]).float()
    with hooks.context(torch, device.type), attention_context(attention):  # one forward per fp8 autocast
        loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    grads = hooks.export(TINY, model, {n: p.grad for n, p in model.named_parameters()})
    return logits, float(loss), grads


def relative_error(a, b) -> float:
    a, b = (torch.as_tensor(x, dtype=torch.float32) for x in (a, b))
    return float((a - b).norm() / b.norm())


def test_te_bf16_matches_the_plain_bf16_model_from_the_same_weights():
    # Validates the converters and the SwiGLU order: a swapped gate/up changes the logits by O(1).
    device = torch.device("cuda", 0)
    weights = init_weights(TINY, 5)
    batch = synthetic_batch(5, 0, 4, 128, TINY.vocab_size)
    plain_logits, plain_loss, plain_grads = forward("bf16", weights, batch, device)
    te_logits, te_loss, te_grads = forward("te-bf16", weights, batch, device)
    assert relative_error(te_logits, plain_logits) < 2e-2
    assert abs(te_loss - plain_loss) < 1e-2
    for name in ("layers.0.wq", "layers.1.wo", "layers.0.w_gate", "layers.1.w_up", "layers.0.w_down",
                 "layers.1.attention_norm", "layers.0.ffn_norm", "tok_embeddings", "lm_head"):
        assert relative_error(te_grads[name], plain_grads[name]) < 5e-2, name


@pytest.mark.parametrize("name", RECIPES)
def test_export_after_a_step_gives_the_canonical_layout(name):
    run = recipe_run(name, compile=False)
    plan = TorchEngine().check(planned(run))
    weights = init_weights(TINY, 1)
    trainer = Trainer(run, weights, plan.handles["precision"], plan.handles["device"], plan.handles["attention"],
                      compile=False)
    batch = synthetic_batch(0, 0, run.batch_size, run.seq_len, TINY.vocab_size)
    trainer.train_step(trainer.upload(batch), 1e-3)
    after = trainer.hooks.export(TINY, trainer.model, trainer.model.state_dict())
    assert {k: v.shape for k, v in after.items()} == {k: v.shape for k, v in weights.items()}
    assert all(v.dtype == np.float32 for v in after.values())
    assert not np.array_equal(after["layers.0.w_gate"], weights["layers.0.w_gate"])


def test_te_fp8_refuses_a_token_count_off_the_multiple_of_8():
    run = recipe_run("te-fp8-delayed", batch_size=3, seq_len=10)
    with pytest.raises(ParallaxError, match="batch·seq divisible by 8"):
        TorchEngine().check(planned(run))


# ---- CUDA graphs of the TE blocks (--cuda-graphs): the same training as the eager blocks

GRAPH_RECIPES = ("te-bf16", "te-fp8-delayed")
# Tolerances. A replay launches the kernels that the eager blocks launch, on the same inputs, so
# the first loss (a forward of the same weights) agrees to float32 rounding of the mean; we allow
# 1e-3 nats in case cuBLASLt picks another algorithm during capture (a bf16-rounding difference
# per element averages far below that over 1024 tokens). Later steps also carry the backward's
# non-deterministic reductions (attention dQ, split-K weight gradients: bf16-level noise, also
# between two eager runs) through the updates, so they get 1e-2 nats: still a tenth of what a
# real capture bug would cost here: on one batch repeated, stale fp8 weights or a graph that
# reads stale inputs leave the loss where step 0 had it, while the eager run's falls by several
# hundredths of a nat per step or more at lr 3e-3 (the test asserts it does).
FIRST_LOSS_TOL, LOSS_TOL = 1e-3, 1e-2
SCALE_RTOL = 5e-2  # fp8 scales come from amaxes of those same tensors (gradients included)


def graph_trainer(name: str, graphs: bool, weights):
    run = recipe_run(name, cuda_graphs="on" if graphs else "off", batch_size=8, seq_len=128)
    plan = TorchEngine().check(planned(run))
    assert plan.cuda_graphs is graphs
    h = plan.handles
    return Trainer(run, weights, h["precision"], h["device"], h["attention"], run.compile,
                   cuda_graphs=plan.cuda_graphs)


def fp8_scales(trainer) -> dict[str, torch.Tensor]:
    """DelayedScaling's forward and backward scales of every TE module (TE's fp8_meta)."""
    return {f"{name}.{key}": module.fp8_meta[key].scale.detach().clone()
            for name, module in trainer.model.named_modules() if hasattr(module, "fp8_meta")
            for key in ("scaling_fwd", "scaling_bwd") if key in module.fp8_meta}


@pytest.mark.parametrize("name", GRAPH_RECIPES)
def test_cuda_graphs_train_as_the_eager_blocks_from_the_same_weights(name):
    weights = init_weights(TINY, 7)
    batches = [synthetic_batch(7, 0, 8, 128, TINY.vocab_size)] * 5  # one batch: the loss must fall on it
    runs = {}
    for graphs in (False, True):
        trainer = graph_trainer(name, graphs, weights)
        metrics = [trainer.train_step(trainer.upload(b), trainer.lr(k)).tolist() for k, b in enumerate(batches)]
        runs[graphs] = (metrics, trainer.eval_loss([trainer.upload(batches[0])]), fp8_scales(trainer))
        del trainer
    (eager, eager_eval, eager_scales), (graphed, graphed_eval, graphed_scales) = runs[False], runs[True]
    losses = [m[0] for m in eager], [m[0] for m in graphed]
    assert abs(losses[1][0] - losses[0][0]) < FIRST_LOSS_TOL, losses
    assert all(abs(g - e) < LOSS_TOL for e, g in zip(*losses)), losses
    assert losses[0][-1] < losses[0][0] - 0.05 and losses[1][-1] < losses[1][0] - 0.05, losses  # both train
    assert math.isfinite(graphed_eval) and abs(graphed_eval - eager_eval) < LOSS_TOL
    quantized = [v for m in graphed for v in m[2:]]
    assert len(quantized) == (0 if name == "te-bf16" else 5 * 4 * TINY.n_layers)
    assert all(math.isfinite(v) and v > 0 for v in quantized)
    if name == "te-fp8-delayed":
        # The recipe's bookkeeping saw the graphed modules: scales moved off their initial 1.0,
        # and to where the eager run's went.
        assert eager_scales.keys() == graphed_scales.keys() and eager_scales
        for key, scale in graphed_scales.items():
            assert not torch.all(scale == 1.0), key
            torch.testing.assert_close(scale, eager_scales[key], rtol=SCALE_RTOL, atol=0, msg=key)


@pytest.mark.parametrize("name", GRAPH_RECIPES)
def test_cuda_graphs_run_is_recorded_and_exports_the_canonical_layout(name):
    weights = init_weights(TINY, 1)
    trainer = graph_trainer(name, True, weights)
    batch = synthetic_batch(0, 0, 8, 128, TINY.vocab_size)
    trainer.train_step(trainer.upload(batch), 1e-3)
    after = trainer.hooks.export(TINY, trainer.model, trainer.model.state_dict())
    assert {k: v.shape for k, v in after.items()} == {k: v.shape for k, v in weights.items()}
    assert all(v.dtype == np.float32 for v in after.values())
    assert not np.array_equal(after["layers.0.w_gate"], weights["layers.0.w_gate"])
    from parallax.engines.torch.engine import framework_info

    info = framework_info(torch, trainer)
    assert info["cuda_graphs"] is True and info["graph_capture_s"] > 0
    assert info["graph_scope"].startswith("te.make_graphed_callables over the 2 decoder blocks")


def test_cuda_graphs_default_on_for_te_and_off_for_plain_torch_on_the_gpu():
    assert TorchEngine().check(planned(recipe_run("te-fp8-delayed"))).cuda_graphs is True
    assert TorchEngine().check(planned(recipe_run("te-fp8-delayed", cuda_graphs="off"))).cuda_graphs is False
    plain = RunConfig(model="tiny", batch_size=8, seq_len=128, steps=3, warmup=1, device="cuda")
    assert TorchEngine().check(planned(plain)).cuda_graphs is False
    with pytest.raises(ParallaxError, match="recipe 'bf16' has no CUDA-graph capture"):
        TorchEngine().check(planned(plain.replace(cuda_graphs="on")))
