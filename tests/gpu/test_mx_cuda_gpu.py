"""The MX CUDA kernel (csrc/quant/quant_cuda.cu mx_kernel) through both framework bindings on a real
GPU (run on the device; skipped elsewhere): the torch op on CUDA gives the CPU op's bits (codes,
E8M0 scales, values; float32 and bf16; every element format, both scale rules, RNE and SR, with the
step counter read on the device), and JAX on the GPU gives the same bits. Seconds:
``pytest -q -m gpu tests/gpu/test_mx_cuda_gpu.py``."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from parallax import quant  # noqa: E402

VARIANTS = [(e, r, sr) for e in quant.MX_ELEMS for r in quant.MX_RULES for sr in (False, True)]


@pytest.fixture(scope="module", autouse=True)
def cuda_kernels():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    if not quant.available_bindings()["cuda"]:
        pytest.fail("parallax._native was built without the CUDA kernels on a GPU machine: rebuild with nvcc "
                    "(pip install --no-build-isolation --no-deps -e .)", pytrace=False)
    from parallax.quant import torch_ops  # noqa: F401


def edge_tensor(rows: int = 512, cols: int = 768) -> torch.Tensor:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(-60, 60, (rows, cols // 32)).repeat(32, 1))
    x = x.astype(np.float32)
    x[1, 3], x[2, 40], x[3, 70] = np.nan, np.inf, -np.inf
    x[4, :32] = 0.0
    x[5, :32] = -0.0
    x[6, :32] = np.float32(1e-42)  # float subnormals
    x[7, 0] = 500.0  # saturates under the floor rule
    return torch.from_numpy(x)


def bits(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32).numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("elem,rule,sr", VARIANTS)
def test_cuda_op_is_the_cpu_op(elem, rule, sr, dtype):
    x = edge_tensor().to(dtype)
    cpu = torch.ops.parallax.mx_quantize(x, elem, rule, sr, 1234)
    gpu = torch.ops.parallax.mx_quantize(x.cuda(), elem, rule, sr, 1234)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(gpu[0]), bits(cpu[0]))
    for a, b in zip(cpu[1:], gpu[1:]):
        np.testing.assert_array_equal(b.cpu().numpy(), a.numpy())
    counter = torch.tensor([7], dtype=torch.int32)
    c_cpu = torch.ops.parallax.mx_qdq(x, counter, elem, rule, sr, 99)
    c_gpu = torch.ops.parallax.mx_qdq(x.cuda(), counter.cuda(), elem, rule, sr, 99)
    np.testing.assert_array_equal(bits(c_gpu), bits(c_cpu))


def test_jax_on_the_gpu_is_the_torch_cpu_op():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    from parallax.quant import jax_ffi

    x = edge_tensor()
    for elem, rule, sr in VARIANTS:
        want = torch.ops.parallax.mx_qdq(x, None, elem, rule, sr, 5)
        got = jax_ffi.mx_qdq(jax.device_put(x.numpy(), jax.devices("gpu")[0]), elem, rule, sr, 5)
        np.testing.assert_array_equal(np.asarray(got).view(np.int32), bits(want))


@pytest.mark.parametrize("scheme_name", ["MXFP8", "MXFP4"])
def test_the_emulated_linears_operands_on_cuda_are_the_cpus(scheme_name):
    """Every GEMM operand of the torch emulated MX linear (spec/mx_scheme.py) on the GPU, the step
    counter on the device, gives the CPU's bits (the CPU's are JAX's: tests/unit/test_mx_emulated.py)."""
    from parallax.quant import torch_mx_linear as tl
    from parallax.spec import mx_scheme
    from parallax.spec import nvfp4_scheme as seeds

    s = getattr(mx_scheme, scheme_name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 192, generator=g).to(torch.bfloat16)
    w = torch.randn(3 * 64, 192, generator=g) * 0.05
    dy = (torch.randn(256, 3 * 64, generator=g) * 1e-3).to(torch.bfloat16)
    pairs = tuple((seeds.operand_seed(3, 1, p, 0), seeds.operand_seed(3, 1, p, 1)) for p in ("wq", "wk", "wv"))
    out = {}
    for device in ("cpu", "cuda"):
        counter = torch.tensor([4], dtype=torch.int32, device=device)
        xd, wd, dyd = x.to(device), w.to(device), dy.to(device)
        out[device] = {**tl.forward_operands(xd, wd, s),
                       **tl.backward_operands(xd, dyd, counter, pairs, seeds.rht_seed(3), s)}
    torch.cuda.synchronize()
    for name, cpu in out["cpu"].items():
        np.testing.assert_array_equal(bits(out["cuda"][name]), bits(cpu), err_msg=name)
