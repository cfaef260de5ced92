"""MX quantization (OCP Microscaling v1.0; csrc/quant/mx.h) in parallax._native against an
independent NumPy reference written from the specification: element grids built from the bit
layouts, the E8M0 scale by its definition (floor: 2^(floor(log2 amax) - emax); rceil: the
smallest 2^k with amax <= max_elem * 2^k), round to nearest even with saturation, stochastic
rounding from the documented hash. Codes, scales and values must be bit-identical: every
representable value, saturation, zero/NaN/inf blocks, random tensors."""

from __future__ import annotations

import numpy as np
import pytest

_native = pytest.importorskip("parallax._native", reason="parallax._native is not built")
if not hasattr(_native, "quant_mx_codes"):
    pytest.fail("parallax._native lacks quant_mx_codes: rebuild it (pip install --no-build-isolation -e .)")

F32 = np.float32
G = np.uint64(0x9E3779B97F4A7C15)


def grid(mbits: int, bias: int, n_codes: int) -> np.ndarray:
    """Magnitudes of codes 0..n_codes-1 of a sign-magnitude minifloat (subnormals at exponent 0)."""
    c = np.arange(n_codes)
    e, f = c >> mbits, c & ((1 << mbits) - 1)
    return np.where(e == 0, f * 2.0 ** (1 - bias - mbits), (1 + f / 2**mbits) * 2.0 ** (e - bias))


# element: (magnitudes of the finite codes, emax of the largest normal, sign bit)
ELEMS = {"e4m3": (grid(3, 7, 0x7F), 8, 0x80), "e5m2": (grid(2, 15, 0x7C), 15, 0x80), "e2m1": (grid(1, 1, 8), 2, 0x8)}


def scale_exponent(amax: float, elem: str, rule: str) -> int:
    table, emax, _ = ELEMS[elem]
    if amax == 0:
        return -127
    if rule == "floor":
        k = int(np.floor(np.log2(float(amax)))) - emax
        while 2.0 ** (k + emax) > amax:  # exact corrections of the float64 log
            k -= 1
        while 2.0 ** (k + emax + 1) <= amax:
            k += 1
    else:
        top = table[-1]
        k = int(np.ceil(np.log2(float(amax) / top)))
        while top * 2.0**k < amax:
            k += 1
        while top * 2.0 ** (k - 1) >= amax:
            k -= 1
    return max(-127, min(127, k))


def mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniform(seed: int, index: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        k = mix64(np.array([seed], dtype=np.uint64) + G)
        h = (mix64(k + index.astype(np.uint64) * G) >> np.uint64(32)).astype(np.uint64)
    return (h >> np.uint64(8)).astype(np.float64) * 2.0**-24


def round_codes(m: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Nearest magnitude code of m >= 0, ties to the even code, saturating at the last code."""
    m = np.minimum(m, table[-1])
    hi = np.clip(np.searchsorted(table, m, side="left"), 1, len(table) - 1)
    lo = hi - 1
    dlo, dhi = m - table[lo], table[hi] - m
    return np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))


def sr_codes(m: np.ndarray, table: np.ndarray, u: np.ndarray) -> np.ndarray:
    m = np.minimum(m, table[-1])
    lo = np.searchsorted(table, m, side="right") - 1
    hi = np.minimum(lo + 1, len(table) - 1)
    step = table[hi] - table[lo]
    p = np.where(step > 0, (m - table[lo]) / np.where(step > 0, step, 1), 0.0).astype(F32)
    return np.where(u < p, hi, lo)


def ref_mx(x: np.ndarray, elem: str, rule: str, stochastic: bool = False, seed: int = 0):
    """(y float32, codes uint8, scales uint8) of a float32 [rows, cols] matrix."""
    table, _, sign_bit = ELEMS[elem]
    rows, cols = x.shape
    blocks = x.reshape(-1, 32).astype(np.float64)
    y = np.empty_like(blocks)
    codes = np.zeros(blocks.shape, dtype=np.uint8)
    scales = np.zeros(len(blocks), dtype=np.uint8)
    u = uniform(seed, np.arange(x.size)).reshape(-1, 32) if stochastic else None
    for b, v in enumerate(blocks):
        if not np.all(np.isfinite(v)):
            scales[b], y[b] = 0xFF, np.nan
            continue
        k = scale_exponent(np.abs(v).max(), elem, rule)
        scales[b] = k + 127
        m = np.abs(v) / 2.0**k  # exact
        mag = sr_codes(m, table, u[b]) if stochastic else round_codes(m, table)
        neg = np.signbit(v)
        codes[b] = mag + np.where(neg, sign_bit, 0)
        y[b] = np.where(neg, -1.0, 1.0) * table[mag] * 2.0**k
    return y.astype(F32).reshape(rows, cols), codes.reshape(rows, cols), scales.reshape(rows, cols // 32)


def assert_same(x, elem, rule, stochastic=False, seed=0):
    y, codes, scales = _native.quant_mx_codes(np.ascontiguousarray(x, dtype=F32), elem, rule, stochastic, seed)
    ry, rcodes, rscales = ref_mx(x, elem, rule, stochastic, seed)
    np.testing.assert_array_equal(scales, rscales)
    np.testing.assert_array_equal(codes, rcodes)
    np.testing.assert_array_equal(y.view(np.uint32), ry.view(np.uint32))  # bits: signed zeros, NaN payload


def all_values(elem: str, k: int) -> np.ndarray:
    """Every finite element value (both signs) times 2^k, in blocks led by max_elem * 2^k."""
    table = ELEMS[elem][0]
    vals = np.concatenate([table, -table])
    rows = [np.concatenate([[table[-1]], vals[i:i + 31]]) for i in range(0, len(vals), 31)]
    rows = [np.pad(r, (0, 32 - len(r))) for r in rows]
    return (np.stack(rows) * 2.0**k).astype(F32).reshape(1, -1)


@pytest.mark.parametrize("elem", list(ELEMS))
@pytest.mark.parametrize("rule", ["floor", "rceil"])
def test_every_representable_value_round_trips(elem, rule):
    for k in (-127, -20, 0, 7, 100):
        x = all_values(elem, k)
        assert_same(x, elem, rule)
        y, _, scales = _native.quant_mx_codes(x, elem, rule)
        np.testing.assert_array_equal(y.view(np.uint32), x.view(np.uint32))
        assert np.all(scales == k + 127)


@pytest.mark.parametrize("elem", list(ELEMS))
def test_scale_codes_of_both_rules_at_every_binade_edge(elem):
    table, emax, _ = ELEMS[elem]
    probes = [0.0, 2.0**-149, 2.0**-127, F32(3.4e38)]
    for k in range(-150, 128, 3):
        for base in (1.0, 1.5, 1.75, table[-1]):
            a = F32(base * 2.0**k) if base * 2.0**k < 3.4e38 else F32(0)
            probes += [a, np.nextafter(a, F32(0)), np.nextafter(a, F32(np.inf))]
    for rule in ("floor", "rceil"):
        got = [_native.quant_mx_scale_code(float(a), elem, rule) for a in probes]
        want = [scale_exponent(float(a), elem, rule) + 127 for a in probes]
        assert got == want


def test_rceil_never_saturates_and_floor_does():
    x = np.full((1, 32), 1.0, dtype=F32)
    x[0, 0] = 500.0  # above E4M3's 448 at the floor rule's scale 2^0
    y_floor, codes, scales = _native.quant_mx_codes(x, "e4m3", "floor")
    assert scales[0, 0] == 127 and codes[0, 0] == 0x7E and y_floor[0, 0] == 448.0
    y_ceil, codes, scales = _native.quant_mx_codes(x, "e4m3", "rceil")
    assert scales[0, 0] == 128 and y_ceil[0, 0] == 512.0  # 250 -> 256 at scale 2
    assert_same(x, "e4m3", "floor")
    assert_same(x, "e4m3", "rceil")
    x4 = np.linspace(-7.9, 7.9, 32, dtype=F32).reshape(1, 32)  # E2M1: floor gives scale 1, |x| > 6 clips
    y4, _, _ = _native.quant_mx_codes(x4, "e2m1", "floor")
    assert y4.max() == 6.0 and y4.min() == -6.0
    assert_same(x4, "e2m1", "floor")


def test_zero_nan_and_inf_blocks():
    x = np.ones((2, 64), dtype=F32)
    x[0, :32] = np.where(np.arange(32) % 2, -0.0, 0.0)
    x[0, 40] = np.nan
    x[1, 3] = np.inf
    for elem in ELEMS:
        y, codes, scales = _native.quant_mx_codes(x, elem, "rceil")
        assert scales[0, 0] == 0 and scales[0, 1] == 0xFF and scales[1, 0] == 0xFF and scales[1, 1] != 0xFF
        np.testing.assert_array_equal(y[0, :32].view(np.uint32), x[0, :32].view(np.uint32))
        assert np.isnan(y[0, 32:]).all() and np.isnan(y[1, :32]).all() and (codes[0, 32:] == 0).all()
        np.testing.assert_array_equal(y[1, 32:], 1.0)
        assert_same(x, elem, "floor")


@pytest.mark.parametrize("elem", list(ELEMS))
@pytest.mark.parametrize("rule", ["floor", "rceil"])
@pytest.mark.parametrize("stochastic", [False, True])
def test_random_tensors(elem, rule, stochastic):
    rng = np.random.default_rng(hash((elem, rule, stochastic)) % 2**32)
    x = (rng.standard_normal((16, 128)) * 2.0 ** rng.integers(-40, 40, (16, 1))).astype(F32)
    x[3, 5] *= 1e4  # an outlier block
    x[7, :32] = rng.standard_normal(32).astype(F32) * 2.0**-140  # subnormal-range values
    assert_same(x, elem, rule, stochastic, seed=99)


def test_stochastic_rounding_keeps_grid_values_and_depends_on_the_seed():
    x = np.full((64, 32), 1.1, dtype=F32)
    x[:, 0] = 448.0
    a = _native.quant_mx_codes(x, "e4m3", "rceil", True, 1)[0]
    b = _native.quant_mx_codes(x, "e4m3", "rceil", True, 2)[0]
    assert set(np.unique(a[:, 1:])) == {1.0, 1.125} and (a != b).any()
    assert abs(a[:, 1:].mean() - 1.1) < 0.005  # unbiased: E[y] = x
    np.testing.assert_array_equal(a[:, 0], 448.0)


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="multiple of 32"):
        _native.quant_mx_codes(np.zeros((2, 48), F32))
    with pytest.raises(ValueError, match="elem"):
        _native.quant_mx_codes(np.zeros((2, 32), F32), "e3m2")
    with pytest.raises(ValueError, match="rule"):
        _native.quant_mx_codes(np.zeros((2, 32), F32), "e4m3", "nearest")
