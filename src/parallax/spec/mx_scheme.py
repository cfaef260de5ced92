"""The emulated MX recipes (MXFP8, MXFP4), defined once for both engines (no framework is
imported here). They follow the emulated NVFP4 recipe's structure (``nvfp4_scheme.py``: the same
block linears, the same straight-through bf16 GEMMs, the same seeds and step counter) with the
OCP Microscaling formats of Blackwell's tensor cores: blocks of 32 elements along each GEMM's
reduction dimension, one E8M0 (power-of-two) scale per block, no per-tensor scale
(csrc/quant/mx.h). With X [M, K] (M = batch·seq tokens), W [N, K], dY [M, N]:

    forward  Y  = Q(X along K) · Q(W along K)ᵀ
    dgrad    dX = Q(dY along N, g) · Q(W along N)
    wgrad    dW = Q(H(dYᵀ) along M, g) · Q(H(Xᵀ) along M)ᵀ

MX blocks are one-dimensional, so every operand is quantized along the reduction dimension of
the GEMM that reads it: W twice (rowwise for the forward, columnwise for dgrad), X and dY twice
(rowwise, and columnwise along the tokens for wgrad), each from the bf16 tensor (TE's rowwise
and columnwise usages of ``MXFP8BlockScaling``). The columnwise operands are quantized as the
transposes Wᵀ, Xᵀ, dYᵀ (an emulation copy; the cost is labelled emulation).

- ``emulated-mxfp8`` (arXiv 2506.08027, "Recipes for Pre-training LLMs with MXFP8"; TE
  ``MXFP8BlockScaling``): E4M3 for every operand, gradients included; the scale rounded up
  (``rceil``: 2^ceil(log2(amax/448)), the paper's fix for the OCP rule's divergence); round to
  nearest even; no RHT; every block linear quantized (the paper keeps all linear layers in MXFP8).
- ``emulated-mxfp8-floor``: the same with the OCP specification's scale rule
  (2^(floor(log2 amax) - 8), values past 448 saturate): the paper's ablation.
- ``emulated-mxfp4``: E2M1 elements, ``rceil`` scales (amax/6 rounded up: with the floor rule up to
  a quarter of a block's range would clip to 6, which stochastic rounding cannot undo), the
  gradient dY stochastically rounded in both backward GEMMs, the 16×16 random Hadamard transform
  on the wgrad operands along the tokens (cancels in the product, as in NVFP4), and the last
  ``bf16_last_fraction`` of the blocks kept bf16, all as the emulated NVFP4 recipe, so that MXFP4
  and NVFP4 differ by their block format alone (32 vs 16 elements, E8M0 vs E4M3 + FP32 scales).
  arXiv 2502.20586 ("Training LLMs with MXFP4") motivates SR and the RHT for the backward pass.

Fused torch linears (wqkv, w_gate_up): MX has no per-tensor scale, so round-to-nearest operands
quantize the same whether a fused weight is quantized whole or by canonical part (blocks never
cross a part when every part width is a multiple of 32: ``check_shapes``); the stochastically
rounded ones (dY, dYᵀ) are quantized per canonical part with that part's seed, exactly as the JAX
model's separate Dense layers, so both engines give the same bits. Seeds: ``nvfp4_scheme``'s
``operand_seed``, ``rht_seed`` and ``step_seed``.
"""

from __future__ import annotations

from typing import NamedTuple

from parallax.errors import ParallaxError
from parallax.spec import nvfp4_scheme

BLOCK = 32


class MxScheme(NamedTuple):
    """One MX recipe's numerics (a NamedTuple: a constant torch.compile and jax.custom_vjp take as is)."""

    elem: str  # e4m3 | e5m2 | e2m1 (parallax.quant.MX_ELEMS)
    rule: str  # floor | rceil
    grad_sr: bool  # stochastic rounding of dY (both backward GEMMs)
    wgrad_rht: bool  # the 16x16 RHT on the wgrad operands, along the tokens
    bf16_last_fraction: float

    def params(self, source: str) -> dict:
        """The recipe parameters recorded in every result."""
        fmt = "MXFP4 (E2M1" if self.elem == "e2m1" else f"MXFP8 ({self.elem.upper()}"
        blocks = f"{fmt}, E8M0 scale per 1x32 block, {self.rule} scale rule)"
        return {"elem": self.elem, "scale_rule": self.rule, "block": BLOCK,
                "weights": f"{blocks}, RNE, quantized along each GEMM's reduction dimension",
                "activations": f"{blocks}, RNE",
                "gradients": f"{blocks}, {'stochastic rounding' if self.grad_sr else 'RNE'}",
                "rht": "16x16 RHT on the wgrad GEMM's inputs (dY^T, X^T along the tokens)" if self.wgrad_rht else "none",
                "gemm": "bfloat16, float32 accumulation", "bf16_last_fraction": round(self.bf16_last_fraction, 6),
                "not_quantized": "embedding, attention, norms, lm_head, loss"
                                 + ("; the last blocks per bf16_last_fraction" if self.bf16_last_fraction else ""),
                "source": source}


MXFP8 = MxScheme("e4m3", "rceil", grad_sr=False, wgrad_rht=False, bf16_last_fraction=0.0)
MXFP8_FLOOR = MxScheme("e4m3", "floor", grad_sr=False, wgrad_rht=False, bf16_last_fraction=0.0)
MXFP4 = MxScheme("e2m1", "rceil", grad_sr=True, wgrad_rht=True, bf16_last_fraction=nvfp4_scheme.BF16_LAST_FRACTION)

SOURCE_MXFP8 = "OCP Microscaling v1.0; arXiv 2506.08027 (rceil); TransformerEngine MXFP8BlockScaling"
SOURCE_MXFP4 = "OCP Microscaling v1.0; arXiv 2502.20586 (SR, RHT); the emulated NVFP4 recipe's structure"


def from_params(params: dict) -> MxScheme:
    """The scheme a recipe's recorded parameters describe."""
    return MxScheme(params["elem"], params["scale_rule"], params["gradients"].endswith("stochastic rounding"),
                    params["rht"] != "none", float(params["bf16_last_fraction"]))


def check_shapes(name: str, run) -> None:
    """Every quantized dimension must be a multiple of 32 (no padding): d_model, d_ff, the
    attention width and batch·seq (the wgrad GEMM quantizes along the tokens)."""
    model = run.model_config
    sizes = {"d_model": model.d_model, "d_ff": model.d_ff, "n_heads·head_dim": model.n_heads * model.head_dim,
             "batch·seq": run.batch_size * run.seq_len}
    for what, size in sizes.items():
        if size % BLOCK:
            raise ParallaxError(f"recipe '{name}': MX blocks need {what} divisible by {BLOCK}; this run has {size}")
