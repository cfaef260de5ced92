"""torchao's emulated MXFP8 training recipe (torchao-mxfp8-emulated) against Parallax's MX
quantization where both claim the same rule: torchao's ``MXTensor.to_mx`` (E4M3, 32-blocks, the
FLOOR and RCEIL scale modes) gives the E8M0 scales and values of ``torch.ops.parallax.mx_quantize``
(floor, rceil) bit for bit; and a linear converted by the recipe's hooks computes y = Q(x)·Q(W)ᵀ
with exactly those quantized operands (float32 GEMMs; only the summation order may differ)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao.prototype.moe_training")

from parallax import quant  # noqa: E402

if not quant.available_bindings()["torch_op"]:
    pytest.skip("parallax._native is not built", allow_module_level=True)

import parallax.quant.torch_ops  # noqa: E402,F401
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import MXTensor  # noqa: E402

MODES = {"floor": ScaleCalculationMode.FLOOR, "rceil": ScaleCalculationMode.RCEIL}


def tensor(rows=64, cols=256, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * 2.0 ** torch.randint(-30, 30, (rows, cols // 32), generator=g) \
        .repeat_interleave(32, 1)
    x[3, :32] *= 1000  # an outlier block
    x[5, 0] = 500.0  # above 448 at the floor rule's scale: saturates
    return x


@pytest.mark.parametrize("rule", list(MODES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_torchao_to_mx_is_our_mx_quantization(rule, dtype):
    x = tensor().to(dtype)
    theirs = MXTensor.to_mx(x, torch.float8_e4m3fn, 32, scaling_mode=MODES[rule])
    y, _, scales = torch.ops.parallax.mx_quantize(x.float(), "e4m3", rule)
    np.testing.assert_array_equal(theirs.scale.view(torch.uint8).reshape(scales.shape).numpy(), scales.numpy())
    np.testing.assert_array_equal(theirs.dequantize(torch.float32).view(torch.int32).numpy(),
                                  y.view(torch.int32).numpy())


def test_the_recipe_linear_multiplies_our_quantized_operands():
    from parallax.spec import registry

    hooks = registry.get("torch", "torchao-mxfp8-emulated").load_hooks()
    model = torch.nn.Sequential(torch.nn.Linear(96, 64, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(tensor(64, 96, seed=1) * 1e-3)
    w = model[0].weight.detach().clone()
    assert hooks.convert(model) == ["0"] and hooks.quantized(model) == ["0.weight"]
    x = tensor(32, 96, seed=2).to(torch.bfloat16)
    y = model(x)
    q = lambda a: torch.ops.parallax.mx_qdq(a.float().contiguous(), None, "e4m3", "rceil")  # noqa: E731
    want = q(x) @ q(w).t()
    np.testing.assert_allclose(y.detach().float().numpy(), want.numpy(), rtol=1e-5, atol=1e-6 * want.abs().max().item())
    y.float().sum().backward()
    assert torch.isfinite(model[0].weight.grad).all() and model[0].weight.grad.abs().sum() > 0
