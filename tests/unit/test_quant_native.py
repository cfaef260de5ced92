"""The NVFP4 / FP8 CPU reference in parallax._native against an independent NumPy version of
the arithmetic documented in csrc/quant/nvfp4.h and csrc/quant/minifloat.h: RNE results and
the stochastic-rounding codes must be bit-identical; the Hadamard transform too."""

from __future__ import annotations

import numpy as np
import pytest

_native = pytest.importorskip("parallax._native", reason="parallax._native is not built")


def test_the_native_module_has_the_quant_functions():
    """A stale build (made before csrc/quant) fails here instead of skipping every test below."""
    missing = [f for f in ("quant_nvfp4", "quant_nvfp4_codes", "quant_fp8", "hadamard16", "quant_hash32")
               if not hasattr(_native, f)]
    assert not missing, f"parallax._native lacks {missing}: rebuild it (make setup, or pip install -e .)"

F32 = np.float32
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
G = np.uint64(0x9E3779B97F4A7C15)

# Positive finite magnitudes in code order, built from the bit layout.
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)
E4M3 = np.array([(c & 7) * 2.0**-9 if c >> 3 == 0 else (8 + (c & 7)) * 2.0 ** ((c >> 3) - 10)
                 for c in range(0x7F)], dtype=np.float64)


def nearest_even(m: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index of the nearest table entry to each magnitude m (ties: even index), saturating."""
    m = np.minimum(m.astype(np.float64), table[-1])
    i = np.clip(np.searchsorted(table, m, side="left"), 1, len(table) - 1)
    lo, hi = i - 1, i
    dlo, dhi = m - table[lo], table[hi] - m
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.where(m == table[hi], hi, pick)


def e4m3_round(v: np.ndarray) -> np.ndarray:
    return E4M3[nearest_even(np.abs(v), E4M3)].astype(F32) * np.sign(v).astype(F32)


def mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hash32(seed: int, index: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        k = mix64(np.array([seed], dtype=np.uint64) + G)
        return (mix64(k + index.astype(np.uint64) * G) >> np.uint64(32)).astype(np.uint32)


def ref_nvfp4(x: np.ndarray, mode: str = "1x16", stochastic: bool = False, seed: int = 0):
    rows, cols = x.shape
    bh = 16 if mode == "16x16" else 1
    fin = np.abs(x[np.isfinite(x)])
    amax = fin.max() if fin.size else F32(0)
    sg = F32(1) if amax == 0 else F32(amax) / F32(2688)
    tiles = np.abs(x).reshape(rows // bh, bh, cols // 16, 16)
    amax_b = tiles.max(axis=(1, 3)).astype(F32)
    d = e4m3_round((amax_b / F32(6)) / sg)
    d_el = np.repeat(np.repeat(d, bh, axis=0), 16, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = x / (d_el * sg)
    if stochastic:
        m = np.minimum(np.abs(v), F32(6))
        lo = np.searchsorted(E2M1, m, side="right") - 1
        lo = np.clip(lo, 0, 7)
        on_grid = E2M1[lo].astype(F32) == m
        hi = np.minimum(lo + 1, 7)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = (m - E2M1[lo].astype(F32)) / (E2M1[hi].astype(F32) - E2M1[lo].astype(F32))
        idx = np.arange(rows * cols, dtype=np.uint64).reshape(rows, cols)
        u = (hash32(seed, idx) >> np.uint32(8)).astype(F32) * F32(2.0**-24)
        mag = np.where(on_grid, lo, np.where(u < p, hi, lo))
    else:
        mag = nearest_even(np.abs(v), E2M1)
    q = E2M1[mag].astype(F32) * np.where(np.signbit(v), F32(-1), F32(1))
    y = (q * d_el) * sg
    return np.where(d_el == 0, F32(0), y).astype(F32), d


def butterfly16(x: np.ndarray, signs: np.ndarray, inverse: bool) -> np.ndarray:
    v = x.reshape(-1, 16).astype(F32).copy()
    if not inverse:
        v = v * signs
    stride = 1
    while stride < 16:
        i = np.array([k for k in range(16) if not k & stride])
        a, b = v[:, i].copy(), v[:, i + stride].copy()
        v[:, i], v[:, i + stride] = a + b, a - b
        stride *= 2
    v = v * F32(0.25)
    if inverse:
        v = v * signs
    return v.reshape(x.shape)


@pytest.fixture
def x():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((32, 64)) * rng.uniform(0.01, 10, (32, 1))).astype(F32)


@pytest.mark.parametrize("mode", ["1x16", "16x16"])
def test_rne_matches_numpy_reference_exactly(x, mode):
    y, codes, scales, sg = _native.quant_nvfp4_codes(x, mode)
    ref, d = ref_nvfp4(x, mode)
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(_native.quant_nvfp4(x, mode), ref)
    np.testing.assert_array_equal(_native.fp8_decode(scales, "e4m3"), d)
    assert sg == F32(np.abs(x).max()) / F32(2688)
    assert codes.shape == (32, 32) and scales.shape == ((32 if mode == "1x16" else 2), 4)


@pytest.mark.parametrize("mode", ["1x16", "16x16"])
def test_stochastic_matches_numpy_reference_and_is_seeded(x, mode):
    a = _native.quant_nvfp4(x, mode, True, 123)
    np.testing.assert_array_equal(a, ref_nvfp4(x, mode, True, 123)[0])
    np.testing.assert_array_equal(a, _native.quant_nvfp4(x, mode, stochastic=True, seed=123))
    assert not np.array_equal(a, _native.quant_nvfp4(x, mode, stochastic=True, seed=124))


def test_hash_matches_documented_formula():
    idx = np.arange(100, dtype=np.uint64)
    assert [_native.quant_hash32(42, int(i)) for i in idx] == hash32(42, idx).tolist()


def test_edge_cases_and_errors():
    z = np.zeros((2, 32), F32)
    y, codes, scales, sg = _native.quant_nvfp4_codes(z)
    assert sg == 1.0 and not codes.any() and not scales.any() and not y.any()
    with pytest.raises(ValueError, match="multiple of 16"):
        _native.quant_nvfp4(np.ones((2, 20), F32))
    with pytest.raises(ValueError, match="multiple of 16"):
        _native.quant_nvfp4(np.ones((8, 32), F32), "16x16")
    with pytest.raises(ValueError, match="mode"):
        _native.quant_nvfp4(np.ones((2, 32), F32), "2x16")
    n = np.ones((1, 32), F32)
    n[0, 3] = np.nan
    y = _native.quant_nvfp4(n)
    assert np.isnan(y[0, :16]).all() and np.isfinite(y[0, 16:]).all()


def test_fp8_matches_table():
    rng = np.random.default_rng(1)
    v = (rng.standard_normal(4096) * 100).astype(F32)
    np.testing.assert_array_equal(_native.quant_fp8(v, "e4m3"), e4m3_round(v))
    np.testing.assert_array_equal(_native.quant_fp8(v, "e4m3", 2.0), e4m3_round(v / F32(2)) * F32(2))
    codes = np.arange(256, dtype=np.uint8)
    for fmt in ("e4m3", "e5m2"):
        dec = _native.fp8_decode(codes, fmt)
        back = _native.fp8_encode(dec, fmt)
        finite = ~np.isnan(dec)
        np.testing.assert_array_equal(back[finite], codes[finite])


def test_hadamard_matches_butterfly_and_inverts(x):
    signs = np.where(hash32(7, np.arange(16, dtype=np.uint64)) >> np.uint32(31), F32(-1), F32(1))
    h = _native.hadamard16(x, 7)
    np.testing.assert_array_equal(h, butterfly16(x, signs, False))
    back = _native.hadamard16(h, 7, inverse=True)
    np.testing.assert_array_equal(back, butterfly16(h, signs, True))
    assert np.linalg.norm(back - x) <= 1e-6 * np.linalg.norm(x)
    H = np.array([[(-1) ** bin(i & j).count("1") for j in range(16)] for i in range(16)]) / 4.0
    np.testing.assert_allclose(h.reshape(-1, 16), (x.reshape(-1, 16) * signs) @ H.T, rtol=1e-5, atol=1e-5)
