"""The emulated MX linear in PyTorch (MXFP8, MXFP4): a ``torch.autograd.Function`` around the
opaque ``torch.ops.parallax.mx_qdq`` op, and the module that replaces an ``nn.Linear``. The
equations, which operands are quantized and how: ``parallax/spec/mx_scheme.py``; the seeds and
step counter are the emulated NVFP4 linear's (``torch_nvfp4_linear.py``). The JAX twin is
``jax_mx_linear.py``.
"""

from __future__ import annotations

import torch
from torch import nn

import parallax.quant.torch_ops  # noqa: F401  (registers torch.ops.parallax.*)
from parallax.quant.torch_nvfp4_linear import BLOCK_LINEARS, EmulatedNvfp4Linear
from parallax.spec import mx_scheme
from parallax.spec import nvfp4_scheme as seeds_scheme

_ops = torch.ops.parallax


def _q(t: torch.Tensor, s: mx_scheme.MxScheme, counter=None, stochastic=False, seed=0) -> torch.Tensor:
    return _ops.mx_qdq(t.contiguous(), counter, s.elem, s.rule, stochastic, seed)


def _columns(t: torch.Tensor, s: mx_scheme.MxScheme, rht_seed: int) -> torch.Tensor:
    """tᵀ [cols, rows] (the copy the wgrad GEMM quantizes along the tokens), after the RHT when
    the scheme has it."""
    tt = t.t().contiguous()
    return _ops.hadamard16(tt, rht_seed, False) if s.wgrad_rht else tt


def forward_operands(x2: torch.Tensor, weight: torch.Tensor, s: mx_scheme.MxScheme) -> dict[str, torch.Tensor]:
    """bf16 'xq' = Q(X along K) [M, K], 'wq' = Q(W along K) [N, K] for the forward GEMM and 'wt' =
    Q(W along N)ᵀ [N, K] for dgrad (the same weight quantized along its other dimension)."""
    w = weight.to(torch.bfloat16)
    return {"xq": _q(x2.to(torch.bfloat16), s), "wq": _q(w, s), "wt": _q(w.t(), s).t()}


def backward_operands(x2, dy2, counter, seeds, rht_seed, s: mx_scheme.MxScheme) -> dict[str, torch.Tensor]:
    """The backward GEMMs' operands, bf16: 'dy' = Q(dY along N, g) [M, N] (dgrad); 'xw' = Q(H(Xᵀ)
    along M) [K, M] and 'dyw' = Q(H(dYᵀ) along M, g) [N, M] (wgrad: dW = dyw·xwᵀ). The
    stochastically rounded tensors are quantized per canonical part with the part's seed."""
    dy = dy2.to(torch.bfloat16)
    n = len(seeds)
    if s.grad_sr:
        dyq = torch.cat([_q(p, s, counter, True, sd[seeds_scheme.DGRAD_DY]) for p, sd in zip(dy.chunk(n, 1), seeds)], 1)
        cols = _columns(dy, s, rht_seed)
        dyw = torch.cat([_q(p, s, counter, True, sd[seeds_scheme.WGRAD_DY]) for p, sd in zip(cols.chunk(n, 0), seeds)], 0)
    else:
        dyq, dyw = _q(dy, s), _q(_columns(dy, s, rht_seed), s)
    return {"dy": dyq, "xw": _q(_columns(x2.to(torch.bfloat16), s, rht_seed), s), "dyw": dyw}


class MxLinearFunction(torch.autograd.Function):
    """y = x·Wᵀ on MX-quantized operands (mx_scheme module docstring); ``seeds`` holds one (dgrad,
    wgrad) seed pair per canonical part of W."""

    @staticmethod
    def forward(ctx, x, weight, counter, seeds, rht_seed, scheme):
        x2 = x.to(torch.bfloat16).reshape(-1, x.shape[-1])
        q = forward_operands(x2, weight, scheme)
        y = torch.matmul(q["xq"], q["wq"].t())
        ctx.save_for_backward(x2, q["wt"], counter)
        ctx.seeds, ctx.rht_seed, ctx.scheme, ctx.x_shape, ctx.x_dtype, ctx.w_dtype = (
            seeds, rht_seed, scheme, x.shape, x.dtype, weight.dtype)
        return y.reshape(*x.shape[:-1], q["wq"].shape[0])

    @staticmethod
    def backward(ctx, dy):
        x2, wt, counter = ctx.saved_tensors
        q = backward_operands(x2, dy.reshape(-1, wt.shape[0]), counter, ctx.seeds, ctx.rht_seed, ctx.scheme)
        dx = torch.matmul(q["dy"], wt)
        dw = torch.matmul(q["dyw"], q["xw"].t())
        return dx.reshape(ctx.x_shape).to(ctx.x_dtype), dw.to(ctx.w_dtype), None, None, None, None


class EmulatedMxLinear(EmulatedNvfp4Linear):
    """A bias-free linear whose GEMMs run emulated MX: EmulatedNvfp4Linear (the replaced
    ``nn.Linear``'s weight Parameter, the per-part seeds, the step counter) with the MX GEMM."""

    def __init__(self, linear: nn.Linear, layer: int, parts: tuple[str, ...], run_seed: int,
                 scheme: mx_scheme.MxScheme):
        super().__init__(linear, layer, parts, run_seed)
        self.scheme = scheme

    def quantized(self, x: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
        return MxLinearFunction.apply(x, self.weight, counter, self.seeds, self.rht_seed, self.scheme)

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, layer={self.layer}, parts={','.join(self.parts)}, "
                f"elem={self.scheme.elem}, rule={self.scheme.rule}")


def convert(model: nn.Module, layers: tuple[int, ...], run_seed: int, scheme: mx_scheme.MxScheme) -> list[str]:
    """Swap the block linears of ``layers`` for EmulatedMxLinear in place; the names of their weights."""
    names = []
    for i in layers:
        block = model.layers[i]
        for path, parts in BLOCK_LINEARS.items():
            owner_name, _, attr = path.rpartition(".")
            owner = block.get_submodule(owner_name)
            setattr(owner, attr, EmulatedMxLinear(getattr(owner, attr), i, parts, run_seed, scheme))
            names.append(f"layers.{i}.{path}.weight")
    return names
