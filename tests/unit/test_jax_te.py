"""The JAX engine's TransformerEngine recipes without TransformerEngine (CPU): the canonical ↔
TE-params converters, the model's wiring around TE's modules (checked with stand-ins written
to TE 2.20's documented parameter names and semantics), the hooks' checks, label and details
with a fake TE, and the refusals through the real command line. What needs TE itself is in
``tests/gpu/test_jax_te_gpu.py``."""

from __future__ import annotations

import contextlib
import enum
import subprocess
import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest

from parallax.spec.config import RunConfig, get_preset
from parallax.errors import ParallaxError
from parallax.spec import registry
from parallax.engines.weights import init_weights

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")

import jax.numpy as jnp  # noqa: E402
from flax.core import freeze  # noqa: E402

from parallax.engines.jax import te_model  # noqa: E402
from parallax.engines.jax.model import Llama  # noqa: E402
from parallax.engines.jax.recipes import te as te_hooks  # noqa: E402
from parallax.engines.jax.recipes.select import for_recipe  # noqa: E402

TINY = get_preset("tiny")


# ---- converters: exact, on plain dicts ----------------------------------------------------------

def test_round_trip_is_exact_and_the_layout_is_te_s():
    weights = init_weights(TINY, 3)
    tree = te_model.to_te_flax(weights, TINY)
    d, w, f = TINY.d_model, TINY.n_heads * TINY.head_dim, TINY.d_ff
    layer = tree["layers_1"]
    assert set(tree) == {"tok_embeddings", "norm", "lm_head", *(f"layers_{i}" for i in range(TINY.n_layers))}
    assert {k: set(v) for k, v in layer.items()} == {"qkv": {"scale", "kernel"}, "wo": {"kernel"},
                                                     "mlp": {"scale", "wi_kernel", "wo_kernel"}}
    assert layer["qkv"]["kernel"].shape == (d, 3 * w) and layer["mlp"]["wi_kernel"].shape == (d, 2, f)
    assert layer["mlp"]["wo_kernel"].shape == (f, d) and layer["wo"]["kernel"].shape == (w, d)
    # the name map, entry by entry
    p = "layers.1."
    np.testing.assert_array_equal(layer["qkv"]["kernel"][:, :w], weights[p + "wq"])
    np.testing.assert_array_equal(layer["qkv"]["kernel"][:, w:2 * w], weights[p + "wk"])
    np.testing.assert_array_equal(layer["qkv"]["kernel"][:, 2 * w:], weights[p + "wv"])
    np.testing.assert_array_equal(layer["mlp"]["wi_kernel"][:, 0], weights[p + "w_gate"])  # SiLU'd slice
    np.testing.assert_array_equal(layer["mlp"]["wi_kernel"][:, 1], weights[p + "w_up"])
    np.testing.assert_array_equal(layer["qkv"]["scale"], weights[p + "attention_norm"])
    np.testing.assert_array_equal(layer["mlp"]["scale"], weights[p + "ffn_norm"])

    back = te_model.from_te_flax(tree, TINY)
    assert list(back) == list(TINY.param_shapes())
    for name, value in weights.items():
        assert back[name].dtype == np.float32
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_from_te_flax_reads_frozen_device_trees_and_does_not_alias():
    weights = init_weights(TINY, 0)
    tree = jax.tree.map(jnp.asarray, te_model.to_te_flax(weights, TINY))
    back = te_model.from_te_flax(freeze(tree), TINY)
    for name, value in weights.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    numpy_tree = te_model.to_te_flax(weights, TINY)
    out = te_model.from_te_flax(numpy_tree, TINY)
    out["layers.0.wq"][0, 0] += 1.0
    assert numpy_tree["layers_0"]["qkv"]["kernel"][0, 0] == weights["layers.0.wq"][0, 0]


def test_to_te_flax_checks_the_canonical_names():
    weights = init_weights(TINY, 0)
    del weights["layers.0.wk"]
    with pytest.raises(ValueError, match="missing"):
        te_model.to_te_flax(weights, TINY)


def test_quantized_kernel_names_say_what_each_kernel_holds():
    kernels = te_model.quantized_kernels(TINY)
    assert len(kernels) == 4 * TINY.n_layers
    assert kernels[:4] == [(("layers_0", "qkv", "kernel"), "layers.0.wq+wk+wv"),
                           (("layers_0", "wo", "kernel"), "layers.0.wo"),
                           (("layers_0", "mlp", "wi_kernel"), "layers.0.w_gate+w_up"),
                           (("layers_0", "mlp", "wo_kernel"), "layers.0.w_down")]


# ---- the wiring around TE's modules, with stand-ins of TE 2.20's semantics -----------------------
# Same parameter names and shapes as transformer_engine/jax/flax/module.py; the stand-ins compute
# in float32 what TE documents: RMSNorm then x @ kernel; wi_kernel's slice k gets activations[k].

def _rms(x, scale, eps):
    x32 = x.astype(jnp.float32)
    return x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps) * scale


class _LayerNormDenseGeneral(nn.Module):
    features: int
    layernorm_type: str = "layernorm"
    epsilon: float = 1e-6
    use_bias: bool = False
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x):
        assert self.layernorm_type == "rmsnorm" and not self.use_bias
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.dtype)
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features), self.dtype)
        return (_rms(x, scale, self.epsilon) @ kernel).astype(x.dtype), None


class _DenseGeneral(nn.Module):
    features: int
    use_bias: bool = True
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x):
        assert not self.use_bias
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features), self.dtype)
        return (x.astype(jnp.float32) @ kernel).astype(x.dtype)


class _LayerNormMLP(nn.Module):
    intermediate_dim: int = 2048
    layernorm_type: str = "layernorm"
    epsilon: float = 1e-6
    activations: tuple = ("gelu",)
    use_bias: bool = False
    intermediate_dropout_rate: float = 0.1
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, deterministic=False):
        assert self.layernorm_type == "rmsnorm" and not self.use_bias and self.intermediate_dropout_rate == 0.0
        d, acts = x.shape[-1], tuple(self.activations)
        scale = self.param("scale", nn.initializers.ones, (d,), self.dtype)
        wi = self.param("wi_kernel", nn.initializers.lecun_normal(), (d, len(acts), self.intermediate_dim),
                        self.dtype)
        wo = self.param("wo_kernel", nn.initializers.lecun_normal(), (self.intermediate_dim, d), self.dtype)
        h = jnp.einsum("bsd,dkf->bskf", _rms(x, scale, self.epsilon), wi)
        fns = {"silu": nn.silu, "linear": lambda t: t}
        z = fns[acts[0]](h[:, :, 0]) * fns[acts[1]](h[:, :, 1])
        return (z @ wo).astype(x.dtype), None


@pytest.fixture
def te_standins(monkeypatch):
    flax_mod = types.ModuleType("transformer_engine.jax.flax")
    flax_mod.LayerNormDenseGeneral, flax_mod.DenseGeneral = _LayerNormDenseGeneral, _DenseGeneral
    flax_mod.LayerNormMLP = _LayerNormMLP
    jax_mod = types.ModuleType("transformer_engine.jax")
    jax_mod.flax = flax_mod
    root = types.ModuleType("transformer_engine")
    root.jax = jax_mod
    for name, mod in (("transformer_engine", root), ("transformer_engine.jax", jax_mod),
                      ("transformer_engine.jax.flax", flax_mod)):
        monkeypatch.setitem(sys.modules, name, mod)


def test_te_model_params_are_the_converters_tree(te_standins):
    tokens = jnp.zeros((1, 8), jnp.int32)
    shapes = jax.eval_shape(te_model.TeLlama(TINY).init, jax.random.key(0), tokens)["params"]
    expected = te_model.to_te_flax(init_weights(TINY, 0), TINY)
    assert jax.tree.map(lambda a: a.shape, shapes) == jax.tree.map(lambda a: a.shape, expected)


def test_te_model_wiring_matches_the_plain_model_in_float32(te_standins):
    """Same weights, float32: the TE model's head split, RoPE, attention, SwiGLU order and
    residuals are the plain model's (the stand-ins differ from TE only in the kernels)."""
    weights = init_weights(TINY, 1)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, TINY.vocab_size, (2, 16)), jnp.int32)
    from parallax.engines.jax.convert import to_flax

    with jax.default_matmul_precision("highest"):
        plain = Llama(TINY, dtype=jnp.float32).apply({"params": to_flax(weights, TINY)}, tokens)
        te = te_model.TeLlama(TINY, dtype=jnp.float32).apply({"params": te_model.to_te_flax(weights, TINY)}, tokens)
    np.testing.assert_allclose(np.asarray(te), np.asarray(plain), rtol=1e-5, atol=1e-5)
    # swapping gate and up changes the output: the test can see the order
    swapped = te_model.to_te_flax(weights, TINY)
    for i in range(TINY.n_layers):
        swapped[f"layers_{i}"]["mlp"]["wi_kernel"] = swapped[f"layers_{i}"]["mlp"]["wi_kernel"][:, ::-1]
    with jax.default_matmul_precision("highest"):
        wrong = te_model.TeLlama(TINY, dtype=jnp.float32).apply({"params": swapped}, tokens)
    assert np.abs(np.asarray(wrong) - np.asarray(plain)).max() > 1e-3


# ---- the hooks with a fake TE -------------------------------------------------------------------

class _Format(enum.Enum):
    E4M3 = 0
    HYBRID = 1


@dataclass
class DelayedScaling:
    fp8_format: _Format = _Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"


def _fake_te(version="2.20.2", supported=(True, None)):
    calls = []

    @contextlib.contextmanager
    def autocast(enabled=False, recipe=None, mesh_resource=None):
        calls.append({"enabled": enabled, "recipe": recipe, "mesh_resource": mesh_resource})
        yield

    quantize = types.SimpleNamespace(
        NVTE_FP8_COLLECTION_NAME="fp8_metas", ScalingMode=types.SimpleNamespace(DELAYED_TENSOR_SCALING="delayed"),
        is_scaling_mode_supported=lambda mode, gpu_id=None: supported if mode == "delayed" else (False, "?"))
    return types.SimpleNamespace(__version__=version, quantize=quantize, autocast=autocast,
                                 MeshResource=lambda: "empty-mesh", calls=calls)


@pytest.fixture
def fake_te(monkeypatch):
    te = _fake_te()
    monkeypatch.setattr(te_hooks, "import_te", lambda: te)
    monkeypatch.setattr(te_hooks, "import_te_recipes",
                        lambda: types.SimpleNamespace(DelayedScaling=DelayedScaling, Format=_Format))
    return te


def _hooks(name):
    return registry.get("jax", name).load_hooks()


def test_the_recipes_and_their_registry_entries():
    fp8, bf16 = registry.get("jax", "te-fp8-delayed"), registry.get("jax", "te-bf16")
    assert fp8.implemented and bf16.implemented and fp8.format == "fp8" and bf16.format == "bf16"
    assert fp8.min_cc == (8, 9) and bf16.min_cc == (8, 0) and not fp8.cpu and not bf16.cpu
    assert fp8.backend.extra == bf16.backend.extra == "te-jax"
    assert fp8.backend.distributions == (("transformer_engine_jax",),)
    torch_te = registry.get("torch", "te-fp8-delayed").params
    for key in ("fp8_format", "amax_history_len", "amax_compute_algo"):
        assert fp8.params[key] == torch_te[key]  # both frameworks' TE cells run one recipe
    assert (fp8.params["amax_history_len"], fp8.params["amax_compute_algo"]) == (1024, "max")
    assert not registry.default("jax", "fp8").name.startswith("te")  # the JAX default stays Flax fp8


def test_fp8_hooks_label_and_details(fake_te):
    hooks = _hooks("te-fp8-delayed")
    info = for_recipe(registry.get("jax", "te-fp8-delayed"), hooks).info
    assert (info.precision, info.recipe, info.backend) == ("fp8", "te-fp8-delayed", "transformer_engine.jax")
    d = info.details
    assert (d["te_version"], d["te_recipe"], d["fp8_format"]) == ("2.20.2", "DelayedScaling", "HYBRID")
    assert (d["amax_history_len"], d["amax_compute_algo"]) == (1024, "max")
    assert d["collections"] == ["fp8_metas"] and d["params"]["collection"] == "fp8_metas"
    assert d["compute_dtype"] == "bfloat16" and "lm_head in bf16" in d["not_quantized"]
    assert hooks.extra_collections() == ("fp8_metas",)
    assert [name for _, name in hooks.quantized_kernels(TINY)] == [n for _, n in te_model.quantized_kernels(TINY)]
    assert hooks.dot_general_cls() is None


def test_bf16_hooks_quantize_nothing_and_carry_no_collection(fake_te):
    hooks = _hooks("te-bf16")
    d = hooks.details()
    assert d["te_recipe"] is None and d["collections"] == [] and d["quantized"] == "nothing"
    assert "fp8_format" not in d and hooks.extra_collections() == () and hooks.quantized_kernels(TINY) == []


@pytest.mark.parametrize("name, enabled", [("te-fp8-delayed", True), ("te-bf16", False)])
def test_context_is_te_autocast_with_an_empty_mesh(fake_te, name, enabled):
    hooks = _hooks(name)
    with hooks.context():
        pass
    (call,) = fake_te.calls
    assert call["enabled"] is enabled and call["mesh_resource"] == "empty-mesh"
    if enabled:
        assert call["recipe"] == DelayedScaling(_Format.HYBRID, 1024, "max")
    else:
        assert call["recipe"] is None


def test_the_model_and_converters_are_te_s(fake_te):
    hooks = _hooks("te-fp8-delayed")
    assert isinstance(hooks.model(TINY, jnp.bfloat16, "xla"), te_model.TeLlama)
    weights = init_weights(TINY, 0)
    back = hooks.from_params(hooks.to_params(weights, TINY), TINY)
    assert all(np.array_equal(back[k], weights[k]) for k in weights)


def _device():
    return types.SimpleNamespace(platform="gpu", id=0, compute_capability="9.0", device_kind="NVIDIA H200")


def _run(**kw):
    base = dict(framework="jax", recipe="te-fp8-delayed", precision=None, model="tiny", batch_size=4,
                seq_len=128, steps=3, warmup=1, device="gpu")
    return RunConfig(**{**base, **kw})


def test_check_passes_on_a_supported_gpu(fake_te):
    _hooks("te-fp8-delayed").check(_device(), _run())
    _hooks("te-bf16").check(_device(), _run(recipe="te-bf16"))


def test_check_refuses_what_te_cannot_run(monkeypatch, fake_te):
    hooks = _hooks("te-fp8-delayed")
    with pytest.raises(ParallaxError, match=r"TE fp8 needs batch·seq divisible by 8; 3·5 = 15 is not"):
        hooks.check(_device(), _run(batch_size=3, seq_len=5))
    monkeypatch.setattr(te_hooks, "import_te", lambda: _fake_te(supported=(False, "Device compute capability 8.9 or higher required")))
    with pytest.raises(ParallaxError, match="TransformerEngine cannot run fp8 on .*capability 8.9 or higher required"):
        hooks.check(_device(), _run())
    monkeypatch.setattr(te_hooks, "import_te", lambda: _fake_te(version="2.8.0"))
    for name in ("te-fp8-delayed", "te-bf16"):
        with pytest.raises(ParallaxError, match=r"needs TransformerEngine 2.9\+ for JAX .* this is 2.8.0: "
                                                r"pip install -U 'slm-parallax\[te-jax\]'"):
            _hooks(name).check(_device(), _run(recipe=name))


# ---- capability and the command line, without TE ---------------------------------------------

def test_check_env_names_the_te_jax_extra():
    from parallax.plan import capability as cap
    from unit.test_capability import GPU_PACKAGES, H200, cell

    for name in ("te-bf16", "te-fp8-delayed"):
        missing = cell("jax", name, H200)
        assert missing.status == "unavailable"
        assert missing.reason.startswith("transformer_engine_jax not installed; pip install 'slm-parallax[te-jax]'")
        assert cell("jax", name, H200, dict(GPU_PACKAGES, transformer_engine_jax="2.20.2")).status == "native"
    assert cap.capability(registry.get("jax", "te-fp8-delayed"),
                          *_a100_with_te()).reason.startswith("te-fp8-delayed needs compute capability 8.9+")


def _a100_with_te():
    from unit.test_capability import A100, GPU_PACKAGES

    return A100, dict(GPU_PACKAGES, transformer_engine_jax="2.20.2")


def _cli(tmp_path, setup: str) -> subprocess.CompletedProcess:
    script = (f"import sys; sys.modules['transformer_engine'] = None\n{setup}\n"
              "from parallax.cli import main\n"
              "sys.exit(main(['train', '--framework', 'jax', '--recipe', 'te-fp8-delayed', '--model', 'tiny',"
              f" '--steps', '3', '--warmup', '1', '--output-dir', {str(tmp_path / 'run')!r}]))")
    import os

    env = {**{k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)


def _one_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_cli_without_te_on_a_gpu_names_the_extra(tmp_path):
    # A fresh interpreter without TransformerEngine whose JAX "sees" an H200: the missing
    # library is the one line, before any GPU work.
    fake_gpu = ("import types, parallax.engines.jax.runtime as rt\n"
                "rt.resolve_device = lambda name: types.SimpleNamespace(platform='gpu', id=0, "
                "compute_capability='9.0', device_kind='NVIDIA H200')")
    assert _one_line(_cli(tmp_path, fake_gpu)) == (
        "parallax: error: transformer_engine.jax is not installed; install it with: pip install 'slm-parallax[te-jax]'")
    assert not (tmp_path / "run" / "run.json").exists()


def test_cli_without_te_on_the_cpu_says_the_gpu_first(tmp_path):
    # As for TE torch: on the CPU the first thing wrong is the missing GPU.
    assert _one_line(_cli(tmp_path, "")) == (
        "parallax: error: recipe 'te-fp8-delayed' needs an NVIDIA GPU of compute capability 8.9+; "
        "this run is on the CPU (use --recipe flax-fp8-delayed: what --precision fp8 picks here)")
    assert not (tmp_path / "run" / "run.json").exists()


def test_the_engine_trains_the_te_model_through_the_hooks(te_standins, fake_te):
    """The engine's path for a recipe with its own model (build, convert, context, guard), on
    the CPU with the stand-ins and te-bf16's hooks: the plan is made by hand, since the engine
    refuses TE recipes on the CPU."""
    import jax as _jax

    from fixtures.batches import RepeatedBatch
    from parallax.spec.config import OptimConfig
    from parallax.data.synthetic import synthetic_batch
    from parallax.engines.base import NullProgress, Plan
    from parallax.engines.jax.training import train
    from parallax.engines.jax.recipes.select import on_device

    recipe = registry.get("jax", "te-bf16")
    precision = on_device(for_recipe(recipe, recipe.load_hooks()), "cpu")
    device = _jax.devices("cpu")[0]
    run = RunConfig(framework="jax", recipe="te-bf16", precision=None, model="tiny", batch_size=2, seq_len=32,
                    steps=6, warmup=1, device="cpu", optim=OptimConfig(lr=3e-3, lr_warmup_steps=0))
    plan = Plan(recipe=recipe, precision=precision.info, device="cpu:0",
                handles={"device": device, "precision": precision})
    batch = synthetic_batch(0, 0, 2, 32, TINY.vocab_size)
    out = train(run, plan, RepeatedBatch(batch), NullProgress())
    losses = [s.loss for s in out.steps]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert out.extra["extra_collections"] == [] and out.extra["quantized_parameters"] == []
    assert [c["enabled"] for c in fake_te.calls] == [False]  # the whole run in one TE context
