"""The CUDA quantization kernels through both framework bindings on a real GPU (run on the
device; skipped elsewhere): torch op on CUDA == torch op on CPU == JAX FFI on the GPU, bit for
bit, RNE and SR with the same seed; torch's current stream is the one used; misaligned and
non-contiguous inputs; the benchmark script end to end at a small size."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from parallax import quant  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
VARIANTS = [(mode, sr, rht) for mode in ("1x16", "16x16") for sr in (False, True) for rht in (False, True)]


@pytest.fixture(scope="module", autouse=True)
def cuda_kernels():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    if not quant.available_bindings()["cuda"]:
        pytest.fail("parallax._native was built without the CUDA kernels on a GPU machine: rebuild with nvcc "
                    "(pip install --no-build-isolation --no-deps -e .)", pytrace=False)
    from parallax.quant import torch_ops  # noqa: F401


def bindings_test():
    spec = importlib.util.spec_from_file_location("qb", ROOT / "tests/unit/test_quant_bindings.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@pytest.fixture(scope="module")
def qb():
    return bindings_test()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("mode,sr,rht", VARIANTS)
def test_cuda_op_is_the_cpu_op(qb, mode, sr, rht, dtype):
    x = qb.edge_tensor(256, 768).to(dtype)
    cpu = torch.ops.parallax.nvfp4_quantize(x, mode, sr, 1234, rht, 99)
    gpu = torch.ops.parallax.nvfp4_quantize(x.cuda(), mode, sr, 1234, rht, 99)
    torch.cuda.synchronize()
    for a, b in zip(cpu, gpu):
        assert qb.same(a, b.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("sr,rht", [(sr, rht) for sr in (False, True) for rht in (False, True)])
def test_cuda_16x1_is_the_cpu_op(qb, sr, rht, dtype):
    """The 16x1 kernels (csrc/quant/qdq_columns.h) against the CPU, plain and counter-seeded, on
    a tensor whose planted blocks run down the columns and on llama-100m's wgrad shape."""
    for x in (qb.column_edge_tensor(256, 768).to(dtype), torch.randn(32768, 768).to(dtype)):
        cpu = torch.ops.parallax.nvfp4_qdq(x, "16x1", sr, 1234, rht, 99)
        gpu = torch.ops.parallax.nvfp4_qdq(x.cuda(), "16x1", sr, 1234, rht, 99)
        counter = torch.tensor([7], dtype=torch.int32)
        cpu_c = torch.ops.parallax.nvfp4_qdq_counter(x, counter, "16x1", sr, 1234, rht, 99)
        gpu_c = torch.ops.parallax.nvfp4_qdq_counter(x.cuda(), counter.cuda(), "16x1", sr, 1234, rht, 99)
        torch.cuda.synchronize()
        assert qb.same(cpu, gpu.cpu()) and qb.same(cpu_c, gpu_c.cpu())


def test_every_1x16_schedule_is_the_cpu_op(qb):
    """The single-read 1x16 kernel (keeping groups in shared memory or relying on L2) and the
    two-kernel path give the CPU's bits, on an edge tensor and on llama-100m's activation shape
    (more groups than the resident blocks keep); the schedule asked for is the one that ran."""
    n = quant.native()
    try:
        for x in (qb.edge_tensor(256, 768), torch.randn(32768, 768)):
            for dtype in (torch.float32, torch.bfloat16):
                for sr, rht in ((False, False), (True, False), (False, True), (True, True)):
                    xd = x.to(dtype)
                    cpu = torch.ops.parallax.nvfp4_quantize(xd, "1x16", sr, 1234, rht, 99)
                    for fused, hold, ran in ((0, 0, 0), (1, 0, 1), (1, 1, 1), (-1, -1, 0)):  # -1: the default
                        n.quant_cuda_set_schedule(fused, hold)
                        gpu = torch.ops.parallax.nvfp4_quantize(xd.cuda(), "1x16", sr, 1234, rht, 99)
                        assert n.quant_cuda_last_schedule() == ran
                        torch.cuda.synchronize()
                        for a, b in zip(cpu, gpu):
                            assert qb.same(a, b.cpu()), (dtype, sr, rht, fused, hold)
    finally:
        n.quant_cuda_set_schedule(-1, -1)


@pytest.mark.parametrize("mode,sr,rht", [("1x16", True, False), ("16x1", True, True), ("16x1", False, True),
                                         ("16x16", False, False)])
def test_cuda_parts_op_is_the_cpu_op(qb, mode, sr, rht):
    """The in-place column parts (wqkv's dY: three parts of 768 on llama-100m's token count)."""
    x = torch.randn(32768, 3 * 768).to(torch.bfloat16)
    counter, seeds = torch.tensor([9], dtype=torch.int32), [3, 2**40, 12345]
    cpu = torch.ops.parallax.nvfp4_qdq_parts(x, counter, seeds, mode, sr, rht, 99)
    gpu = torch.ops.parallax.nvfp4_qdq_parts(x.cuda(), counter.cuda(), seeds, mode, sr, rht, 99)
    torch.cuda.synchronize()
    assert qb.same(cpu, gpu.cpu())


def test_cuda_hadamard_and_fp8_are_the_cpu_ops(qb):
    x = qb.edge_tensor(128, 256)
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        for inverse in (False, True):
            assert qb.same(torch.ops.parallax.hadamard16(xd.cuda(), 5, inverse).cpu(),
                           torch.ops.parallax.hadamard16(xd, 5, inverse))
        for fmt, scale in (("e4m3", 0.01), ("e5m2", 3.0)):
            flat = xd.reshape(-1)[:-3]  # n not a multiple of 8
            assert qb.same(torch.ops.parallax.fp8_qdq(flat.cuda(), fmt, scale).cpu(),
                           torch.ops.parallax.fp8_qdq(flat, fmt, scale))


def test_runs_on_torchs_current_stream_and_takes_any_layout(qb):
    x = qb.edge_tensor(64, 256).cuda()
    ref = torch.ops.parallax.nvfp4_qdq(x, "1x16", True, 3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = torch.ops.parallax.nvfp4_qdq(x, "1x16", True, 3)
    side.synchronize()
    assert qb.same(y, ref)
    buf = torch.empty(x.numel() + 1, device="cuda")
    shifted = buf[1:].view_as(x).copy_(x)  # 4-byte offset: not 16-byte aligned
    assert qb.same(torch.ops.parallax.nvfp4_qdq(shifted, "1x16", True, 3), ref)
    assert qb.same(torch.ops.parallax.nvfp4_qdq(x.t().contiguous().t().contiguous(), "1x16", True, 3), ref)


def test_torch_compile_with_the_cuda_op(qb):
    x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)

    def f(a):
        return torch.ops.parallax.nvfp4_qdq(a * 2, "16x16", False, 0, True, 1) - a

    assert qb.same(torch.compile(f, fullgraph=True)(x), f(x))


def test_jax_ffi_on_the_gpu_is_the_torch_op(qb):
    jax = pytest.importorskip("jax")
    if not quant.available_bindings()["jax_ffi"]:
        pytest.skip("no JAX FFI handlers in this build")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    from parallax.quant import jax_ffi

    x = qb.edge_tensor(256, 768)
    for dtype in (torch.float32, torch.bfloat16):
        for mode, sr, rht in VARIANTS:
            xd = x.to(dtype)
            got = jax.jit(lambda a: jax_ffi.nvfp4_quantize(a, mode, sr, 1234, rht, 99))(qb.to_jax(xd))
            want = torch.ops.parallax.nvfp4_quantize(xd, mode, sr, 1234, rht, 99)
            for a, b in zip(got, want):
                assert qb.same(qb.from_jax(a), b), (dtype, mode, sr, rht)
        for sr, rht in qb.COLUMN_VARIANTS:
            xd = qb.column_edge_tensor(256, 768).to(dtype)
            got = jax.jit(lambda a: jax_ffi.nvfp4_qdq(a, "16x1", sr, 1234, rht, 99))(qb.to_jax(xd))
            assert qb.same(qb.from_jax(got), torch.ops.parallax.nvfp4_qdq(xd, "16x1", sr, 1234, rht, 99)), (dtype, sr, rht)


@pytest.mark.parametrize("legacy", [False, True], ids=["current", "previous"])
def test_prefetch_tails_and_the_previous_kernels_are_the_cpu_op(qb, legacy):
    """The bf16 1x16 quantize kernel holds two groups (the next loading while one is quantized,
    its loop unrolled twice) and 16x1 caps its registers: one group, fewer groups than a block
    has threads, and 401,408 groups (2 or 3 a thread on an H200's persistent grid: both exits of
    the unrolled loop), in every SR/RHT variant, against the CPU; the same with the previous
    kernels (quant_cuda_set_legacy), which must give the same bits. (The CPU reference takes
    ~8 s per 32768 x 2048 tensor: the recipe's widths are covered by the 32768 x 768 tests.)"""
    n = quant.native()
    if not hasattr(n, "quant_cuda_set_legacy"):
        pytest.skip("this build has no previous kernels to compare")
    try:
        n.quant_cuda_set_legacy(legacy)
        for sr, rht in ((False, False), (True, False), (False, True), (True, True)):
            for shape in ((1, 16), (37, 80), (8192, 784)):  # edge_tensor: >= 8 x 80
                x = (qb.edge_tensor(*shape) if shape[0] > 1 else torch.randn(*shape)).to(torch.bfloat16)
                cpu = torch.ops.parallax.nvfp4_quantize(x, "1x16", sr, 1234, rht, 99)
                gpu = torch.ops.parallax.nvfp4_quantize(x.cuda(), "1x16", sr, 1234, rht, 99)
                torch.cuda.synchronize()
                for a, b in zip(cpu, gpu):
                    assert qb.same(a, b.cpu()), (shape, sr, rht)
            for x in (qb.column_edge_tensor(96, 34), qb.column_edge_tensor(1024, 770)):
                xd = x.to(torch.bfloat16)
                counter = torch.tensor([3], dtype=torch.int32)
                cpu = torch.ops.parallax.nvfp4_qdq_counter(xd, counter, "16x1", sr, 1234, rht, 99)
                gpu = torch.ops.parallax.nvfp4_qdq_counter(xd.cuda(), counter.cuda(), "16x1", sr, 1234, rht, 99)
                torch.cuda.synchronize()
                assert qb.same(cpu, gpu.cpu()), (tuple(x.shape), sr, rht)
    finally:
        n.quant_cuda_set_legacy(False)


def test_cuda_parts_of_the_recipes_other_fused_linear(qb):
    """w_gate_up's dY: two parts of 2048 (on 4096 tokens: the CPU reference is slow), 1x16 SR
    (dgrad) and 16x1+RHT SR (wgrad), in place, each part as the CPU quantizes it alone."""
    x = torch.randn(4096, 2 * 2048).to(torch.bfloat16)
    counter, seeds = torch.tensor([4], dtype=torch.int32), [5, 2**33 + 1]
    for mode, rht in (("1x16", False), ("16x1", True)):
        cpu = torch.ops.parallax.nvfp4_qdq_parts(x, counter, seeds, mode, True, rht, 99)
        gpu = torch.ops.parallax.nvfp4_qdq_parts(x.cuda(), counter.cuda(), seeds, mode, True, rht, 99)
        torch.cuda.synchronize()
        assert qb.same(cpu, gpu.cpu()), mode


def test_benchmark_script_runs_small():
    spec = importlib.util.spec_from_file_location("quant_bench", ROOT / "scripts/device/quant_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.run(1024, 768, warmup=2, iters=5)
    old = (bench.LEGACY,) if bench.has_legacy(quant.native()) else ()
    schedules = {v: (tuple(bench.SCHEDULES) if k["mode"] == "1x16" else ("native",)) for v, k in bench.VARIANTS.items()}
    assert {(r["variant"], r["impl"]) for r in rows} == (
        {(v, i) for v in bench.VARIANTS for i in (*schedules[v], *old, "torch_eager", "torch_compile")}
        | {(v, i) for v in ("1x16-sr", "16x1+rht-sr", "parts-sr") for i in ("native", *old)}
        | {("parts-sr", "split_cat"), ("copy", "torch_copy")})
    assert all(r["shape"] == ([1024, 3 * 768] if r["variant"] == "parts-sr" else [1024, 768]) for r in rows)
    # every implementation but PyTorch eager replays from a CUDA graph (ms: device time per call);
    # the eager math copies a host tensor to the GPU, which capture refuses, and says so
    assert [r.get("graph_error") for r in rows if r["impl"] != "torch_eager"] == [None] * (len(rows) - 4)
    assert all("CUDA graph capture" in r["graph_error"] for r in rows if r["impl"] == "torch_eager")
    assert all(r["ms"] > 0 for r in rows if r["impl"] != "torch_eager") and all(r["call_ms"] > 0 for r in rows)
    assert all(r["identical_to_native"] == 1.0 for r in rows if r["impl"].startswith("native") or r["impl"] == "split_cat")
    assert all(r["speedup_vs_old"] > 0 for r in rows if old and r["impl"] == "native")
    quick = bench.run(None, None, warmup=1, iters=5, buffers=1, quick=True)
    assert {(r["variant"], tuple(r["shape"])) for r in quick} == {
        (v, (s[0], s[1] * bench.NATIVE_ONLY.get(v, {}).get("parts", 1))) for v, shapes in bench.RECIPE.items()
        for s in shapes}
    assert all(r["identical_to_native"] == 1.0 for r in quick if r["impl"].startswith("native"))
