"""The framework bindings of the native quantization kernels on the CPU (issue 11's identity
target in CI): torch.ops.parallax.* == the native CPU functions == the JAX FFI custom call, bit
for bit, for RNE and stochastic rounding with the same seed; torch.compile keeps the op opaque;
shapes that 16-blocks do not tile fail clearly; the pure-PyTorch math of the benchmark equals
the native function. NaN compares as NaN (torch's own bf16 casts differ in NaN payload)."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
_native = pytest.importorskip("parallax._native", reason="parallax._native is not built")

from parallax import quant  # noqa: E402

if not hasattr(_native, "quant_bindings"):
    pytest.fail("parallax._native predates quant_bindings(): rebuild it (make setup, or pip install -e .)",
                pytrace=False)

from parallax.quant import torch_ops  # noqa: E402,F401  (registers torch.ops.parallax)

ROOT = pathlib.Path(__file__).resolve().parents[2]
VARIANTS = [(mode, sr, rht) for mode in ("1x16", "16x16") for sr in (False, True) for rht in (False, True)]


def edge_tensor(rows=64, cols=256, seed=0) -> torch.Tensor:
    """Blocks of magnitudes 2^-20..2^20 with a zero block, a -0.0 block, NaN, ±inf, float
    subnormals and an E2M1-midpoint block at denominator 1 (tensor amax 2688)."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp2(torch.randint(-20, 21, (rows, cols // 16, 1), generator=g).float())
    x = (torch.randn(rows, cols // 16, 16, generator=g) * scale).reshape(rows, cols)
    x[0, 0] = 2688.0
    x[1, 16:32] = torch.tensor([0.25, -0.75, 1.25, -1.75, 2.5, -3.5, 5.0, -6.0] * 2)
    x[2, :16] = 0.0
    x[3, :16] = -0.0
    x[4, :16] = torch.tensor(np.arange(1, 17, dtype=np.uint32) * 4099).view(torch.float32)
    x[5, 3] = float("nan")
    x[6, 40] = float("inf")
    x[7, 70] = float("-inf")
    return x


def same(a, b) -> bool:
    """Bit-identical, NaN equal to NaN."""
    a = torch.as_tensor(np.asarray(a)) if not isinstance(a, torch.Tensor) else a
    b = torch.as_tensor(np.asarray(b)) if not isinstance(b, torch.Tensor) else b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    ia = a.view(torch.int16 if a.element_size() == 2 else torch.int32)
    ib = b.view(ia.dtype)
    return bool(((ia == ib) | (torch.isnan(a) & torch.isnan(b))).all())


def native_nvfp4(x: torch.Tensor, mode, sr, seed, rht, rht_seed):
    """The native CPU functions called directly (float32 NumPy), cast back like the op."""
    a = x.reshape(-1, x.shape[-1]).float().numpy()
    if rht:
        a = _native.hadamard16(a, rht_seed, False)
    y, codes, scales, sg = _native.quant_nvfp4_codes(a, mode, sr, seed)
    return torch.from_numpy(y).to(x.dtype).reshape(x.shape), torch.from_numpy(codes), torch.from_numpy(scales), sg


def test_available_bindings_names_every_binding():
    b = quant.available_bindings()
    assert set(b) == {"cpu", "cuda", "torch_op", "jax_ffi"}
    assert b["cpu"] and b["torch_op"]
    assert all(isinstance(v, bool) for v in b.values())
    assert b["cuda"] == _native.quant_bindings()["cuda"] == hasattr(_native, "quant_nvfp4_cuda")


def test_the_cuda_ops_look_their_kernels_up_once(monkeypatch):
    """available_bindings() searches the import path (~0.1 ms): looked up per call, it was the
    largest host cost of an op the emulated recipe calls ~300 times a step."""
    from parallax.quant import torch_ops

    calls = []
    monkeypatch.setattr(torch_ops, "available_bindings", lambda: calls.append(1) or {"cuda": True})
    monkeypatch.setattr(torch_ops, "native", lambda: _native)
    torch_ops._cuda_kernels.cache_clear()
    try:
        assert [torch_ops._cuda_native() for _ in range(3)] == [_native] * 3
        assert len(calls) == 1
        torch_ops._cuda_kernels.cache_clear()
        monkeypatch.setattr(torch_ops, "available_bindings", lambda: {"cuda": False})
        with pytest.raises(RuntimeError, match="this build has no CUDA kernels"):
            torch_ops._cuda_native()
    finally:
        torch_ops._cuda_kernels.cache_clear()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("mode,sr,rht", VARIANTS)
def test_torch_op_on_cpu_is_the_native_function(mode, sr, rht, dtype):
    x = edge_tensor().to(dtype)
    y, codes, scales, ws = torch.ops.parallax.nvfp4_quantize(x, mode, sr, 1234, rht, 99)
    ry, rc, rs, sg = native_nvfp4(x, mode, sr, 1234, rht, 99)
    assert same(y, ry) and same(codes, rc) and same(scales, rs)
    assert ws[1].item() == sg
    assert same(torch.ops.parallax.nvfp4_qdq(x, mode, sr, 1234, rht, 99), ry)


COLUMN_VARIANTS = [(sr, rht) for sr in (False, True) for rht in (False, True)]


def column_edge_tensor(rows=256, cols=64, seed=0) -> torch.Tensor:
    """edge_tensor transposed: its planted blocks run down the columns."""
    return edge_tensor(cols, rows, seed).t().contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("sr,rht", COLUMN_VARIANTS)
def test_16x1_is_1x16_of_the_transpose_transposed_back(sr, rht, dtype):
    x = column_edge_tensor().to(dtype)
    want = torch.ops.parallax.nvfp4_qdq(x.t().contiguous(), "1x16", sr, 1234, rht, 99).t()
    assert same(torch.ops.parallax.nvfp4_qdq(x, "16x1", sr, 1234, rht, 99), want)
    counter = torch.tensor([3], dtype=torch.int32)
    assert same(torch.ops.parallax.nvfp4_qdq_counter(x, counter, "16x1", sr, 1234, rht, 99),
                torch.ops.parallax.nvfp4_qdq_counter(x.t().contiguous(), counter, "1x16", sr, 1234, rht, 99).t())
    if not sr:
        from parallax.quant.torch_reference import hadamard_signs, nvfp4_qdq_reference

        assert same(nvfp4_qdq_reference(x, "16x1", hadamard_signs(99) if rht else None), want)


def test_16x1_refuses_codes_and_shapes_it_cannot_tile():
    with pytest.raises(ValueError, match="16x1 gives the dequantized values only"):
        torch.ops.parallax.nvfp4_quantize(torch.zeros(32, 16), "16x1")
    with pytest.raises(ValueError, match=r"16x1 blocks need the leading dimensions' product \(24\)"):
        torch.ops.parallax.nvfp4_qdq(torch.zeros(24, 16), "16x1")
    with pytest.raises(ValueError, match=r"and the last dimension \(7\) even"):
        torch.ops.parallax.nvfp4_qdq(torch.zeros(32, 7), "16x1")
    assert torch.ops.parallax.nvfp4_qdq(torch.ones(16, 6), "16x1").shape == (16, 6)  # any even width


def test_leading_dimensions_are_rows():
    x = edge_tensor(64, 128)
    assert same(torch.ops.parallax.nvfp4_qdq(x.reshape(4, 16, 128), "16x16"),
                torch.ops.parallax.nvfp4_qdq(x, "16x16").reshape(4, 16, 128))


def test_stochastic_rounding_depends_on_the_seed_only():
    x = torch.randn(32, 64)
    a, b = (torch.ops.parallax.nvfp4_qdq(x, "1x16", True, 5) for _ in range(2))
    assert same(a, b)
    assert not same(a, torch.ops.parallax.nvfp4_qdq(x, "1x16", True, 6))


def test_hadamard_and_fp8_ops_on_cpu_are_the_native_functions():
    x = edge_tensor()
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        for inverse in (False, True):
            ref = torch.from_numpy(_native.hadamard16(xd.float().numpy(), 3, inverse)).to(dtype)
            assert same(torch.ops.parallax.hadamard16(xd, 3, inverse), ref)
        for fmt, scale, sat in (("e4m3", 0.01, None), ("e5m2", 2.0, None), ("e5m2", 1e-3, True)):
            ref = torch.from_numpy(_native.quant_fp8(xd.float().numpy(), fmt, scale, sat)).to(dtype)
            assert same(torch.ops.parallax.fp8_qdq(xd, fmt, scale, sat), ref)


@pytest.mark.parametrize("bad", [(4, 24), (3, 8), (2, 16, 17)])
def test_shapes_not_tiled_by_16_blocks_fail_clearly(bad):
    x = torch.zeros(bad)
    with pytest.raises(ValueError, match="multiple of 16"):
        torch.ops.parallax.nvfp4_qdq(x)
    with pytest.raises(ValueError, match="multiple of 16"):
        torch.ops.parallax.hadamard16(x)


def test_16x16_needs_rows_a_multiple_of_16_and_dtypes_seeds_are_checked():
    with pytest.raises(ValueError, match="leading dimensions"):
        torch.ops.parallax.nvfp4_qdq(torch.zeros(8, 32), "16x16")
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        torch.ops.parallax.nvfp4_qdq(torch.zeros(16, 32, dtype=torch.float16))
    with pytest.raises(ValueError, match="seed"):
        torch.ops.parallax.nvfp4_qdq(torch.zeros(16, 32), "1x16", True, -1)
    with pytest.raises(ValueError, match="mode"):
        torch.ops.parallax.nvfp4_qdq(torch.zeros(16, 32), "2x16")


@pytest.mark.parametrize("mode,sr,rht", [("1x16", True, False), ("16x1", True, True), ("16x16", False, False)])
def test_parts_op_quantizes_each_column_part_alone(mode, sr, rht):
    """nvfp4_qdq_parts is nvfp4_qdq_counter on each equal column part with its own seed: each
    part gets its own per-tensor scale (a part of small values keeps them, where one scale for
    the whole tensor would flush them to zero)."""
    x = torch.cat([edge_tensor(64, 128, 1), 1e-6 * torch.randn(64, 128), edge_tensor(64, 128, 3)], dim=1)
    x = x.to(torch.bfloat16)
    counter, seeds = torch.tensor([4], dtype=torch.int32), [5, 2**62, 17]
    got = torch.ops.parallax.nvfp4_qdq_parts(x, counter, seeds, mode, sr, rht, 99)
    for i, s in enumerate(seeds):
        want = torch.ops.parallax.nvfp4_qdq_counter(x[:, 128 * i:128 * (i + 1)].contiguous(), counter, mode, sr, s,
                                                    rht, 99)
        assert same(got[:, 128 * i:128 * (i + 1)], want), i
    small = got[:, 128:256].float()
    assert small.abs().max() > 0 and not same(small, torch.ops.parallax.nvfp4_qdq_counter(
        x, counter, mode, sr, seeds[1], rht, 99)[:, 128:256].float())
    compiled = torch.compile(lambda a: torch.ops.parallax.nvfp4_qdq_parts(a, counter, seeds, mode, sr, rht, 99) * 2,
                             fullgraph=True)
    assert same(compiled(x), got * 2)


def test_parts_op_refuses_what_it_cannot_split():
    x, counter = torch.zeros(32, 96), torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match="do not split into 5 equal parts"):
        torch.ops.parallax.nvfp4_qdq_parts(x, counter, [1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="multiple of 16"):
        torch.ops.parallax.nvfp4_qdq_parts(x, counter, [1, 2, 3, 4])  # parts of 24 columns
    with pytest.raises(ValueError, match="must be 2-D"):
        torch.ops.parallax.nvfp4_qdq_parts(x.reshape(2, 16, 96), counter, [1, 2])
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*63 - 1\]"):
        torch.ops.parallax.nvfp4_qdq_parts(x, counter, [1, -2])


def test_torch_compile_keeps_the_op_opaque():
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x):
        return torch.ops.parallax.nvfp4_qdq(x * 2.0, "1x16", True, 7) + 1.0

    x = torch.randn(32, 64)
    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend=record)(x)
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any(t in (torch.ops.parallax.nvfp4_qdq, torch.ops.parallax.nvfp4_qdq.default) for t in targets), targets
    assert not any("quant_nvfp4" in str(t) for t in targets)  # the native function is not traced into
    assert same(out, f(x))
    torch._dynamo.reset()
    assert same(torch.compile(f, fullgraph=True)(x), f(x))  # inductor, through the fake


def test_pure_torch_reference_equals_the_native_function():
    from parallax.quant.torch_reference import hadamard_signs, nvfp4_qdq_reference

    x = edge_tensor(64, 256, seed=3)
    for dtype in (torch.float32, torch.bfloat16):
        for mode in ("1x16", "16x16"):
            for rht in (False, True):
                xd = x.to(dtype)
                ref = torch.ops.parallax.nvfp4_qdq(xd, mode, False, 0, rht, 11)
                assert same(nvfp4_qdq_reference(xd, mode, hadamard_signs(11) if rht else None), ref), (dtype, mode, rht)


def test_the_benchmark_script_imports_and_renders():
    spec = importlib.util.spec_from_file_location("quant_bench", ROOT / "scripts/device/quant_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert set(bench.VARIANTS) == {"1x16", "16x16", "1x16+rht", "16x1+rht"}
    assert bench.bytes_moved(torch.zeros(32768, 768, dtype=torch.bfloat16)) == 2 * 2 * 32768 * 768
    old = {bench.LEGACY} if bench.has_legacy(quant.native()) else set()
    impls = bench.implementations(torch, "1x16", True, device="cpu")
    assert set(impls) == {"native", "native_1r", "native_1r_l2", "torch_eager", "torch_compile"} | old
    x = edge_tensor().to(torch.bfloat16)
    assert all(same(impls["torch_eager"](x), impls[k](x)) for k in ("native", "native_1r", "native_1r_l2", *old))
    columns = bench.implementations(torch, "16x1", True, device="cpu", eager=True, compiled=False)
    assert set(columns) == {"native", "torch_eager"} | old
    assert same(columns["torch_eager"](x), columns["native"](x))
    parts = bench.native_only(torch, bench.NATIVE_ONLY["parts-sr"], device="cpu")
    wide = torch.cat([x, 2 * x, x / 3], dim=1)
    assert set(parts) == {"native", "split_cat"} | old and same(parts["native"](wide), parts["split_cat"](wide))
    # the plans: one shape, every variant with both PyTorch twins; the recipe's shapes, quick:
    # no eager, torch.compile at each variant's first shape only
    one = bench.plan((1024, 768))
    assert [v for v, *_ in one] == [*bench.VARIANTS, *bench.NATIVE_ONLY]
    assert all(s == (1024, 768) and e == c == (v in bench.VARIANTS) for v, s, e, c in one)
    quick = bench.plan(None, quick=True)
    assert [(v, s) for v, s, *_ in quick] == [(v, s) for v, shapes in bench.RECIPE.items() for s in shapes]
    assert not any(e for _, _, e, _ in quick)
    assert [(v, s) for v, s, _, c in quick if c] == [(v, shapes[0]) for v, shapes in bench.RECIPE.items()
                                                      if v in bench.VARIANTS]
    assert {(32768, 768), (32768, 2048)} <= set(bench.RECIPE["1x16-sr"]) and (768, 2048) in bench.RECIPE["16x16"]
    rows = bench.annotate([
        {"variant": "1x16", "shape": [32768, 768], "impl": "native", "ms": 0.05, "call_ms": 0.134, "gb_s": 2013.3,
         "pct_h200": 41.9, "identical_to_native": 1.0},
        {"variant": "1x16", "shape": [32768, 768], "impl": "native_v1", "ms": 0.06, "call_ms": 0.14, "gb_s": 1677.7,
         "pct_h200": 35.0, "identical_to_native": 1.0},
        {"variant": "1x16", "shape": [32768, 768], "impl": "torch_compile", "ms": None, "call_ms": 0.155,
         "gb_s": 825.8, "pct_h200": 17.2, "identical_to_native": 1.0, "graph_error": "RuntimeError: capture failed"},
        {"variant": "1x16", "shape": [32768, 2048], "impl": "native", "ms": 0.1, "call_ms": 0.2, "gb_s": 2684.4,
         "pct_h200": 55.9, "identical_to_native": 1.0},
        {"variant": "parts-sr", "shape": [32768, 2304], "impl": "split_cat", "ms": 0.5, "call_ms": 0.6, "gb_s": 600.0,
         "pct_h200": 12.5, "identical_to_native": 1.0}])
    assert rows[0]["speedup_vs_compile"] == pytest.approx(0.155 / 0.134) and rows[0]["speedup_basis"] == "per call"
    assert rows[0]["speedup_vs_old"] == pytest.approx(1.2) and rows[1]["speedup_vs_old"] is None
    assert rows[3]["speedup_vs_compile"] is None and rows[3]["speedup_vs_old"] is None  # none at that shape
    assert rows[2]["speedup_vs_old"] is None  # PyTorch's rows have no old side
    table = bench.render(rows).splitlines()
    # B/el: each one's own passes; % bound n/a: no copy row measured
    assert table[4].split() == ["1x16", "32768x768", "native", "0.0500", "2013.3", "41.9%", "6", "n/a", "1.16x",
                                "1.20x", "0.1340", "100.0000%"]
    assert table[6].split()[3] == "n/a" and "no graph (RuntimeError: capture failed)" in table[7]
    assert table[9].split() == ["parts-sr", "32768x2304", "split_cat", "0.5000", "600.0", "12.5%", "14", "n/a", "-",
                                "-", "0.6000", "100.0000%"]
    assert [x for _, x in zip(range(5), bench.rotating([1, 2]))] == [1, 2, 1, 2, 1]


# ---- JAX --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jffi():
    pytest.importorskip("jax")
    if not quant.available_bindings()["jax_ffi"]:
        pytest.skip("this build has no JAX FFI handlers (jaxlib headers not found at build time)")
    from parallax.quant import jax_ffi

    jax_ffi.register()
    return jax_ffi


def to_jax(x: torch.Tensor):
    import jax.numpy as jnp

    return jnp.asarray(x.float().numpy()).astype(jnp.bfloat16 if x.dtype == torch.bfloat16 else jnp.float32)


def from_jax(a) -> torch.Tensor:
    import jax.numpy as jnp

    if a.dtype == jnp.bfloat16:
        return torch.from_numpy(np.asarray(a.view(jnp.uint16)).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.asarray(a).copy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("mode,sr,rht", VARIANTS)
def test_jax_ffi_on_cpu_is_the_torch_op(jffi, mode, sr, rht, dtype):
    import jax

    x = edge_tensor().to(dtype)
    y, codes, scales, ws = jffi.nvfp4_quantize(to_jax(x), mode, sr, 1234, rht, 99)
    ty, tc, ts, tws = torch.ops.parallax.nvfp4_quantize(x, mode, sr, 1234, rht, 99)
    assert same(from_jax(y), ty) and same(from_jax(codes), tc) and same(from_jax(scales), ts)
    assert same(from_jax(ws), tws)
    jitted = jax.jit(lambda a: jffi.nvfp4_qdq(a, mode, sr, 1234, rht, 99))
    assert same(from_jax(jitted(to_jax(x))), ty)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("sr,rht", COLUMN_VARIANTS)
def test_jax_ffi_16x1_on_cpu_is_the_torch_op(jffi, sr, rht, dtype):
    import jax
    import jax.numpy as jnp

    x = column_edge_tensor().to(dtype)
    want = torch.ops.parallax.nvfp4_qdq(x, "16x1", sr, 1234, rht, 99)
    assert same(from_jax(jax.jit(lambda a: jffi.nvfp4_qdq(a, "16x1", sr, 1234, rht, 99))(to_jax(x))), want)
    counter = torch.tensor([5], dtype=torch.int32)
    got = jax.jit(lambda a, c: jffi.nvfp4_qdq_counter(a, c, "16x1", sr, 1234, rht, 99))(to_jax(x), jnp.float32(5))
    assert same(from_jax(got), torch.ops.parallax.nvfp4_qdq_counter(x, counter, "16x1", sr, 1234, rht, 99))
    with pytest.raises(ValueError, match="16x1 gives the dequantized values only"):
        jffi.nvfp4_quantize(to_jax(x), "16x1")


def test_jax_ffi_hadamard_fp8_and_shape_errors(jffi):
    x = edge_tensor()
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        assert same(from_jax(jffi.hadamard16(to_jax(xd), 3, True)), torch.ops.parallax.hadamard16(xd, 3, True))
        assert same(from_jax(jffi.fp8_qdq(to_jax(xd), "e5m2", 0.5)), torch.ops.parallax.fp8_qdq(xd, "e5m2", 0.5))
    with pytest.raises(ValueError, match="multiple of 16"):
        jffi.nvfp4_qdq(to_jax(torch.zeros(4, 24)))
    with pytest.raises(ValueError, match="leading dimensions"):
        jffi.nvfp4_qdq(to_jax(torch.zeros(8, 32)), "16x16")


def test_jax_ffi_keeps_subnormals_on_the_cpu(jffi):
    """A tensor of float subnormals: XLA's CPU threads may flush denormals; the handler must not."""
    x = torch.tensor(np.arange(1, 16 * 32 + 1, dtype=np.uint32) * 977).view(torch.float32).reshape(16, 32)
    assert same(from_jax(jffi.nvfp4_qdq(to_jax(x), "1x16", True, 4)), torch.ops.parallax.nvfp4_qdq(x, "1x16", True, 4))
