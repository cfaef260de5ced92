"""What one training step must do, by the classes of a profile: the GEMM FLOPs of each number
format, attention's FLOPs forward and backward, and the fewest HBM bytes that the memory-bound
classes move. ``parallax profile`` divides them by a class's time (the achieved rate) and by this
GPU's limit (the time at the limit). T = batch·seq tokens, L layers, d = d_model, f = d_ff,
V = vocab, P = parameters.

FLOPs: the ``spec`` accounting of ``flops.py`` (what MFU divides), split by class.
- GEMMs: a linear y = x·W of K inputs and N outputs costs 2·T·K·N forward, as much again for
  dgrad and for wgrad: 6·T·K·N. The linears are those whose GEMMs ``gemm_shapes`` measures
  (csrc/probe/gemm_shapes.h): qkv, attn_out, gate_up and down in every layer, lm_head once.
  Together 6·T·(P − V·d − the norm gains): the spec accounting's 6·P·T less the embedding
  table and the norms, which no GEMM multiplies (no class is credited with that 7%).
- Each linear's format (``gemm_formats``): every GEMM in bf16 for a bf16 recipe and for an
  emulated one (it quantizes, dequantizes, then multiplies in bf16); otherwise the block
  linears in the recipe's format and lm_head in bf16 (every fp8 and nvfp4 recipe of the
  registry keeps it so: TE, torchao, Flax and TE-JAX say it in their recipes; MaxText is taken
  to do the same).
- Attention: the spec accounting's 12·L·S·d per token, 4·L·B·S²·d forward (QKᵀ and PV) and
  8·L·B·S²·d backward. The whole S×S is counted, no causal halving, as MFU counts it; the
  attention limit is measured with the same count, so the fraction of it is the honest one.

Bytes (the byte model): each tensor read or written once at its storage size (bf16 2 bytes,
fp32 4), nothing kept in cache between kernels, the fewest passes a fused implementation needs.
- optimizer: 32·P. AdamW reads parameter, gradient and both moments and writes parameter and
  moments, all fp32 (7 × 4 bytes); clipping's global gradient norm reads every gradient once
  more (4 bytes).
- quantize: per quantized linear, X [T, K], W [K, N] and dY [T, N] each read once in bf16 and
  written twice in the recipe's storage, a row-wise copy for one GEMM and a column-wise one for
  the other (Hopper's fp8 GEMMs take only the TN layout; NVFP4 quantizes the wgrad operands
  along the tokens): (T·K + K·N + T·N)·(2 + 2·q). q = 1 byte for fp8, 0.5625 for NVFP4 (a
  4-bit code and an E4M3 scale per 16 elements), 2 for emulated NVFP4 (the quantize-dequantize
  writes bf16). Per-tensor and per-row scales are left out (under 0.5% of the codes). Which
  linears: every block's, for emulated NVFP4 the blocks of ``nvfp4_scheme.quantized_layers``;
  never lm_head; none for a bf16 recipe. The linears are the fused ones above: a stack that
  quantizes wq, wk and wv apart reads X three times, more than this minimum.
- elementwise (norms, RoPE, SwiGLU, residual adds, cross-entropy), bf16 elements:
  per layer forward: two RMSNorms (read x, write y: 4·T·d), RoPE of q and k (read, write:
  4·T·d), SwiGLU (read gate and up, write their product: 3·T·f), two residual adds (read two,
  write one: 6·T·d); per layer backward: two RMSNorms (read x and dy, write dx: 6·T·d), RoPE
  (4·T·d), SwiGLU (read gate, up and dh, write dgate and dup: 5·T·f), the residual stream's
  gradient summed from its two branches twice (6·T·d); once: the final RMSNorm forward and
  backward (5·T·d), cross-entropy (read the logits once, write their gradient once: 2·T·V).
  In all 2·(L·(30·T·d + 8·T·f) + 5·T·d + 2·T·V) bytes. Left out: the embedding gather and its
  gradient, attention's layout copies, the casts of fp32 weights to bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

from parallax.spec.config import ModelConfig
from parallax.spec.nvfp4_scheme import BF16_LAST_FRACTION, quantized_layers
from parallax.spec.recipe import Recipe

BF16_BYTES, FP32_BYTES = 2, 4
# Bytes of one quantized element as the recipe stores it (module docstring, "quantize"); an
# emulated format writes its quantize-dequantized values back in bf16.
QUANTIZED_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1 / 32, "nvfp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}
EMULATED_BYTES = float(BF16_BYTES)
ADAMW_BYTES_PER_PARAM = 7 * FP32_BYTES + FP32_BYTES  # AdamW's read-modify-write, then clipping's norm


@dataclass(frozen=True)
class Linear:
    """One weight matrix of the step's GEMMs: K inputs, N outputs, ``count`` times per step."""

    name: str
    k: int
    n: int
    count: int
    block: bool  # in every layer (else lm_head)


def linears(model: ModelConfig) -> tuple[Linear, ...]:
    """The fused linears of ``gemm_shapes`` (qkv, attn_out, gate_up, down per layer; lm_head)."""
    d, attn, layers = model.d_model, model.n_heads * model.head_dim, model.n_layers
    return (Linear("qkv", d, 3 * attn, layers, True), Linear("attn_out", attn, d, layers, True),
            Linear("gate_up", d, 2 * model.d_ff, layers, True), Linear("down", model.d_ff, d, layers, True),
            Linear("lm_head", d, model.vocab_size, 1, False))


def gemm_formats(recipe: Recipe) -> dict[str, str]:
    """The format each linear's GEMMs run in under ``recipe`` (module docstring)."""
    block = "bf16" if recipe.format == "bf16" or recipe.emulated else recipe.format
    return {"block": block, "lm_head": "bf16"}


def linear_formats(model: ModelConfig, recipe: Recipe) -> dict[str, str]:
    """{linear name: the format its GEMMs run in} (``linears``, ``gemm_formats``)."""
    formats = gemm_formats(recipe)
    return {lin.name: formats["block" if lin.block else "lm_head"] for lin in linears(model)}


def gemm_flops(model: ModelConfig, tokens: int, recipe: Recipe) -> dict[str, int]:
    """FLOPs per step of the GEMMs of each format that runs any: {format: 6·T·ΣK·N}."""
    formats = linear_formats(model, recipe)
    out: dict[str, int] = {}
    for linear in linears(model):
        fmt = formats[linear.name]
        out[fmt] = out.get(fmt, 0) + 6 * tokens * linear.k * linear.n * linear.count
    return out


def attention_flops(model: ModelConfig, batch_size: int, seq_len: int) -> dict[str, int]:
    """FLOPs per step of attention: {"forward": 4·L·B·S²·d, "backward": 8·L·B·S²·d}."""
    forward = 4 * model.n_layers * batch_size * seq_len * seq_len * model.n_heads * model.head_dim
    return {"forward": forward, "backward": 2 * forward}


def optimizer_bytes(model: ModelConfig) -> int:
    return ADAMW_BYTES_PER_PARAM * model.param_count()


def quantized_blocks(model: ModelConfig, recipe: Recipe) -> int:
    """How many blocks' linears the recipe quantizes."""
    if recipe.format == "bf16":
        return 0
    if recipe.emulated:
        fraction = recipe.params.get("bf16_last_fraction", BF16_LAST_FRACTION)
        return len(quantized_layers(model.n_layers, fraction))
    return model.n_layers


def quantize_bytes(model: ModelConfig, tokens: int, recipe: Recipe) -> int:
    """The fewest bytes per step the casts to the recipe's format move (module docstring)."""
    blocks = quantized_blocks(model, recipe)
    if not blocks:
        return 0
    q = EMULATED_BYTES if recipe.emulated else QUANTIZED_BYTES[recipe.format]
    elements = sum((tokens * lin.k + lin.k * lin.n + tokens * lin.n) for lin in linears(model) if lin.block)
    return round(blocks * elements * (BF16_BYTES + 2 * q))


def elementwise_bytes(model: ModelConfig, tokens: int) -> int:
    """The fewest bytes per step of norms, RoPE, SwiGLU, residual adds and cross-entropy."""
    td, tf = tokens * model.d_model, tokens * model.d_ff
    per_layer = (14 * td + 3 * tf) + (16 * td + 5 * tf)  # forward, backward
    return BF16_BYTES * (model.n_layers * per_layer + 5 * td + 2 * tokens * model.vocab_size)


@dataclass(frozen=True)
class StepWork:
    """The work of one step by class: FLOPs of GEMMs by format and of attention, bytes of the
    memory-bound classes."""

    gemm_flops: dict[str, int]
    attention_forward_flops: int
    attention_backward_flops: int
    quantize_bytes: int
    elementwise_bytes: int
    optimizer_bytes: int


def step_work(model: ModelConfig, batch_size: int, seq_len: int, recipe: Recipe) -> StepWork:
    tokens = batch_size * seq_len
    attention = attention_flops(model, batch_size, seq_len)
    return StepWork(gemm_flops=gemm_flops(model, tokens, recipe), attention_forward_flops=attention["forward"],
                    attention_backward_flops=attention["backward"],
                    quantize_bytes=quantize_bytes(model, tokens, recipe),
                    elementwise_bytes=elementwise_bytes(model, tokens), optimizer_bytes=optimizer_bytes(model))
