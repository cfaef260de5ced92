"""The emulated NVFP4 linear in PyTorch: a ``torch.autograd.Function`` around the opaque
``torch.ops.parallax`` quantize-dequantize ops, and the module that replaces an ``nn.Linear``.
The equations, the seed scheme and why fused linears quantize per canonical part:
``parallax/spec/nvfp4_scheme.py``. The JAX twin is ``jax_nvfp4_linear.py``.

torch.compile traces the Function (its forward and backward become AOTAutograd graphs with the
custom ops as opaque nodes); the seeds are constants of each module and the step counter a
buffer, so the compiled graphs serve every step.
"""

from __future__ import annotations

import torch
from torch import nn

import parallax.quant.torch_ops  # noqa: F401  (registers torch.ops.parallax.*)
from parallax.spec import nvfp4_scheme as scheme

_ops = torch.ops.parallax


def _parts(t: torch.Tensor, n: int, dim: int) -> list[torch.Tensor]:
    return [p.contiguous() for p in t.chunk(n, dim=dim)]


def forward_operands(x2: torch.Tensor, weight: torch.Tensor, n_parts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q(X, 1x16), Q(W, 16x16)) in bf16 for X [M, K] and W [N, K], W's rows in ``n_parts`` equal
    canonical parts quantized alone."""
    xq = _ops.nvfp4_qdq(x2.to(torch.bfloat16), "1x16")
    w = weight.to(torch.bfloat16)
    wq = torch.cat([_ops.nvfp4_qdq(p, "16x16") for p in _parts(w, n_parts, 0)], dim=0)
    return xq, wq


def backward_operands(x2, dy2, counter, seeds, rht_seed) -> dict[str, torch.Tensor]:
    """The backward GEMMs' operands, bf16: 'dy' = Q(dY, 1x16, SR) [M, N] (dgrad); for wgrad,
    'xw' = Q(H(Xᵀ), 1x16)ᵀ [M, K] and 'dyw' = Q(H(dYᵀ), 1x16, SR)ᵀ [M, N], per canonical part:
    quantized along the tokens in 16x1 blocks, in their own layout (no transposed copies; the
    GEMM dW = dywᵀ·xw reads them transposed). dY's canonical parts are quantized in place
    (nvfp4_qdq_parts: no copies of the parts, no concatenation)."""
    dy = dy2.to(torch.bfloat16)
    dyq = _ops.nvfp4_qdq_parts(dy, counter, [s[scheme.DGRAD_DY] for s in seeds], "1x16", True)
    xw = _ops.nvfp4_qdq(x2.to(torch.bfloat16), "16x1", False, 0, True, rht_seed)
    dyw = _ops.nvfp4_qdq_parts(dy, counter, [s[scheme.WGRAD_DY] for s in seeds], "16x1", True, True, rht_seed)
    return {"dy": dyq, "xw": xw, "dyw": dyw}


class Nvfp4LinearFunction(torch.autograd.Function):
    """y = x·Wᵀ on NVFP4-quantized operands (scheme module docstring): the weight in 16×16
    blocks, x in 1×16 blocks; dgrad on SR-quantized dY; wgrad on the RHT'd, SR-quantized dYᵀ and
    the RHT'd Xᵀ (16x1 blocks of dY and X, the same values in their own layout). ``seeds`` holds one (dgrad, wgrad) seed pair per canonical part of W (its rows
    in equal parts: wqkv = wq; wk; wv), each part quantized alone."""

    @staticmethod
    def forward(ctx, x, weight, counter, seeds, rht_seed):
        x2 = x.to(torch.bfloat16).reshape(-1, x.shape[-1])
        xq, wq = forward_operands(x2, weight, len(seeds))
        y = torch.matmul(xq, wq.t())
        ctx.save_for_backward(x2, wq, counter)
        ctx.seeds, ctx.rht_seed, ctx.x_shape, ctx.x_dtype, ctx.w_dtype = seeds, rht_seed, x.shape, x.dtype, weight.dtype
        return y.reshape(*x.shape[:-1], wq.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x2, wq, counter = ctx.saved_tensors
        q = backward_operands(x2, dy.reshape(-1, wq.shape[0]), counter, ctx.seeds, ctx.rht_seed)
        dx = torch.matmul(q["dy"], wq)
        dw = torch.matmul(q["dyw"].t(), q["xw"])
        return dx.reshape(ctx.x_shape).to(ctx.x_dtype), dw.to(ctx.w_dtype), None, None, None


class EmulatedNvfp4Linear(nn.Module):
    """A bias-free linear whose GEMMs run emulated NVFP4. It holds the replaced ``nn.Linear``'s
    own weight Parameter (state-dict names unchanged) and a step counter (a non-persistent int32
    buffer) that every forward pass under autograd advances after reading it."""

    def __init__(self, linear: nn.Linear, layer: int, parts: tuple[str, ...], run_seed: int):
        super().__init__()
        if linear.bias is not None:
            raise ValueError(f"{type(self).__name__}: the model's linears have no bias")
        if linear.out_features % len(parts):
            raise ValueError(f"{type(self).__name__}: {linear.out_features} outputs do not split into {parts}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.layer, self.parts = layer, tuple(parts)
        self.seeds = tuple((scheme.operand_seed(run_seed, layer, p, scheme.DGRAD_DY),
                            scheme.operand_seed(run_seed, layer, p, scheme.WGRAD_DY)) for p in parts)
        self.rht_seed = scheme.rht_seed(run_seed)
        self.register_buffer("counter", torch.zeros(1, dtype=torch.int32, device=linear.weight.device),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        counter = self.counter.clone()
        if torch.is_grad_enabled():
            self.counter.add_(1)
        return self.quantized(x, counter)

    def quantized(self, x: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
        """The emulated GEMM (the MX linear overrides it)."""
        return Nvfp4LinearFunction.apply(x, self.weight, counter, self.seeds, self.rht_seed)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, layer={self.layer}, parts={','.join(self.parts)}"


# The plain model's block linears (engines/torch/model.py) and their canonical parts.
BLOCK_LINEARS = {"attention.wqkv": scheme.FUSED["wqkv"], "attention.wo": ("wo",),
                 "feed_forward.w_gate_up": scheme.FUSED["w_gate_up"], "feed_forward.w_down": ("w_down",)}


def convert(model: nn.Module, layers: tuple[int, ...], run_seed: int) -> list[str]:
    """Swap the block linears of ``layers`` for EmulatedNvfp4Linear in place; the names of
    their weights."""
    names = []
    for i in layers:
        block = model.layers[i]
        for path, parts in BLOCK_LINEARS.items():
            owner_name, _, attr = path.rpartition(".")
            owner = block.get_submodule(owner_name)
            setattr(owner, attr, EmulatedNvfp4Linear(getattr(owner, attr), i, parts, run_seed))
            names.append(f"layers.{i}.{path}.weight")
    return names
