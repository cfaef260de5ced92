"""The emulated MX recipes (spec/mx_scheme.py): the torch and JAX emulated linears on the same inputs
and seed quantize every GEMM operand to the same bits (MXFP8 and MXFP4), their y, dX, dW agree
within the bf16-GEMM tolerance, each operand is the MX quantization the scheme states (along the
GEMM's reduction dimension), the step counter redraws only the stochastic rounding, and both engines
train the tiny preset on the CPU (torch emulated-mxfp4, JAX emulated-mxfp8)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy

from parallax import quant  # noqa: E402
from parallax.spec import mx_scheme  # noqa: E402
from parallax.spec import nvfp4_scheme as seeds  # noqa: E402

if not quant.available_bindings()["jax_ffi"]:
    pytest.skip("this build has no JAX FFI handlers", allow_module_level=True)

from parallax.quant import jax_mx_linear as jl  # noqa: E402
from parallax.quant import torch_mx_linear as tl  # noqa: E402

M, K, WIDTH = 64, 96, 32  # tokens, in-features, features per canonical part
PARTS = ("wq", "wk", "wv")
RUN_SEED, LAYER = 11, 2
SCHEMES = {"mxfp8": mx_scheme.MXFP8, "mxfp4": mx_scheme.MXFP4}
_ops = torch.ops.parallax


def bits(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.contiguous().view(torch.int16).numpy()
    return np.asarray(t).view(np.int16)


def inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    x[3, :32] *= 40.0  # an outlier block
    w = rng.standard_normal((len(PARTS) * WIDTH, K), dtype=np.float32) * 0.05
    dy = rng.standard_normal((M, len(PARTS) * WIDTH), dtype=np.float32) * 1e-3
    to_bf16 = lambda a: torch.from_numpy(a).to(torch.bfloat16)  # noqa: E731
    return to_bf16(x), torch.from_numpy(w), to_bf16(dy)


def jax_bf16(t: torch.Tensor):
    return jnp.asarray(t.view(torch.int16).numpy().view(jnp.bfloat16))


def torch_seeds():
    return tuple((seeds.operand_seed(RUN_SEED, LAYER, p, seeds.DGRAD_DY),
                  seeds.operand_seed(RUN_SEED, LAYER, p, seeds.WGRAD_DY)) for p in PARTS)


def jax_seeds(part: str):
    return (seeds.operand_seed(RUN_SEED, LAYER, part, seeds.DGRAD_DY),
            seeds.operand_seed(RUN_SEED, LAYER, part, seeds.WGRAD_DY), seeds.rht_seed(RUN_SEED))


@pytest.fixture(scope="module", params=list(SCHEMES))
def both(request):
    """Operands and results of torch's fused linear and JAX's three Dense ops, one scheme."""
    s = SCHEMES[request.param]
    x, w, dy = inputs()
    counter = torch.tensor([5], dtype=torch.int32)
    t = {**tl.forward_operands(x, w, s), **tl.backward_operands(x, dy, counter, torch_seeds(), seeds.rht_seed(RUN_SEED), s)}
    wt = w.detach().clone().requires_grad_(True)
    xt = x.detach().clone().requires_grad_(True)
    y = tl.MxLinearFunction.apply(xt, wt, counter, torch_seeds(), seeds.rht_seed(RUN_SEED), s)
    y.backward(dy)
    t.update({"y": y.detach(), "dx": xt.grad, "dw": wt.grad})
    jx, jdy = jax_bf16(x), jax_bf16(dy)
    j = {k: [] for k in ("xq", "wq", "wt", "dy", "xw", "dyw", "y", "dx", "dk")}
    for i, part in enumerate(PARTS):
        kernel = jnp.asarray(w[i * WIDTH:(i + 1) * WIDTH].numpy().T).astype(jnp.bfloat16)
        f = jl.forward_operands(jx, kernel, s)
        q = jl.backward_operands(jx, jdy[:, i * WIDTH:(i + 1) * WIDTH], jnp.float32(5), jax_seeds(part), s)
        yj, vjp = jax.vjp(lambda a, b: jl.mx_linear(a, b, jnp.float32(5), jax_seeds(part), s), jx, kernel)
        dx, dk = vjp(jdy[:, i * WIDTH:(i + 1) * WIDTH])
        for key, value in (*f.items(), *q.items(), ("y", yj), ("dx", dx), ("dk", dk.T)):
            j[key].append(value)
    cat = jnp.concatenate
    jax_side = {"xq": j["xq"][0], "wq": cat(j["wq"], 0), "wt": cat(j["wt"], 0), "dy": cat(j["dy"], 1),
                "xw": j["xw"][0], "dyw": cat(j["dyw"], 0), "y": cat(j["y"], 1),
                "dx": sum(a.astype(jnp.float32) for a in j["dx"]), "dw": cat(j["dk"], 0)}
    return s, t, jax_side


@pytest.mark.parametrize("operand", ["xq", "wq", "wt", "dy", "xw", "dyw"])
def test_torch_and_jax_quantize_every_gemm_operand_to_the_same_bits(both, operand):
    _, t, j = both
    assert t[operand].dtype == torch.bfloat16 and j[operand].dtype == jnp.bfloat16
    assert tuple(t[operand].shape) == j[operand].shape
    np.testing.assert_array_equal(bits(t[operand]), bits(j[operand]))
    assert np.count_nonzero(bits(t[operand])) > 0.7 * t[operand].numel()  # real values, not zeros


def test_each_operand_is_the_mx_quantization_along_its_reduction_dimension(both):
    s, t, _ = both
    x, w, dy = inputs()
    q = lambda a, **kw: _ops.mx_qdq(a.contiguous(), None, s.elem, s.rule, **kw)  # noqa: E731
    np.testing.assert_array_equal(bits(t["xq"]), bits(q(x)))  # along K
    np.testing.assert_array_equal(bits(t["wt"]), bits(q(w.to(torch.bfloat16).t()).t()))  # along N
    xt = x.t().contiguous()
    if s.wgrad_rht:
        xt = _ops.hadamard16(xt, seeds.rht_seed(RUN_SEED), False)
    np.testing.assert_array_equal(bits(t["xw"]), bits(q(xt)))  # along the tokens
    if s.grad_sr:  # per canonical part, its own seed, counter-derived
        part = dy[:, WIDTH:2 * WIDTH]
        want = _ops.mx_qdq(part.contiguous(), torch.tensor([5], dtype=torch.int32), s.elem, s.rule, True,
                           torch_seeds()[1][seeds.DGRAD_DY])
        np.testing.assert_array_equal(bits(t["dy"][:, WIDTH:2 * WIDTH]), bits(want))
    else:
        np.testing.assert_array_equal(bits(t["dy"]), bits(q(dy)))


def test_forward_dgrad_and_wgrad_agree_within_the_bf16_gemm_tolerance(both):
    _, t, j = both
    f = lambda v: v.float().numpy()  # noqa: E731
    ref_y = f(t["xq"]) @ f(t["wq"]).T
    for got in (f(t["y"]), np.asarray(j["y"], dtype=np.float32)):
        np.testing.assert_allclose(got, ref_y, rtol=2.0**-7, atol=2.0**-7 * np.abs(ref_y).max())
    ref_dx = f(t["dy"]) @ f(t["wt"])
    np.testing.assert_allclose(f(t["dx"]), ref_dx, rtol=2.0**-7, atol=2.0**-7 * np.abs(ref_dx).max())
    np.testing.assert_allclose(np.asarray(j["dx"]), ref_dx, rtol=2.0**-6, atol=2.0**-6 * np.abs(ref_dx).max())
    ref_dw = f(t["dyw"]) @ f(t["xw"]).T
    for got in (t["dw"].numpy(), np.asarray(j["dw"], dtype=np.float32)):
        np.testing.assert_allclose(got, ref_dw, rtol=2.0**-7, atol=2.0**-7 * np.abs(ref_dw).max())
    exact = f(inputs()[2]).T @ f(inputs()[0])  # the RHT cancels: dW near the unquantized dYᵀX
    assert np.linalg.norm(t["dw"].numpy() - exact) < 0.35 * np.linalg.norm(exact)


def test_the_step_counter_redraws_only_the_stochastic_rounding():
    s = mx_scheme.MXFP4
    x, _, dy = inputs()
    at = lambda c: tl.backward_operands(x, dy, torch.tensor([c], dtype=torch.int32), torch_seeds(),  # noqa: E731
                                        seeds.rht_seed(RUN_SEED), s)
    a, b, again = at(0), at(1), at(0)
    assert (bits(a["dy"]) != bits(b["dy"])).mean() > 0.05
    np.testing.assert_array_equal(bits(a["xw"]), bits(b["xw"]))
    np.testing.assert_array_equal(bits(a["dyw"]), bits(again["dyw"]))


def test_recipes_record_their_scheme_and_refuse_shapes_that_32_blocks_do_not_tile():
    from parallax.errors import ParallaxError
    from parallax.spec import registry
    from parallax.spec.config import RunConfig

    for fw in ("torch", "jax"):
        assert mx_scheme.from_params(registry.get(fw, "emulated-mxfp8").params) == mx_scheme.MXFP8
        assert mx_scheme.from_params(registry.get(fw, "emulated-mxfp8-floor").params) == mx_scheme.MXFP8_FLOOR
        mxfp4 = mx_scheme.from_params(registry.get(fw, "emulated-mxfp4").params)
        assert mxfp4[:4] == mx_scheme.MXFP4[:4] and mxfp4.bf16_last_fraction == pytest.approx(1 / 6, abs=1e-6)
    run = RunConfig.for_preset("tiny", framework="torch", precision="mxfp8", batch_size=1, seq_len=48, device="cpu")
    with pytest.raises(ParallaxError, match="batch·seq divisible by 32"):
        mx_scheme.check_shapes("emulated-mxfp8", run)


# ---- both engines, end to end


@pytest.mark.parametrize("framework,precision", [("torch", "mxfp4"), ("jax", "mxfp8")])
def test_the_tiny_preset_trains_emulated(framework, precision, tmp_path):
    from parallax.spec.config import RunConfig
    from parallax.run.train import run_training

    run = RunConfig.for_preset("tiny", framework=framework, precision=precision, steps=3, warmup=1, device="cpu",
                               batch_size=2, seq_len=32, output_dir=str(tmp_path)).validate()
    assert run.recipe == f"emulated-{precision}"
    run_training(run)
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["status"] == "ok", data.get("error")
    info = data["precision"]
    assert info["recipe"] == f"emulated-{precision}" and info["precision"] == precision
    assert info["native"] is False
    assert np.isfinite(data["loss"]["first"]) and np.isfinite(data["loss"]["final"])
