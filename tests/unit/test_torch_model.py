"""The torch LLaMA: size, weight layout, numerics against a NumPy float64 reference, training."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fixtures.batches import RepeatedBatch  # noqa: E402
from parallax.spec.config import OptimConfig, RunConfig, get_preset  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines.base import NullProgress  # noqa: E402
from parallax.engines.torch import convert  # noqa: E402
from parallax.engines.torch.engine import TorchEngine, make_optimizer  # noqa: E402
from parallax.spec import registry  # noqa: E402
from parallax.engines.torch.model import Llama, apply_rope, rope_tables  # noqa: E402
from parallax.engines.schedule import lr_at  # noqa: E402
from parallax.engines.weights import init_weights  # noqa: E402
from parallax.plan.resolve import planned  # noqa: E402

TINY = get_preset("tiny")


@pytest.fixture(autouse=True)
def one_thread():
    # The CI machine is shared: one thread keeps eager CPU steps from thrashing.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def train_torch(run, batches, progress=None):
    engine = TorchEngine()
    return engine.train(run, engine.check(planned(run)), batches, progress or NullProgress())


def tiny_run(**changes) -> RunConfig:
    base = dict(model="tiny", batch_size=2, seq_len=16, steps=4, warmup=1, compile=False, device="cpu")
    return RunConfig(**{**base, **changes})


# --- a NumPy float64 forward pass written from the canonical layout, independent of torch ---

def np_rms(x, gain, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def np_rope(x, pos_angle):
    half = x.shape[-1] // 2
    cos = np.cos(pos_angle)[None, :, None, :]
    sin = np.sin(pos_angle)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def np_logits(model, w, tokens):
    w = {k: v.astype(np.float64) for k, v in w.items()}
    b, s = tokens.shape
    heads, hd = model.n_heads, model.head_dim
    inv_freq = model.rope_theta ** (-2.0 * np.arange(hd // 2) / hd)
    angle = np.arange(s)[:, None] * inv_freq[None, :]
    causal = np.tril(np.ones((s, s), dtype=bool))
    h = w["tok_embeddings"][tokens]
    for i in range(model.n_layers):
        p = f"layers.{i}."
        a = np_rms(h, w[p + "attention_norm"], model.norm_eps)
        q, k, v = (a @ w[p + n] for n in ("wq", "wk", "wv"))
        q, k = (np_rope(t.reshape(b, s, heads, hd), angle) for t in (q, k))
        v = v.reshape(b, s, heads, hd)
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
        scores = np.where(causal, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, heads * hd)
        h = h + out @ w[p + "wo"]
        f = np_rms(h, w[p + "ffn_norm"], model.norm_eps)
        gate, up = f @ w[p + "w_gate"], f @ w[p + "w_up"]
        h = h + (gate / (1 + np.exp(-gate)) * up) @ w[p + "w_down"]
    return np_rms(h, w["norm"], model.norm_eps) @ w["lm_head"]


def np_loss(model, w, batch):
    logits = np_logits(model, w, batch[:, :-1])
    targets = batch[:, 1:]
    top = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return float((lse - picked).mean())


# --- tests ---

@pytest.mark.parametrize("preset", ["llama-100m", "llama-100m-hd128"])
def test_llama_100m_instantiates_with_exactly_100313856_parameters(preset):
    with torch.device("meta"):
        model = Llama(get_preset(preset))
    assert model.num_parameters() == 100_313_856
    assert model.num_parameters() == get_preset(preset).param_count()
    assert model.layers[0].attention.head_dim == get_preset(preset).head_dim  # 64, or 128 in 6 heads


def test_tiny_instantiated_parameters_match_the_analytic_count():
    assert Llama(TINY).num_parameters() == TINY.param_count()


def test_canonical_weights_round_trip_exactly_through_the_torch_layout():
    weights = init_weights(TINY, seed=3)
    state = convert.to_torch_state(TINY, weights)
    model = Llama(TINY)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in state.items()} == expected
    back = convert.from_torch_state(TINY, state)
    assert set(back) == set(weights)
    for name, value in weights.items():
        assert back[name].dtype == np.float32
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_fused_projections_hold_the_canonical_matrices_transposed():
    weights = init_weights(TINY, seed=0)
    state = convert.to_torch_state(TINY, weights)
    d = TINY.d_model
    wqkv = state["layers.1.attention.wqkv.weight"].numpy()
    np.testing.assert_array_equal(wqkv[d:2 * d], weights["layers.1.wk"].T)
    gate_up = state["layers.0.feed_forward.w_gate_up.weight"].numpy()
    np.testing.assert_array_equal(gate_up[TINY.d_ff:], weights["layers.0.w_up"].T)


def test_rope_tables_are_the_half_split_angles_in_float64_rounded_once():
    cos, sin = rope_tables(8, 16, 10_000.0)
    assert cos.dtype == np.float32 and cos.shape == (8, 16)
    angle = 5 * 10_000.0 ** (-2.0 * 3 / 16)  # position 5, frequency index 3
    assert cos[5, 3] == np.float32(math.cos(angle)) and cos[5, 3 + 8] == np.float32(math.cos(angle))
    assert sin[5, 3] == np.float32(math.sin(angle))


def test_rope_rotates_pairs_i_and_i_plus_half():
    cos, sin = (torch.from_numpy(t) for t in rope_tables(4, 8, 10_000.0))
    x = torch.zeros(1, 4, 1, 8)
    x[..., 0] = 1.0  # the pair (0, 4) at full frequency: rotated by angle = position
    out = apply_rope(x, cos, sin)
    for pos in range(4):
        assert out[0, pos, 0, 0].item() == pytest.approx(math.cos(pos), abs=1e-6)
        assert out[0, pos, 0, 4].item() == pytest.approx(math.sin(pos), abs=1e-6)


def test_float32_loss_and_logits_match_a_numpy_float64_reference():
    run = tiny_run(batch_size=2, seq_len=16)
    weights = init_weights(TINY, seed=1)
    batch = synthetic_batch(7, 0, 2, 16, TINY.vocab_size)
    ref = TorchEngine().reference_trainer(run, weights, "float32", "cpu")
    logits = ref.logits(batch)
    expected = np_logits(TINY, weights, batch[:, :-1])
    assert logits.shape == (2, 16, TINY.vocab_size)
    np.testing.assert_allclose(logits, expected, rtol=0, atol=2e-5)
    loss, _ = ref.loss_and_grads(batch)
    assert loss == pytest.approx(np_loss(TINY, weights, batch), rel=1e-6)


@pytest.mark.parametrize("name", [
    "tok_embeddings", "layers.0.attention_norm", "layers.0.wq", "layers.1.wk", "layers.0.wv",
    "layers.1.wo", "layers.0.w_gate", "layers.1.w_up", "layers.0.w_down", "norm", "lm_head",
])
def test_float32_gradients_in_canonical_layout_match_finite_differences(name):
    run = tiny_run(batch_size=2, seq_len=8)
    weights = init_weights(TINY, seed=2)
    batch = synthetic_batch(5, 0, 2, 8, TINY.vocab_size)
    _, grads = TorchEngine().reference_trainer(run, weights, "float32", "cpu").loss_and_grads(batch)
    assert grads[name].shape == weights[name].shape and grads[name].dtype == np.float32
    index = np.unravel_index(np.argmax(np.abs(grads[name])), grads[name].shape)
    eps = 1e-3
    plus = {k: v.astype(np.float64) for k, v in weights.items()}
    minus = {k: v.copy() for k, v in plus.items()}
    plus[name][index] += eps
    minus[name][index] -= eps
    numeric = (np_loss(TINY, plus, batch) - np_loss(TINY, minus, batch)) / (2 * eps)
    assert abs(numeric) > 1e-5, "pick an entry whose gradient is measurable"
    assert grads[name][index] == pytest.approx(numeric, rel=2e-3)


def test_weight_decay_applies_to_matrices_only():
    model = Llama(TINY)
    optimizer = make_optimizer(torch, model, OptimConfig(), torch.device("cpu"))
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decayed["params"])
    assert len(plain["params"]) == 2 * TINY.n_layers + 1  # two norms per block, the final norm
    assert optimizer.defaults["betas"] == (0.9, 0.95) and optimizer.defaults["eps"] == 1e-8


def test_reference_step_follows_the_shared_schedule_and_changes_every_parameter():
    run = tiny_run(steps=10)
    weights = init_weights(TINY, seed=0)
    ref = TorchEngine().reference_trainer(run, weights, "float32", "cpu")
    before = ref.params()
    for name in weights:
        np.testing.assert_array_equal(before[name], weights[name])
    batch = synthetic_batch(0, 0, 2, 16, TINY.vocab_size)
    loss_before, _ = ref.loss_and_grads(batch)
    assert ref.step(batch) == pytest.approx(loss_before, rel=1e-6)
    for group in ref.trainer.optimizer.param_groups:  # step 0 of the warmup: lr · 1/W
        assert group["lr"] == pytest.approx(run.optim.lr / run.optim.lr_warmup_steps)
    after = ref.params()
    assert all(not np.array_equal(after[n], weights[n]) for n in weights)


def test_tiny_model_loss_falls_on_a_repeated_batch_through_the_engine_loop():
    run = tiny_run(batch_size=4, seq_len=32, steps=8, warmup=1, optim=OptimConfig(lr=3e-3, lr_warmup_steps=0))
    batch = synthetic_batch(0, 0, 4, 32, TINY.vocab_size)
    out = train_torch(run, RepeatedBatch(batch), NullProgress())
    losses = [s.loss for s in out.steps]
    assert losses[0] == pytest.approx(math.log(TINY.vocab_size), abs=0.1)  # uniform at init
    assert losses[-1] < losses[0] - 1.0
    assert all(b < a for a, b in zip(losses, losses[1:]))


def test_engine_train_records_every_step_and_evaluates_on_schedule():
    from parallax.data.source import make_batch_source

    run = tiny_run(steps=5, warmup=1, eval_every=2, eval_batches=2)
    progress = []

    class Recorder:
        def step(self, step, loss, step_ms):
            progress.append(("step", step))

        def phase(self, text):
            progress.append(("phase", text))

    out = train_torch(run, make_batch_source(run), Recorder())
    assert [s.step for s in out.steps] == [0, 1, 2, 3, 4]
    assert all(s.step_ms > 0 and math.isfinite(s.loss) and s.grad_norm > 0 for s in out.steps)
    assert [s.lr for s in out.steps] == [pytest.approx(float(lr_at(k, run.optim, run.steps))) for k in range(5)]
    assert [e.step for e in out.evals] == [1, 3, 4]
    for e in out.evals:  # each validation batch's loss, and their mean
        assert len(e.batch_losses) == 2 and e.loss == pytest.approx(sum(e.batch_losses) / 2)
    assert [p for p in progress if p[0] == "step"] == [("step", k) for k in range(5)]
    assert ("phase", "training") in progress
    assert out.framework["attention_backend"] in ("flash", "math")
    assert out.framework["compiled"] is False
    assert out.extra["parameters"] == TINY.param_count()
    assert out.peak_allocated_bytes is None  # no CUDA allocator on the CPU


def test_engine_first_loss_equals_the_reference_loss_of_synthetic_batch_zero():
    from parallax.data.source import make_batch_source

    run = tiny_run(steps=2, warmup=1, seed=4)
    out = train_torch(run, make_batch_source(run), NullProgress())
    ref = TorchEngine().reference_trainer(run, init_weights(TINY, 4), "bfloat16", "cpu")
    batch = synthetic_batch(4, 0, run.batch_size, run.seq_len, TINY.vocab_size)
    loss, _ = ref.loss_and_grads(batch)
    # Same weights, batch and recipe; only the CPU attention kernel (flash vs math) differs.
    assert out.steps[0].loss == pytest.approx(loss, rel=2e-3)


def test_check_refuses_what_cannot_run_here_in_one_line():
    from parallax.errors import ParallaxError

    with pytest.raises(ParallaxError, match="recipe 'te-nvfp4' needs an NVIDIA GPU of compute capability 10.0.*"
                                            "use --recipe emulated-nvfp4: what --precision nvfp4 picks here"):
        TorchEngine().check(planned(tiny_run(precision=None, recipe="te-nvfp4")))
    with pytest.raises(ParallaxError, match="recipe 'te-fp8-current' needs an NVIDIA GPU of compute capability 8.9"):
        TorchEngine().check(planned(tiny_run(precision=None, recipe="te-fp8-current")))


def test_check_returns_the_plan_train_consumes():
    plan = TorchEngine().check(planned(tiny_run()))
    info = plan.precision
    assert (info.precision, info.backend, info.recipe) == ("bf16", "torch.autocast", "bf16")
    assert plan.recipe.name == "bf16" and plan.device == "cpu" and plan.attention in ("flash", "math")


def test_a_planted_zero_gradient_in_a_watched_layer_trips_the_guard(monkeypatch):
    """The guard watches the gradients of the layers a recipe quantizes; plant a recipe that
    'quantizes' w_down and a hook that zeroes that gradient, as a broken fp8 backward would."""
    from parallax.data.source import make_batch_source
    from parallax.engines.torch.recipes.autocast import AutocastHooks

    class ZeroingHooks(AutocastHooks):
        def quantized(self, module):
            return [n for n, _ in module.named_parameters() if n.endswith("w_down.weight")]

        def build(self, torch, config, weights, device):
            module = super().build(torch, config, weights, device)
            module.layers[1].feed_forward.w_down.weight.register_hook(torch.zeros_like)
            return module

    monkeypatch.setattr(type(registry.get("torch", "bf16")), "load_hooks", lambda self: ZeroingHooks(self))
    run = tiny_run(steps=3, warmup=1)
    out = train_torch(run, make_batch_source(run))
    assert out.extra["quantized_parameters"] == ["layers.0.feed_forward.w_down.weight",
                                                 "layers.1.feed_forward.w_down.weight"]
    assert all(s.bad_layers == ["layers.1.feed_forward.w_down.weight (zero)"] for s in out.steps)
    assert all(s.grad_norm > 0 for s in out.steps)


@pytest.mark.gpu
def test_gpu_run_uses_cuda_events_fast_attention_and_reports_memory():
    from parallax.data.source import make_batch_source

    run = tiny_run(device="cuda", steps=6, warmup=2, batch_size=4, seq_len=128, compile=True)
    out = train_torch(run, make_batch_source(run), NullProgress())
    assert out.timing_method.startswith("cuda-events")
    assert out.peak_allocated_bytes > 0 and out.peak_reserved_bytes >= out.peak_allocated_bytes
    major, _ = torch.cuda.get_device_capability()
    if major >= 9:
        assert out.framework["attention_backend"] == "cudnn"
    assert all(math.isfinite(s.loss) and s.step_ms > 0 for s in out.steps)


@pytest.mark.gpu
def test_gpu_bf16_reference_loss_is_close_to_cpu_float32():
    run = tiny_run(batch_size=2, seq_len=64)
    weights = init_weights(TINY, 0)
    batch = synthetic_batch(0, 0, 2, 64, TINY.vocab_size)
    cpu, _ = TorchEngine().reference_trainer(run, weights, "float32", "cpu").loss_and_grads(batch)
    gpu, _ = TorchEngine().reference_trainer(run, weights, "bfloat16", "gpu").loss_and_grads(batch)
    assert gpu == pytest.approx(cpu, rel=1e-2)


def test_a_failing_cudnn_version_check_does_not_lose_the_run(monkeypatch):
    """framework_info runs after training: torch refusing to name its cuDNN (two versions in one
    process, as with TransformerEngine on the H200) is recorded, not raised."""
    from parallax.engines.torch.engine import cudnn_version

    def refuse():
        raise RuntimeError("cuDNN version incompatibility: PyTorch was compiled  against (9, 19, 0) but found "
                           "runtime version (9, 14, 0). PyTorch already comes bundled with cuDNN.")

    monkeypatch.setattr(torch.backends.cudnn, "version", refuse)
    assert cudnn_version(torch) == ("unknown: cuDNN version incompatibility: PyTorch was compiled  against "
                                    "(9, 19, 0) but found runtime version (9, 14, 0). PyTorch already comes "
                                    "bundled with cuDNN.")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91900)
    assert cudnn_version(torch) == 91900


def test_the_attention_probe_records_why_earlier_backends_refused():
    """On the H200 the TE fp8 cells ran flash where the others ran cuDNN; the record must say why."""
    from parallax.engines.torch.engine import probe_attention

    refused = {}
    chosen = probe_attention(torch, torch.device("cpu"), torch.float32, get_preset("tiny"), 16, refused)
    assert chosen == "FLASH_ATTENTION"  # torch's CPU flash kernel; cuDNN has none on the CPU
    assert list(refused) == ["cudnn"] and refused["cudnn"]
