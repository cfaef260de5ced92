"""Every fp8 and NVFP4 recipe that runs on the CPU, one layer at a time: its quantized linear
layers, as its hooks build them, against the exact product of the same x, W and dy, within
what the formats allow (tests/fixtures/format_bounds.py: the elementwise bound, and the rms
error against the formats' expected size), and planted faults that the check catches.

The operands are layer 0's own (tests/fixtures/linear_operands.py: one forward and backward of
the bf16 recipe on real tokens); the expected values follow each recipe's operand formats and
scales (tests/fixtures/recipe_layers.py). The same checks run on the GPU in tests/gpu/."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")

from fixtures import format_bounds as fb  # noqa: E402
from fixtures import recipe_layers as rl  # noqa: E402
from fixtures.reference_te import ReferenceTE  # noqa: E402
from parallax import quant  # noqa: E402

TORCHAO = ("torchao-fp8-tensorwise", "torchao-fp8-rowwise")
FLAX = ("flax-fp8-delayed", "flax-fp8-direct")
# The Flax tests run one Dense of each kind (each input: post-norm activations, attention
# output, SwiGLU output; each shape): wk, wv and w_gate repeat wq's and w_up's shapes and inputs.
FLAX_LINEARS = ("wq", "wo", "w_up", "w_down")


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # the CI machine is shared
    yield
    torch.set_num_threads(previous)


def needs_torchao():
    pytest.importorskip("torchao")


def needs_native(binding: str):
    if not quant.available_bindings()[binding]:
        pytest.skip(f"this build has no parallax._native {binding}")


def show(measured):
    """Printed for ``pytest -s``: the ratios the report quotes."""
    for m in measured:
        print(m)


kinds = fb.failed


# ---- torchao float8


@pytest.mark.parametrize("recipe", TORCHAO)
def test_torchao_layers_are_within_the_format_bounds(recipe):
    needs_torchao()
    measured = rl.torchao_measured(recipe)
    show(measured)
    assert len(measured) == 3 * 4  # y, dX, dW of wqkv, wo, w_gate_up, w_down
    fb.assert_within(measured)


def test_torchao_check_catches_a_wrong_format(monkeypatch):
    """E5M2 for the activations (where the recipe says E4M3): a step twice as coarse, within the
    loose elementwise bound but ~1.6x the expected rms error in y (in dW, the E5M2 dy's error
    dominates either way)."""
    needs_torchao()
    from torchao.float8.config import CastConfig

    from parallax.engines.torch.recipes.torchao import TorchaoFloat8Hooks

    right = TorchaoFloat8Hooks.float8_config
    monkeypatch.setattr(TorchaoFloat8Hooks, "float8_config", lambda self: dataclasses.replace(
        right(self), cast_config_input=CastConfig(target_dtype=torch.float8_e5m2), cast_config_input_for_grad_weight=None))
    measured = rl.torchao_measured("torchao-fp8-tensorwise")
    assert kinds(measured) == {"high"}
    assert {m.what.rsplit(" ", 1)[1] for m in measured if m.rms_ratio > fb.RMS_BAND[1]} == {"y"}


@pytest.mark.parametrize("recipe", TORCHAO)
def test_torchao_check_catches_a_scale_twice_too_large(monkeypatch, recipe):
    """Every dynamic scale ×2: the largest values saturate at the format's max, beyond the
    elementwise bound."""
    needs_torchao()
    import torchao.float8.float8_scaling_utils as scaling

    right = scaling.tensor_to_scale
    monkeypatch.setattr(scaling, "tensor_to_scale", lambda *a, **k: 2 * right(*a, **k))
    assert {"bound", "high"} <= kinds(rl.torchao_measured(recipe))


def test_torchao_check_catches_a_recipe_that_converts_nothing(monkeypatch):
    """The converter silently leaving nn.Linear in place: bf16 arithmetic only, an error ~5% of
    what fp8 must show."""
    needs_torchao()
    import torchao.float8

    monkeypatch.setattr(torchao.float8, "convert_to_float8_training", lambda module, **kw: module)
    assert kinds(rl.torchao_measured("torchao-fp8-tensorwise")) == {"low"}


# ---- Flax fp8: steps 0 (scale 1: no amax history yet) and 1 (scales from step 0's amax)


@pytest.mark.parametrize("recipe", FLAX)
def test_flax_fp8_layers_are_within_the_format_bounds_at_steps_0_and_1(recipe):
    measured = rl.flax_measured(recipe, steps=2, linears=FLAX_LINEARS)
    show(measured)
    assert len(measured) == 3 * 2 * len(FLAX_LINEARS)
    fb.assert_within(measured)


class _E5M2Forward(nn.Fp8DotGeneralOp):
    """The delayed op with E5M2 where the recipe says E4M3 (x and the kernel)."""

    e4m3_dtype: type = jax.numpy.float8_e5m2  # a field of the Flax op (annotated, or the dataclass ignores it)


def test_flax_check_catches_a_wrong_format():
    measured = rl.flax_measured("flax-fp8-delayed", steps=1, linears=("wq", "w_down"), dot_general_cls=_E5M2Forward)
    assert kinds(measured) == {"high"}


def _halve_input_amax(extra):
    """Step 1's input scale from half the amax step 0 recorded: x/scale reaches 2x the max, the
    largest activations clip (alone in their dot products, within the elementwise bound; the
    rms error of y is 2-3x the expected)."""
    collection = nn.fp8_ops.OVERWRITE_WITH_GRADIENT
    return jax.tree_util.tree_map_with_path(
        lambda path, v: v * 0.5 if "input_amax_history" in jax.tree_util.keystr(path) else v,
        {collection: extra[collection]})


@pytest.mark.parametrize("recipe", FLAX)
def test_flax_check_catches_a_stale_scale_that_saturates(recipe):
    measured = rl.flax_measured(recipe, steps=2, linears=("wq",), edit=_halve_input_amax)
    assert not fb.problems([m for m in measured if "step 0" in m.what])
    assert "high" in kinds([m for m in measured if "step 1" in m.what])


def test_flax_check_catches_a_recipe_that_quantizes_nothing():
    """XLA's own dot in the recipe's place (what a recipe whose fp8 quantize-dequantize pairs
    were folded away would run): bf16 errors only."""
    measured = rl.flax_measured("flax-fp8-direct", steps=1, linears=("wq", "w_down"),
                                dot_general_cls=lambda: jax.lax.dot_general)
    assert kinds(measured) == {"low"}


# ---- emulated NVFP4, torch and JAX


def test_torch_emulated_nvfp4_layers_are_within_the_format_bounds():
    needs_native("torch_op")
    measured = rl.nvfp4_torch_measured()
    show(measured)
    assert len(measured) == 3 * 4
    fb.assert_within(measured)


def test_jax_emulated_nvfp4_layers_are_within_the_format_bounds():
    needs_native("jax_ffi")
    measured = rl.nvfp4_jax_measured()
    show(measured)
    assert len(measured) == 3 * 7  # each canonical Dense: wq wk wv wo w_gate w_up w_down
    fb.assert_within(measured)


def test_nvfp4_check_catches_a_layer_left_in_bf16(monkeypatch):
    """The block-selection rule misapplied (layer 0 kept in bf16) in JAX, the converter
    skipped in torch: errors ~1% of NVFP4's."""
    needs_native("torch_op")
    needs_native("jax_ffi")
    from parallax.engines.jax.recipes.nvfp4 import EmulatedNvfp4Hooks
    from parallax.quant import torch_nvfp4_linear

    monkeypatch.setattr(torch_nvfp4_linear, "convert", lambda model, layers, seed: [])
    assert kinds(rl.nvfp4_torch_measured()) == {"low"}
    configure = EmulatedNvfp4Hooks.configure

    def no_quantized_layers(self, run_seed, n_layers):
        configure(self, run_seed, n_layers)
        self.layers = ()

    monkeypatch.setattr(EmulatedNvfp4Hooks, "configure", no_quantized_layers)
    assert kinds(rl.nvfp4_jax_measured(linears=("wq", "w_down"))) == {"low"}


def test_nvfp4_check_catches_the_rht_on_one_wgrad_operand_only(monkeypatch):
    """H applied to Xᵀ but not to dYᵀ: the transforms no longer cancel, dW is dYᵀ·H·X; beyond
    the expected error six-fold (and at the elementwise bound)."""
    needs_native("torch_op")
    from parallax.quant import torch_nvfp4_linear as tl

    right = tl.backward_operands

    def dy_without_rht(x2, dy2, counter, seeds, rht_seed):
        q = right(x2, dy2, counter, seeds, rht_seed)
        q["dyw"] = torch.ops.parallax.nvfp4_qdq_parts(dy2.to(torch.bfloat16), counter, [s[1] for s in seeds], "16x1",
                                                      True, False, rht_seed)
        return q

    monkeypatch.setattr(tl, "backward_operands", dy_without_rht)
    measured = rl.nvfp4_torch_measured()
    assert kinds(measured) == {"high"} or kinds(measured) == {"high", "bound"}
    assert {m.what.rsplit(" ", 1)[1] for m in measured if m.problems()} == {"dW"}


def test_nvfp4_check_catches_a_weight_dequantized_with_twice_its_scale(monkeypatch):
    """One E4M3 exponent off in the weight's block scales (dequantized ×2): y and dX six times
    the expected error."""
    needs_native("torch_op")
    from parallax.quant import torch_nvfp4_linear as tl

    right = tl.forward_operands
    monkeypatch.setattr(tl, "forward_operands", lambda x2, w, n: (lambda xq, wq: (xq, 2 * wq))(*right(x2, w, n)))
    measured = rl.nvfp4_torch_measured()
    assert "high" in kinds(measured)
    assert {m.what.rsplit(" ", 1)[1] for m in measured if m.problems()} == {"y", "dX"}


# ---- TransformerEngine (its fp8 runs only on a GPU: tests/gpu/test_layer_error_bounds_gpu.py).
# Here, on the CPU: the expectations of that test against an independent emulation of HYBRID fp8
# (torch's float8 casts), and its path through the recipe's hooks with a stand-in TE that does
# not quantize, which the check must refuse.


def _emulated_te(scaling: str) -> dict:
    """TE's three modules' GEMMs (recipe_layers.te_expected's docstring) in torch arithmetic:
    operands cast with torch's float8 dtypes, products in float32, outputs rounded to bf16."""
    ops = rl.block_operands()
    e4, e5 = torch.float8_e4m3fn, torch.float8_e5m2

    def t(a):
        return torch.from_numpy(a).float()

    def bf(x):
        return x.to(torch.bfloat16).float()

    def q(x, dtype):
        scale = 1.0 if scaling == "delayed" else torch.finfo(dtype).max / x.abs().max()
        return (x * scale).to(dtype).float() / scale

    def rms(h, gain):
        return h / torch.sqrt((h * h).mean(-1, keepdim=True) + ops.norm_eps) * gain

    out = {}
    qkv, wo = ops.linears["attention.wqkv"], ops.linears["attention.wo"]
    n = q(rms(t(ops.attention_in), t(ops.attention_norm)), e4)
    out["attention.qkv"] = {"y": bf(n @ q(t(qkv.w), e4).T), "dW": bf(q(t(qkv.dy), e5).T @ n)}
    x, w, dy = q(t(wo.x), e4), q(t(wo.w), e4), q(t(wo.dy), e5)
    out["attention.wo"] = {"y": bf(x @ w.T), "dX": bf(dy @ w), "dW": bf(dy.T @ x)}
    w1, w2 = q(t(ops.linears["feed_forward.w_gate_up"].w), e4), q(t(ops.linears["feed_forward.w_down"].w), e4)
    n2 = q(rms(t(ops.ffn_in), t(ops.ffn_norm)), e4)
    h = bf(n2 @ w1.T)
    gate, up = h.chunk(2, dim=-1)
    a = q(torch.nn.functional.silu(gate) * up, e4)
    dy = q(t(ops.ffn_dy), e5)
    da = bf(dy @ w2)
    sig = torch.sigmoid(gate)
    dh = q(bf(torch.cat([da * up * sig * (1 + gate * (1 - sig)), da * gate * sig], dim=-1)), e5)
    out["feed_forward"] = {"y": bf(a @ w2.T), "dW1": bf(dh.T @ n2), "dW2": bf(dy.T @ a)}
    return {m: {k: v.double().numpy() for k, v in gemms.items()} for m, gemms in out.items()}


@pytest.mark.parametrize("scaling", ["delayed", "current"])
def test_te_expectations_hold_for_an_emulation_of_hybrid_fp8(scaling):
    """The GPU test's expected values (the swiglu between two GEMMs and its gradient included)
    against fp8 arithmetic done another way: within the bounds, rms errors as expected."""
    measured = rl.te_measured(scaling, _emulated_te(scaling), rl.te_expected(rl.block_operands(), scaling,
                                                                                 acc=fb.FP32_U))
    show(measured)
    fb.assert_within(measured)




def test_te_check_through_the_hooks_refuses_a_te_that_does_not_quantize(monkeypatch):
    """The GPU test's path (the recipe's hooks build the TE model; block 0's modules called in
    its context) with TE's modules standing in unquantized: the layouts line up (the errors are
    bf16's, no element far off) and the check fails as it must, for want of quantization error."""
    import contextlib
    import enum
    import sys
    import types

    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.Format = enum.Enum("Format", "E4M3 HYBRID")
    recipe.DelayedScaling = lambda **kwargs: types.SimpleNamespace(**kwargs)
    pytorch = types.ModuleType("transformer_engine.pytorch")
    for name in ("Linear", "LayerNormLinear", "LayerNormMLP"):
        setattr(pytorch, name, getattr(ReferenceTE, name))
    pytorch.autocast = lambda enabled, recipe: contextlib.nullcontext()
    pytorch.is_fp8_available = lambda return_reason: (True, "")
    root = types.ModuleType("transformer_engine")
    root.__version__, root.pytorch = "0.0-stand-in", pytorch
    root.common = types.ModuleType("transformer_engine.common")
    root.common.recipe = recipe
    for module in (root, pytorch, root.common, recipe):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    measured = rl.te_torch_measured("te-fp8-delayed", device="cpu")
    show(measured)
    assert len(measured) == 8
    assert fb.failed(measured) == {"low"} and max(m.max_ratio for m in measured) < 0.05
