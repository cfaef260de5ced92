"""The torch fp8 recipes on the CPU: TransformerEngine's weight layout (no TE needed), hook
resolution, the missing-TE error, torchao's conversion, and every low-precision recipe that runs
on the CPU (torchao, emulated NVFP4) trained beside bf16 on real tokens within the loss band of
tests/fixtures/loss_band.py, with planted faults that leave it."""

from __future__ import annotations

import contextlib
import importlib.util
import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fixtures import loss_band  # noqa: E402
from fixtures.batches import RepeatedBatch  # noqa: E402
from fixtures.reference_te import ReferenceTE  # noqa: E402
from parallax.spec.config import OptimConfig, RunConfig, get_preset  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines.base import NullProgress  # noqa: E402
from parallax.engines.torch import convert, te_model  # noqa: E402
from parallax.engines.base import Plan  # noqa: E402
from parallax.engines.torch.engine import TorchEngine, Trainer  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402
from parallax.spec import registry  # noqa: E402
from parallax.engines.torch.recipes.select import for_recipe  # noqa: E402
from parallax.engines.weights import init_weights  # noqa: E402
from parallax.plan.resolve import planned  # noqa: E402

TINY = get_preset("tiny")
TORCHAO_RECIPES = ("torchao-fp8-tensorwise", "torchao-fp8-rowwise")


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # the CI machine is shared
    yield
    torch.set_num_threads(previous)


def tiny_run(**changes) -> RunConfig:
    base = dict(model="tiny", batch_size=4, seq_len=32, steps=6, warmup=1, compile=False, device="cpu")
    return RunConfig(**{**base, **changes})


# ---- TransformerEngine: the layout, without TE

def test_te_state_round_trips_the_canonical_weights_exactly():
    weights = init_weights(TINY, seed=3)
    state = te_model.to_te_state(TINY, weights)
    d, ff = TINY.d_model, TINY.d_ff
    assert state["layers.0.attention.qkv.weight"].shape == (3 * d, d)  # TE stores [out, in]
    assert state["layers.0.attention.qkv.layer_norm_weight"].shape == (d,)
    assert state["layers.1.feed_forward.fc1_weight"].shape == (2 * ff, d)
    assert state["layers.1.feed_forward.fc2_weight"].shape == (d, ff)
    assert len(state) == 3 + 6 * TINY.n_layers  # per block: 2 norm gains, qkv, wo, fc1, fc2
    state["layers.0.attention.qkv._extra_state"] = torch.zeros(4)  # TE's fp8 metadata: ignored
    back = te_model.from_te_state(TINY, state)
    assert set(back) == set(weights)
    for name, value in weights.items():
        assert back[name].dtype == np.float32
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_te_fused_weights_are_the_plain_models_fused_weights():
    # fc1 = [w_gate; w_up]: TE's swiglu gates with the first half (te_model.py says where TE says so).
    weights = init_weights(TINY, seed=0)
    te, plain = te_model.to_te_state(TINY, weights), convert.to_torch_state(TINY, weights)
    for i in range(TINY.n_layers):
        p = f"layers.{i}."
        pairs = [("attention.qkv.weight", "attention.wqkv.weight"), ("attention.wo.weight", "attention.wo.weight"),
                 ("feed_forward.fc1_weight", "feed_forward.w_gate_up.weight"),
                 ("feed_forward.fc2_weight", "feed_forward.w_down.weight"),
                 ("attention.qkv.layer_norm_weight", "attention_norm.weight"),
                 ("feed_forward.layer_norm_weight", "ffn_norm.weight")]
        for te_name, plain_name in pairs:
            torch.testing.assert_close(te[p + te_name], plain[p + plain_name], rtol=0, atol=0)
    np.testing.assert_array_equal(te["layers.0.feed_forward.fc1_weight"][:TINY.d_ff].numpy(),
                                  weights["layers.0.w_gate"].T)


def test_te_fp8_shape_checks_name_the_bad_size():
    hooks = registry.get("torch", "te-fp8-delayed").load_hooks()
    with pytest.raises(ParallaxError, match=r"batch·seq divisible by 8; 3·10 = 30 is not"):
        hooks.check_shapes(tiny_run(batch_size=3, seq_len=10))
    hooks.check_shapes(tiny_run(batch_size=1, seq_len=8))


# ---- every recipe with hooks resolves, without importing its library

def test_every_torch_recipe_with_hooks_loads_its_class():
    loaded = {}
    for recipe in registry.of_framework("torch"):
        if recipe.implemented:
            hooks = recipe.load_hooks()
            assert type(hooks).__name__ == recipe.hooks.rpartition(":")[2] and hooks.recipe is recipe
            loaded[recipe.name] = type(hooks).__name__
    assert loaded == {"bf16": "AutocastHooks", "te-bf16": "TransformerEngineHooks",
                      "te-fp8-delayed": "TransformerEngineHooks", "te-fp8-current": "TransformerEngineHooks",
                      "te-fp8-dpa": "TransformerEngineHooks", "torchao-fp8-tensorwise": "TorchaoFloat8Hooks", "torchao-fp8-rowwise": "TorchaoFloat8Hooks",
                      "te-nvfp4": "TransformerEngineHooks", "emulated-nvfp4": "EmulatedNvfp4Hooks",
                      "emulated-nvfp4-all": "EmulatedNvfp4Hooks", "te-mxfp8": "TransformerEngineHooks",
                      "torchao-mxfp8-emulated": "TorchaoMxfp8Hooks", "emulated-mxfp8": "EmulatedMxHooks",
                      "emulated-mxfp8-floor": "EmulatedMxHooks", "emulated-mxfp4": "EmulatedMxHooks"}


def test_te_bf16_quantizes_nothing():
    assert registry.get("torch", "te-bf16").load_hooks().quantized(object()) == []


def test_te_on_the_cpu_is_one_line_through_the_cli(tmp_path):
    # A fresh interpreter where TransformerEngine cannot be imported, as on a machine without it:
    # on the CPU the first thing wrong is the missing GPU, said before the missing library.
    script = ("import sys; sys.modules['transformer_engine'] = None\n"
              "from parallax.cli import main\n"
              "sys.exit(main(['train', '--framework', 'torch', '--recipe', 'te-fp8-delayed', '--model', 'tiny',"
              " '--batch-size', '2', '--seq-len', '16', '--steps', '3', '--warmup', '1', '--device', 'cpu',"
              f" '--output-dir', {str(tmp_path / 'run')!r}]))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0] == ("parallax: error: recipe 'te-fp8-delayed' needs an NVIDIA GPU of compute capability "
                        "8.9+; this run is on the CPU (fp8 recipes that run on the CPU: torchao-fp8-tensorwise, "
                        "torchao-fp8-rowwise; or run on a GPU)")
    assert not (tmp_path / "run" / "run.json").exists()


def test_missing_te_on_a_gpu_names_the_extra(monkeypatch):
    from parallax.plan import capability

    monkeypatch.setitem(sys.modules, "transformer_engine", None)
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", None)
    for name in ("te-bf16", "te-fp8-delayed", "te-fp8-current"):
        with pytest.raises(ParallaxError) as err:
            capability.require(registry.get("torch", name), "gpu", "9.0", "NVIDIA H200")
        assert str(err.value) == ("transformer_engine.pytorch is not installed; install it with: "
                                  "pip install 'slm-parallax[te]'")


# ---- torchao float8

def torchao_hooks(name: str):
    pytest.importorskip("torchao")
    return registry.get("torch", name).load_hooks()


@pytest.mark.parametrize("name", TORCHAO_RECIPES)
def test_torchao_converts_the_four_block_linears_and_keeps_lm_head(name):
    from torchao.float8.float8_linear import Float8Linear

    hooks = torchao_hooks(name)
    model = hooks.build(torch, TINY, init_weights(TINY, 0), torch.device("cpu"))
    converted = [n for n, m in model.named_modules() if isinstance(m, Float8Linear)]
    assert len(converted) == 4 * TINY.n_layers  # wqkv, wo, w_gate_up, w_down per block
    for i in range(TINY.n_layers):
        assert {n for n in converted if n.startswith(f"layers.{i}.")} == {
            f"layers.{i}.{n}" for n in ("attention.wqkv", "attention.wo", "feed_forward.w_gate_up",
                                        "feed_forward.w_down")}
    assert type(model.lm_head) is torch.nn.Linear
    assert hooks.quantized(model) == [n + ".weight" for n in converted]
    assert hooks.export(TINY, model, model.state_dict()).keys() == init_weights(TINY, 0).keys()


def test_torchao_leaves_linears_off_the_multiple_of_16_alone():
    hooks = torchao_hooks("torchao-fp8-tensorwise")
    assert hooks.convertible(torch.nn.Linear(64, 128), "layers.0.attention.wo")
    assert not hooks.convertible(torch.nn.Linear(60, 128), "layers.0.attention.wo")
    assert not hooks.convertible(torch.nn.Linear(64, 128), "lm_head")
    with pytest.raises(ParallaxError, match="batch·seq divisible by 16"):
        hooks.check(torch, torch.device("cpu"), tiny_run(batch_size=3, seq_len=10))


# ---- every low-precision recipe that runs on the CPU, trained beside bf16 on real tokens: the
# band, the fall and their measurements are tests/fixtures/loss_band.py's

TRAJECTORY = dict(steps=loss_band.STEPS, batch_size=4, seq_len=32)
LOSS_FALL = loss_band.LOSS_FALL[(4, 32)]
LOW_PRECISION_CPU = (*TORCHAO_RECIPES, "emulated-nvfp4")


def trajectory(recipe: str | None):
    """(plan, EngineOutput) of ``recipe`` (None: bf16) on the real batches, through the engine."""
    from fixtures.real_tokens import TokenBatches, token_batches

    run = tiny_run(precision=None if recipe else "bf16", recipe=recipe, warmup=1,
                   optim=OptimConfig(lr=3e-3, lr_warmup_steps=0), **TRAJECTORY)
    engine = TorchEngine()
    plan = engine.check(planned(run))
    batches = token_batches(run.batch_size, run.seq_len, run.steps)
    return plan, engine.train(run, plan, TokenBatches(batches), NullProgress())


def losses_of(out) -> np.ndarray:
    return np.array([s.loss for s in out.steps])


@pytest.fixture(scope="module")
def trajectories():
    """{recipe: (plan, EngineOutput)} of bf16 and every CPU low-precision recipe whose library
    this installation has (~1.5 s each)."""
    from parallax import quant

    out = {"bf16": trajectory(None)}
    for name in LOW_PRECISION_CPU:
        if name.startswith("torchao") and importlib.util.find_spec("torchao") is None:
            continue
        if name == "emulated-nvfp4" and not quant.available_bindings()["torch_op"]:
            continue
        out[name] = trajectory(name)
    return out


def test_bf16_learns_the_real_text(trajectories):
    losses = losses_of(trajectories["bf16"][1])
    assert losses[0] == pytest.approx(math.log(TINY.vocab_size), abs=0.1)
    assert losses[-5:].mean() < losses[0] - LOSS_FALL - 0.3, losses


@pytest.mark.parametrize("name", LOW_PRECISION_CPU)
def test_low_precision_recipe_trains_within_the_band_of_bf16(trajectories, name):
    if name not in trajectories:
        pytest.skip(f"{name}: its library or kernels are not installed")
    low, bf16 = losses_of(trajectories[name][1]), losses_of(trajectories["bf16"][1])
    print(name, "largest |loss - bf16| %.4f at step %d" % loss_band.largest_gap(low, bf16))
    assert loss_band.band_problems(low, bf16, LOSS_FALL) == []
    _, out = trajectories[name]
    assert all(s.grad_norm > 0 and math.isfinite(s.grad_norm) and s.bad_layers is None for s in out.steps)
    assert len(out.extra["quantized_parameters"]) == 4 * TINY.n_layers
    assert not any(n.startswith("lm_head") for n in out.extra["quantized_parameters"])


@pytest.mark.parametrize("name", TORCHAO_RECIPES)
def test_torchao_plan_labels_its_recipe(trajectories, name):
    if name not in trajectories:
        pytest.skip("torchao is not installed")
    plan, _ = trajectories[name]
    assert (plan.precision.recipe, plan.precision.backend, plan.precision.native) == (name, "torchao", False)
    assert plan.precision.details["float8_recipe"] == name.rpartition("-")[2]


def _planted(kind: str):
    """TorchaoFloat8Hooks.build with a fault in every converted linear."""
    from parallax.engines.torch.recipes.torchao import TorchaoFloat8Hooks

    right = TorchaoFloat8Hooks.build

    def build(self, torch, config, weights, device):
        from torchao.float8.float8_linear import Float8Linear

        module = right(self, torch, config, weights, device)
        for layer in module.modules():
            if isinstance(layer, Float8Linear):
                if kind == "zero weight gradients":
                    layer.weight.register_hook(lambda grad: grad * 0)
                else:  # "outputs x2": a dequantization scale off by one power of two
                    layer.register_forward_hook(lambda mod, args, y: y * 2)
        return module

    return build


@pytest.mark.parametrize("fault", ["zero weight gradients", "outputs x2"])
def test_a_planted_fault_leaves_the_band(trajectories, monkeypatch, fault):
    pytest.importorskip("torchao")
    from parallax.engines.torch.recipes.torchao import TorchaoFloat8Hooks

    monkeypatch.setattr(TorchaoFloat8Hooks, "build", _planted(fault))
    _, out = trajectory("torchao-fp8-tensorwise")
    gap, step = loss_band.largest_gap(losses_of(out), losses_of(trajectories["bf16"][1]))
    print(fault, "largest |loss - bf16| %.4f at step %d" % (gap, step))
    assert gap > loss_band.LOSS_BAND


def test_torchao_export_after_a_step_gives_canonical_weights():
    pytest.importorskip("torchao")
    run = tiny_run(precision="fp8", recipe="torchao-fp8-tensorwise")
    plan = TorchEngine().check(planned(run))
    weights = init_weights(TINY, 1)
    trainer = Trainer(run, weights, plan.handles["precision"], plan.handles["device"], plan.handles["attention"],
                      compile=False)
    trainer.train_step(trainer.upload(synthetic_batch(0, 0, 4, 32, TINY.vocab_size)), 1e-3)
    after = trainer.hooks.export(TINY, trainer.model, trainer.model.state_dict())
    assert {k: v.shape for k, v in after.items()} == {k: v.shape for k, v in weights.items()}
    assert not np.array_equal(after["layers.0.wq"], weights["layers.0.wq"])


# ---- the TE model's glue on the CPU, with float32 stand-ins for the three TE modules



@pytest.mark.parametrize("attention", ["sdpa", "te"])
def test_te_model_glue_with_reference_modules_equals_the_plain_model_in_float32(attention):
    from parallax.engines.torch.model import Llama

    weights = init_weights(TINY, 2)
    model = te_model.TELlama(ReferenceTE, TINY, torch.float32, torch.device("cpu"), attention=attention)
    missing, unexpected = model.load_state_dict(te_model.to_te_state(TINY, weights), strict=False)
    # TE's attention holds no weight, only its FP8 scaling state, which the canonical weights lack
    assert unexpected == [] and missing == ([f"layers.{i}.attention.core._extra_state" for i in range(TINY.n_layers)]
                                            if attention == "te" else [])
    plain = Llama(TINY)
    plain.load_state_dict(convert.to_torch_state(TINY, weights), strict=True)
    batch = torch.from_numpy(synthetic_batch(2, 0, 2, 16, TINY.vocab_size))
    torch.testing.assert_close(model(batch[:, :-1]), plain(batch[:, :-1]), rtol=1e-5, atol=1e-5)
    loss = model(batch[:, :-1], batch[:, 1:])
    loss.backward()
    grads = te_model.from_te_state(TINY, {n: p.grad for n, p in model.named_parameters()})
    plain(batch[:, :-1], batch[:, 1:]).backward()
    plain_grads = convert.from_torch_state(TINY, {n: p.grad for n, p in plain.named_parameters()})
    for name in weights:
        np.testing.assert_allclose(grads[name], plain_grads[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_te_model_compiled_glue_gives_the_eager_loss_and_keeps_parameter_names():
    weights = init_weights(TINY, 2)
    model = te_model.TELlama(ReferenceTE, TINY, torch.float32, torch.device("cpu"))
    model.load_state_dict(te_model.to_te_state(TINY, weights), strict=True)
    batch = torch.from_numpy(synthetic_batch(2, 0, 2, 16, TINY.vocab_size))
    eager = model(batch[:, :-1], batch[:, 1:])
    names = [n for n, _ in model.named_parameters()]
    model.compile_glue("default")
    compiled = model(batch[:, :-1], batch[:, 1:])
    compiled.backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    assert [n for n, _ in model.named_parameters()] == names
    assert all(p.grad is not None for p in model.parameters())


@pytest.fixture
def stand_in_te(monkeypatch):
    """A ``transformer_engine`` package made of ReferenceTE, so that TransformerEngineHooks runs
    on the CPU: ``entered`` lists the fp8 recipes its autocast was entered with."""
    import dataclasses
    import enum
    import types

    recipe_module = types.ModuleType("transformer_engine.common.recipe")
    recipe_module.Format = enum.Enum("Format", "E4M3 HYBRID")
    recipe_module.DelayedScaling = dataclasses.make_dataclass(
        "DelayedScaling", ["fp8_format", "amax_history_len", "amax_compute_algo",
                           ("fp8_dpa", bool, dataclasses.field(default=False))])
    recipe_module.Float8CurrentScaling = dataclasses.make_dataclass("Float8CurrentScaling", ["fp8_format"])
    pytorch = types.ModuleType("transformer_engine.pytorch")
    for name in ("Linear", "LayerNormLinear", "LayerNormMLP", "DotProductAttention"):
        setattr(pytorch, name, getattr(ReferenceTE, name))
    pytorch.entered, pytorch.fp8_reason = [], None

    def autocast(enabled, recipe):
        pytorch.entered.append(recipe)
        return contextlib.nullcontext()

    pytorch.autocast = autocast
    pytorch.is_fp8_available = lambda return_reason: (pytorch.fp8_reason is None, pytorch.fp8_reason or "")
    root = types.ModuleType("transformer_engine")
    root.__version__, root.pytorch = "0.0-stand-in", pytorch
    root.common = types.ModuleType("transformer_engine.common")
    root.common.recipe = recipe_module
    for module in (root, pytorch, root.common, recipe_module):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return pytorch


def test_te_hooks_build_run_and_export_with_a_stand_in_te(stand_in_te):
    hooks = registry.get("torch", "te-fp8-delayed").load_hooks()
    cpu = torch.device("cpu")
    hooks.check(torch, cpu, tiny_run())
    details = hooks.details(torch)
    assert {k: details[k] for k in ("te_version", "te_recipe", "fp8_format", "amax_history_len",
                                    "amax_compute_algo", "first_last_layers_bf16")} == {
        "te_version": "0.0-stand-in", "te_recipe": "DelayedScaling", "fp8_format": "HYBRID",
        "amax_history_len": 1024, "amax_compute_algo": "max", "first_last_layers_bf16": False}
    weights = init_weights(TINY, 4)
    model = hooks.build(torch, TINY, weights, cpu)
    assert len(hooks.quantized(model)) == 4 * TINY.n_layers
    assert not any("lm_head" in n or "norm" in n for n in hooks.quantized(model))
    batch = torch.from_numpy(synthetic_batch(4, 0, 2, 16, TINY.vocab_size))
    with hooks.context(torch, "cpu"):
        loss = model(batch[:, :-1], batch[:, 1:])
    assert math.isfinite(loss.item()) and stand_in_te.entered == [hooks.te_recipe()]
    exported = hooks.export(TINY, model, model.state_dict())
    for name, value in weights.items():
        np.testing.assert_array_equal(exported[name], value, err_msg=name)


def test_te_hooks_fall_back_to_fp8_autocast_and_report_te_s_reason(stand_in_te):
    hooks = registry.get("torch", "te-fp8-current").load_hooks()

    def fp8_autocast(enabled, fp8_recipe):  # the name and argument of older TE releases
        stand_in_te.entered.append(fp8_recipe)
        return contextlib.nullcontext()

    del stand_in_te.autocast
    stand_in_te.fp8_autocast = fp8_autocast
    with hooks.context(torch, "cpu"):
        pass
    assert [type(r).__name__ for r in stand_in_te.entered] == ["Float8CurrentScaling"]
    stand_in_te.fp8_reason = "Device compute capability 8.9 or higher required for FP8 execution."
    with pytest.raises(ParallaxError, match="TransformerEngine cannot run fp8 on cpu: Device compute capability 8.9"):
        hooks.check(torch, torch.device("cpu"), tiny_run())
    assert registry.get("torch", "te-bf16").load_hooks().details(torch)["te_recipe"] is None


# ---- te-fp8-dpa: TE's attention in FP8, gated by head_dim before any GPU work


@pytest.mark.parametrize("head_dim, cc, refused", [
    (64, "9.0", "TE's FP8 attention trains only at head_dim 128 on Hopper (9.0) (cuDNN has no FP8 attention "
                "backward at other sizes there); this model's heads are 64 wide: use --model llama-100m-hd128 "
                "(6 heads of 128), or --recipe te-fp8-delayed for bf16 attention"),
    (128, "9.0", None),
    (64, "10.0", None),
    (128, "10.3", None),
    (256, "10.0", "TE's FP8 attention on Blackwell datacenter (10.0) needs head_dim <= 128 and a multiple of 16; "
                  "this model's heads are 256 wide: use --recipe te-fp8-delayed for bf16 attention"),
    (128, "8.9", "TE's FP8 attention needs compute capability 9.0+ (Hopper); this GPU is Ada (8.9)"),
    (128, "12.0", "TE 2.20 has no FP8 attention on Blackwell RTX (12.0) (get_attention_backend turns it off there)"),
    (64, None, None),  # no GPU known: TE decides
])
def test_fp8_attention_takes_head_dim_128_on_hopper_and_up_to_128_on_blackwell(head_dim, cc, refused):
    from parallax.engines.te_shapes import fp8_attention_refusal

    assert fp8_attention_refusal(head_dim, cc) == refused


class FakeCuda:
    """torch as far as the check reads it, on a GPU of ``cc``."""

    def __init__(self, cc):
        self.cuda = type("cuda", (), {"get_device_capability": staticmethod(lambda device=None: cc)})


def test_te_fp8_dpa_refuses_llama_100m_on_hopper_in_one_line_before_importing_te(monkeypatch):
    hooks = registry.get("torch", "te-fp8-dpa").load_hooks()
    gpu = torch.device("cuda", 0)
    run = RunConfig(model="llama-100m", recipe="te-fp8-dpa", precision="fp8")
    monkeypatch.setitem(sys.modules, "transformer_engine", None)  # importing TE would fail: the check must not
    with pytest.raises(ParallaxError) as err:
        hooks.check(FakeCuda((9, 0)), gpu, run)
    assert str(err.value) == (
        "recipe 'te-fp8-dpa': TE's FP8 attention trains only at head_dim 128 on Hopper (9.0) (cuDNN has no FP8 "
        "attention backward at other sizes there); this model's heads are 64 wide: use --model llama-100m-hd128 "
        "(6 heads of 128), or --recipe te-fp8-delayed for bf16 attention")
    assert "\n" not in str(err.value)


def test_te_fp8_dpa_passes_the_gate_at_head_dim_128_and_te_then_decides(stand_in_te):
    hooks = registry.get("torch", "te-fp8-dpa").load_hooks()
    run = RunConfig(model="llama-100m-hd128", recipe="te-fp8-dpa", precision="fp8")
    hooks.check(FakeCuda((9, 0)), torch.device("cuda", 0), run)  # the stand-in TE has fp8
    hooks.check(FakeCuda((10, 0)), torch.device("cuda", 0), RunConfig(model="llama-100m", recipe="te-fp8-dpa",
                                                                       precision="fp8"))
    stand_in_te.fp8_reason = "no fp8 here"
    with pytest.raises(ParallaxError, match="TransformerEngine cannot run fp8 on cuda:0: no fp8 here"):
        hooks.check(FakeCuda((9, 0)), torch.device("cuda", 0), run)


def test_te_fp8_dpa_runs_its_attention_in_te_under_fp8_dpa_and_records_it(stand_in_te):
    recipe = registry.get("torch", "te-fp8-dpa")
    assert (recipe.format, recipe.min_cc, recipe.params["fp8_dpa"], recipe.params["attention"]) == ("fp8", (9, 0), True, "te")
    run = tiny_run(recipe="te-fp8-dpa", precision=None, steps=3).validate()
    cpu = torch.device("cpu")
    precision = for_recipe(torch, recipe, cpu, run)
    hooks = precision.hooks
    assert hooks.te_recipe().fp8_dpa is True and registry.get("torch", "te-fp8-delayed").load_hooks().te_recipe().fp8_dpa is False
    details = precision.info.details
    assert details["fp8_dpa"] is True
    assert details["attention"] == "TransformerEngine DotProductAttention (cuDNN fused attention), FP8 under fp8_dpa"
    assert registry.get("torch", "te-fp8-delayed").load_hooks().details(torch)["attention"] == (
        "torch SDPA (framework.attention_backend)")
    plan = Plan(recipe=recipe, precision=precision.info, device="cpu", attention="math",
                handles={"device": cpu, "precision": precision, "attention": "MATH"})
    batch = synthetic_batch(0, 0, run.batch_size, run.seq_len, TINY.vocab_size)
    out = TorchEngine().train(run, plan, RepeatedBatch(batch), NullProgress())
    assert all(math.isfinite(s.loss) and s.bad_layers is None for s in out.steps)
    assert out.framework["recipe_attention"] == details["attention"]
    assert hooks.compile_info(True).endswith(
        "TE modules and TE's DotProductAttention inside the blocks' CUDA graphs (graph_scope), the embedding eager")
    assert stand_in_te.entered and all(r is hooks.te_recipe() for r in stand_in_te.entered)


def test_other_recipes_record_no_attention_of_their_own(stand_in_te):
    for name in ("bf16", "te-bf16", "te-fp8-delayed", "torchao-fp8-tensorwise"):
        assert registry.get("torch", name).load_hooks().attention_info() is None, name


# ---- CUDA graphs of the TE blocks (--cuda-graphs), with a stand-in make_graphed_callables

class GraphRecorder:
    """A stand-in ``te.make_graphed_callables``: records what it was handed, and returns, for
    each block, a callable that counts its calls (``replays``) and runs the block eagerly, so
    that the model trains on the CPU and the test sees which path each forward took."""

    def __init__(self):
        self.calls, self.replays = [], []

    def graphed(self, index, module):
        def replay(h):
            self.replays.append(index)
            return module(h)
        return replay

    def record(self, modules, sample_args, num_warmup_iters, arguments):
        self.calls.append({"modules": modules, "sample_args": sample_args, "num_warmup_iters": num_warmup_iters,
                           "autocast": torch.is_autocast_enabled("cpu"),
                           "autocast_dtype": torch.get_autocast_dtype("cpu"),
                           "autocast_cache": torch.is_autocast_cache_enabled(), **arguments})
        return tuple(self.graphed(i, m) for i, m in enumerate(modules))

    def current(self):  # TE 2.9+: the new names, the old ones kept as deprecated aliases
        def make_graphed_callables(modules, sample_args, num_warmup_iters=3, allow_unused_input=False,
                                   sample_kwargs=None, fp8_enabled=None, fp8_calibrating=None, fp8_recipe=None,
                                   fp8_group=None, fp8_weight_caching=None, enabled=None, calibrating=None,
                                   recipe=None, amax_reduction_group=None, cache_quantized_params=None):
            assert (fp8_enabled, fp8_recipe, fp8_weight_caching) == (None, None, None), "deprecated names used"
            return self.record(modules, sample_args, num_warmup_iters,
                               {"enabled": enabled, "recipe": recipe, "cache": cache_quantized_params})
        return make_graphed_callables

    def before_2_9(self):  # TE 2.8: the fp8_ names only
        def make_graphed_callables(modules, sample_args, num_warmup_iters=3, allow_unused_input=False,
                                   fp8_enabled=False, fp8_calibrating=False, fp8_recipe=None, fp8_weight_caching=False,
                                   sample_kwargs=None):
            return self.record(modules, sample_args, num_warmup_iters,
                               {"enabled": fp8_enabled, "recipe": fp8_recipe, "cache": fp8_weight_caching})
        return make_graphed_callables


@pytest.mark.parametrize("version", ["current", "before_2_9"])
@pytest.mark.parametrize("name", ["te-fp8-delayed", "te-bf16"])
def test_a_plan_with_cuda_graphs_captures_the_blocks_and_training_replays_them(stand_in_te, name, version):
    recorder = GraphRecorder()
    stand_in_te.make_graphed_callables = getattr(recorder, version)()
    run = tiny_run(recipe=name, precision=None, steps=3, eval_every=2, eval_batches=1).validate()
    cpu, recipe = torch.device("cpu"), registry.get("torch", name)
    precision = for_recipe(torch, recipe, cpu, run)
    plan = Plan(recipe=recipe, precision=precision.info, device="cpu", attention="math", cuda_graphs=True,
                handles={"device": cpu, "precision": precision, "attention": "MATH"})
    batch = synthetic_batch(0, 0, run.batch_size, run.seq_len, TINY.vocab_size)
    out = TorchEngine().train(run, plan, RepeatedBatch(batch), NullProgress())

    (call,) = recorder.calls  # captured once, before the first step
    assert len(call["modules"]) == TINY.n_layers
    assert [type(m).__name__ for m in call["modules"]] == ["OneInputBlock"] * TINY.n_layers
    for (sample,) in call["sample_args"]:
        assert (tuple(sample.shape), sample.dtype, sample.requires_grad) == (
            (run.batch_size, run.seq_len, TINY.d_model), torch.bfloat16, True)
    assert len({id(s) for (s,) in call["sample_args"]}) == TINY.n_layers  # one static input per graph
    assert call["num_warmup_iters"] == 3 and call["cache"] is False
    assert (call["autocast"], call["autocast_dtype"], call["autocast_cache"]) == (True, torch.bfloat16, False)
    hooks = precision.hooks
    if name == "te-bf16":
        assert call["enabled"] is False and call["recipe"] is None
    else:
        assert call["enabled"] is True and call["recipe"] is hooks.te_recipe()
        assert type(call["recipe"]).__name__ == "DelayedScaling"
    # Every training step replays every block; the evaluations (after steps 2 and 3) run eagerly.
    assert recorder.replays == list(range(TINY.n_layers)) * run.steps
    assert len(out.evals) == 2 and all(math.isfinite(e.loss) for e in out.evals)
    assert all(math.isfinite(s.loss) and s.bad_layers is None for s in out.steps)
    assert out.framework["cuda_graphs"] is True
    assert out.framework["graph_scope"].startswith(
        f"te.make_graphed_callables over the {TINY.n_layers} decoder blocks (forward and backward")
    assert out.framework["graph_capture_s"] >= 0
    assert out.framework["compile_scope"] is None  # compile=False: nothing compiled
    assert hooks.compile_info(True).endswith(
        "TE modules and SDPA inside the blocks' CUDA graphs (graph_scope), the embedding eager")
    assert hooks.compile_info(False).endswith("TE modules, SDPA and the embedding eager")


def test_without_cuda_graphs_nothing_is_captured_and_it_is_recorded_off(stand_in_te):
    recorder = GraphRecorder()
    stand_in_te.make_graphed_callables = recorder.current()
    run = tiny_run(recipe="te-fp8-delayed", precision=None, steps=2).validate()
    cpu, recipe = torch.device("cpu"), registry.get("torch", "te-fp8-delayed")
    precision = for_recipe(torch, recipe, cpu, run)
    plan = Plan(recipe=recipe, precision=precision.info, device="cpu", attention="math",
                handles={"device": cpu, "precision": precision, "attention": "MATH"})
    batch = synthetic_batch(0, 0, run.batch_size, run.seq_len, TINY.vocab_size)
    out = TorchEngine().train(run, plan, RepeatedBatch(batch), NullProgress())
    assert recorder.calls == [] and recorder.replays == []
    assert (out.framework["cuda_graphs"], out.framework["graph_scope"], out.framework["graph_capture_s"]) == (
        False, None, None)


def test_te_model_forward_replays_graphs_under_grad_and_runs_eager_blocks_under_no_grad():
    weights = init_weights(TINY, 3)
    model = te_model.TELlama(ReferenceTE, TINY, torch.float32, torch.device("cpu"))
    model.load_state_dict(te_model.to_te_state(TINY, weights), strict=True)
    names = list(model.state_dict())
    batch = torch.from_numpy(synthetic_batch(3, 0, 2, 16, TINY.vocab_size))
    tokens, targets = batch[:, :-1], batch[:, 1:]
    eager = model(tokens, targets)
    recorder = GraphRecorder()
    graphed = recorder.record(model.one_input_blocks(16), (), 3, {})
    model.use_graphed(graphed, (2, 16, TINY.d_model))
    assert list(model.state_dict()) == names  # the graphed blocks add no second name for a parameter

    loss = model(tokens, targets)
    assert recorder.replays == list(range(TINY.n_layers))
    torch.testing.assert_close(loss, eager, rtol=0, atol=0)  # same blocks, same parameters
    loss.backward()
    assert all(p.grad is not None for p in model.layers.parameters())

    with torch.no_grad():
        model(tokens, targets)
    assert recorder.replays == list(range(TINY.n_layers))  # no replay under no_grad

    with pytest.raises(RuntimeError, match=r"replay shape \(2, 16, 64\), got \(1, 16, 64\)"):
        model(tokens[:1], targets[:1])
    with pytest.raises(ValueError, match="1 graphed blocks for 2 layers"):
        model.use_graphed(graphed[:1], (2, 16, TINY.d_model))


def test_recipes_with_cuda_graphs_are_the_te_ones_and_their_hooks_capture():
    from parallax.engines.torch.recipes.base import TorchHooks

    graphable = [r for r in registry.recipes() if r.cuda_graphs]
    assert [r.name for r in graphable] == ["te-bf16", "te-fp8-delayed", "te-fp8-current", "te-fp8-dpa"]
    for recipe in graphable:
        hooks = type(recipe.load_hooks())
        assert recipe.framework == "torch" and hooks.graph is not TorchHooks.graph, recipe.name
        assert hooks.graph_info is not TorchHooks.graph_info, recipe.name
    with pytest.raises(RuntimeError, match="has no CUDA-graph capture"):
        registry.get("torch", "bf16").load_hooks().graph(torch, None, (1, 2, 3), None, None)
