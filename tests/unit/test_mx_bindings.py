"""The MX quantize-dequantize through both framework bindings on the CPU (csrc/quant/mx.h): the
torch op equals the native function (float32 and bf16 inputs), the JAX FFI call equals the torch
op bit for bit (every element format, both scale rules, RNE and SR, with and without the step
counter), and bad arguments are one clear error."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from parallax import quant  # noqa: E402

if not quant.available_bindings()["torch_op"]:
    pytest.skip("parallax._native is not built", allow_module_level=True)

from parallax.quant import native, torch_ops  # noqa: E402,F401

VARIANTS = [(e, r, sr) for e in quant.MX_ELEMS for r in quant.MX_RULES for sr in (False, True)]


def tensor(rows: int = 24, cols: int = 96, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-20, 20, (rows, 1))).astype(np.float32)
    x[2, 7] = np.nan
    x[5, 40] = -np.inf
    x[9, :32] = 0.0
    return torch.from_numpy(x)


def bits(t) -> np.ndarray:
    """The bit patterns of a torch or JAX/NumPy float32 or bf16 array."""
    if isinstance(t, torch.Tensor):
        return t.contiguous().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32).numpy()
    a = np.asarray(t)
    return a.view(np.int16 if a.dtype.itemsize == 2 else np.int32)


@pytest.mark.parametrize("elem,rule,sr", VARIANTS)
def test_torch_op_is_the_native_function(elem, rule, sr):
    x = tensor()
    y, codes, scales = torch.ops.parallax.mx_quantize(x, elem, rule, sr, 5)
    ry, rc, rs = native().quant_mx_codes(x.numpy(), elem, rule, sr, 5)
    np.testing.assert_array_equal(bits(y), ry.view(np.int32))
    np.testing.assert_array_equal(codes.numpy(), rc)
    np.testing.assert_array_equal(scales.numpy(), rs)
    xb = x.to(torch.bfloat16)
    yb = torch.ops.parallax.mx_qdq(xb, None, elem, rule, sr, 5)
    wide = native().quant_mx_codes(xb.float().numpy(), elem, rule, sr, 5)[0]
    want = bits(torch.from_numpy(wide).to(torch.bfloat16)).copy()
    want[np.isnan(wide)] = 0x7FC0  # the native NaN (torch's CPU cast would write 0xFFFF)
    np.testing.assert_array_equal(bits(yb), want)
    assert np.isnan(wide).sum() == 64  # the NaN and inf blocks


def test_the_counter_is_the_step_seed():
    x = tensor().reshape(4, 6, 96)  # leading dimensions flatten into rows
    counter = torch.tensor([17], dtype=torch.int32)
    got = torch.ops.parallax.mx_qdq(x, counter, "e2m1", "rceil", True, 3)
    want = native().quant_mx_codes(x.reshape(24, 96).numpy(), "e2m1", "rceil", True, native().quant_step_seed(3, 17))[0]
    assert got.shape == x.shape
    np.testing.assert_array_equal(bits(got).reshape(24, 96), want.view(np.int32))
    other = torch.ops.parallax.mx_qdq(x, counter + 1, "e2m1", "rceil", True, 3)
    assert (bits(got) != bits(other)).mean() > 0.05


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="multiple of 32"):
        torch.ops.parallax.mx_qdq(torch.zeros(4, 48))
    with pytest.raises(ValueError, match="elem must be one of"):
        torch.ops.parallax.mx_qdq(torch.zeros(4, 32), None, "e3m2")
    with pytest.raises(ValueError, match="rule must be one of"):
        torch.ops.parallax.mx_qdq(torch.zeros(4, 32), None, "e4m3", "up")
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        torch.ops.parallax.mx_qdq(torch.zeros(4, 32, dtype=torch.float16))


# ---- JAX

@pytest.fixture(scope="module")
def jax_ffi():
    pytest.importorskip("jax")
    if not quant.available_bindings()["jax_ffi"]:
        pytest.skip("this build has no JAX FFI handlers")
    from parallax.quant import jax_ffi as j

    return j


@pytest.mark.parametrize("elem,rule,sr", VARIANTS)
def test_jax_is_the_torch_op(jax_ffi, elem, rule, sr):
    import jax.numpy as jnp

    x = tensor(seed=1)
    for dtype, jdtype in ((torch.float32, jnp.float32), (torch.bfloat16, jnp.bfloat16)):
        xt = x.to(dtype)
        xj = jnp.asarray(xt.view(torch.int16).numpy().view(jnp.bfloat16)) if dtype == torch.bfloat16 else jnp.asarray(x.numpy())
        ty, tc, ts = torch.ops.parallax.mx_quantize(xt, elem, rule, sr, 8)
        jy, jc, js = jax_ffi.mx_quantize(xj, elem, rule, sr, 8)
        assert jy.dtype == jdtype
        np.testing.assert_array_equal(bits(ty), bits(jy))
        np.testing.assert_array_equal(tc.numpy(), np.asarray(jc))
        np.testing.assert_array_equal(ts.numpy(), np.asarray(js))


def test_jax_counter_matches_torch(jax_ffi):
    import jax
    import jax.numpy as jnp

    x = tensor(seed=2)
    counter = torch.tensor([4], dtype=torch.int32)
    want = torch.ops.parallax.mx_qdq(x, counter, "e4m3", "rceil", True, 21)
    got = jax.jit(lambda a, c: jax_ffi.mx_qdq(a, "e4m3", "rceil", True, 21, c))(jnp.asarray(x.numpy()), jnp.float32(4))
    np.testing.assert_array_equal(bits(want), bits(got))
