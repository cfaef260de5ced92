"""The emulated NVFP4 recipe, defined once for both engines (no framework is imported here).

Each block linear (wq wk wv wo w_gate w_up w_down of the quantized blocks) runs its three GEMMs
on NVFP4 quantize-dequantized operands with Parallax's native kernels (``parallax.quant``) and
multiplies them in bf16, following TransformerEngine's ``NVFP4BlockScaling`` recipe
(``transformer_engine/common/recipe/__init__.py``: ``fp4_quant_fwd_inp`` = RHT, no SR, 1D;
``fp4_quant_fwd_weight`` = no RHT, no SR, 2D; ``fp4_quant_bwd_grad`` = RHT, SR, 1D; RHT "is
currently only applied to column-wise usage so that it can be used for wgrad GEMM"; TE docs
``features/low_precision_training/nvfp4``). With X [M, K] (M = batch·seq tokens), W [N, K]
(torch's layout; the canonical and Flax kernel is Wᵀ), dY [M, N]:

    forward  Y  = Q(X, 1x16, RNE) · Q(W, 16x16, RNE)ᵀ
    dgrad    dX = Q(dY, 1x16, SR_a) · Q(W, 16x16, RNE)
    wgrad    dW = Q(H(dYᵀ), 1x16, SR_b) · Q(H(Xᵀ), 1x16, RNE)ᵀ

- Q(A, 1x16, ·): NVFP4 along A's last dimension, which is each GEMM's reduction dimension (K
  for the forward, N for dgrad, M for wgrad): E2M1 values, an E4M3 scale per 16 elements, an
  FP32 per-tensor scale amax/(6·448) (csrc/quant/README.md). The wgrad operands are the
  transposes dYᵀ [N, M] and Xᵀ [K, M], quantized along the token dimension: TE's columnwise
  usage, quantized from the high-precision tensor, never from the rowwise copy.
- Q(W, 16x16): one scale per 16×16 tile, so W and Wᵀ quantize to the same values: the forward
  and dgrad GEMMs see one and the same weight (the reason TE gives for 2D weight scaling).
- H: the 16×16 random Hadamard transform of each 16-group along the token dimension (the
  wgrad reduction dimension), one sign vector for every layer and step of a run (TE: "a single
  random sign vector is shared across all linear layers throughout training"). H is
  orthonormal and applied to both wgrad operands along the reduction, so it cancels in the
  product: (dYᵀH)(XᵀH)ᵀ = dYᵀX; only the quantization error differs. The amax (per-tensor
  scale) is taken after the transform (TE's ``with_post_rht_amax``).
- SR: stochastic rounding of both uses of the gradient dY (TE's grad quantizer has
  ``stochastic_rounding`` for rowwise and columnwise usage); X and W round to nearest even.
- bf16: the operands are quantized from their bf16 values (the GEMM dtype: activations are
  bf16 already, the fp32 master weight is rounded to bf16 first, as autocast and Flax's
  ``dtype=bfloat16`` Dense do), the dequantized values come back in bf16 (the product of the
  E2M1 value, the E4M3 scale and the FP32 global scale is rounded once to bf16: relative error
  ≤ 2^-9, far below the E2M1 step of 2^-1..2^-2; TE applies the global scales in the GEMM
  epilogue instead), and the GEMMs are ordinary bf16 GEMMs with float32 accumulation.
  Straight-through: the quantizers have identity derivative.

Which linears (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149: only
the linear layers' GEMMs are quantized, and a small set of linear layers stays in BF16, about
16% of them in the 12B model, in its first and last blocks): embedding, attention (softmax,
QKᵀ, PV), norms, lm_head and the loss are never quantized here; the last
``round(n_layers · bf16_last_fraction)`` blocks keep bf16 linears (``bf16_last_fraction`` 1/6 ≈
the paper's 16%: 2 of llama-100m's 12 blocks, 0 of the tiny preset's 2). The recipe
``emulated-nvfp4-all`` quantizes every block (fraction 0), for the ablation.

Fused torch linears: the torch model fuses wq/wk/wv into ``wqkv`` and w_gate/w_up into
``w_gate_up``; the emulated torch linear quantizes each canonical part on its own (its own
per-tensor scale, its own SR seed) exactly as the JAX model's separate Dense layers, so both
engines quantize the same tensors to the same bits.

Seeds (the same in both engines; ``mix64`` is csrc/quant/qdq_math.h's SplitMix64 finaliser,
G = 0x9E3779B97F4A7C15, arithmetic mod 2^64):

    operand_seed(run, layer, linear, operand) = mix64(mix64(mix64(run + G) + (layer + 1)·G)
                                                      + (8·linear + operand + 1)·G) mod 2^63
    rht_seed(run)                             = mix64(mix64(run + G) + G·2^32) mod 2^63
    SR seed at step c                         = step_seed(operand_seed, c)
                                              = mix64(operand_seed + (c + 1)·G)   (native)

``layer`` is the block index, ``linear`` the index in ``LINEARS`` (wq=0 … w_down=6),
``operand`` 0 for dY of the dgrad GEMM and 1 for dYᵀ of the wgrad GEMM. ``c`` counts the
optimizer steps done before (0 for the first step): a device scalar each engine advances every
training step (torch: a buffer of every emulated linear, incremented by its forward pass
under autograd; JAX: a float32 variable of every linear's dot_general in the collection
``nvfp4_counter``, whose custom_vjp 'gradient' is c + 1, Flax's overwrite-with-gradient
convention), read by the kernel at run time, so neither torch.compile nor XLA recompiles per
step. The element i of an SR-quantized tensor then rounds up iff
uniform(step_seed(operand_seed, c), i) < p (csrc/quant/README.md): the same bits on CPU and
GPU, in torch and in JAX, from the same weights and batches.
"""

from __future__ import annotations

from parallax.errors import ParallaxError

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
SEED_MASK = (1 << 63) - 1  # seeds travel as int64 (parallax.quant.MAX_SEED)

# The block linears, canonical names in the order of engines/jax/model.py BLOCK_LINEARS.
LINEARS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
# Operand ids of the seeds: the two stochastically rounded tensors of a linear.
DGRAD_DY = 0
WGRAD_DY = 1
# The torch model's fused linears, their canonical parts in order along the output dimension.
FUSED = {"wqkv": ("wq", "wk", "wv"), "w_gate_up": ("w_gate", "w_up")}

BLOCK = 16  # NVFP4 blocks: every quantized dimension, the token count included (wgrad)
BF16_LAST_FRACTION = 1 / 6  # ≈ the paper's 16% of linear layers in BF16

# The recipe parameters, recorded in every result (the same for both engines).
PARAMS = {"weights": "NVFP4 16x16 blocks, RNE", "activations": "NVFP4 1x16 blocks, RNE",
          "gradients": "NVFP4 1x16 blocks, stochastic rounding",
          "rht": "16x16 RHT on the wgrad GEMM's inputs (dY^T, X^T along the tokens)",
          "gemm": "bfloat16, float32 accumulation", "bf16_last_fraction": round(BF16_LAST_FRACTION, 6),
          "not_quantized": "embedding, attention, norms, lm_head, loss; the last blocks per bf16_last_fraction",
          "source": "TransformerEngine NVFP4BlockScaling; arXiv 2509.25149"}
PARAMS_ALL = {**PARAMS, "bf16_last_fraction": 0.0,
              "not_quantized": "embedding, attention, norms, lm_head, loss (every block quantized)"}


def mix64(z: int) -> int:
    z &= MASK64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def hash32(seed: int, index: int) -> int:
    """The native ``quant_hash32`` (csrc/quant/README.md), for tests of this module."""
    return mix64(mix64(seed + GOLDEN) + index * GOLDEN) >> 32


def operand_seed(run_seed: int, layer: int, linear: str, operand: int) -> int:
    """The per-run seed of one stochastically rounded operand (module docstring)."""
    if operand not in (DGRAD_DY, WGRAD_DY):
        raise ValueError(f"operand must be {DGRAD_DY} (dgrad dY) or {WGRAD_DY} (wgrad dY^T), got {operand}")
    h = mix64(mix64(run_seed + GOLDEN) + (layer + 1) * GOLDEN)
    return mix64(h + (8 * LINEARS.index(linear) + operand + 1) * GOLDEN) & SEED_MASK


def rht_seed(run_seed: int) -> int:
    """The seed of the run's one RHT sign vector."""
    return mix64(mix64(run_seed + GOLDEN) + GOLDEN * (1 << 32)) & SEED_MASK


def step_seed(seed: int, counter: int) -> int:
    """The SR seed at step ``counter`` (the native ``quant_step_seed``; the kernels compute it)."""
    return mix64(seed + ((counter & 0xFFFFFFFF) + 1) * GOLDEN)


def bf16_blocks(n_layers: int, fraction: float) -> int:
    """How many of the last blocks keep bf16 linears."""
    return min(n_layers, int(round(n_layers * fraction)))


def quantized_layers(n_layers: int, fraction: float) -> tuple[int, ...]:
    """The block indices whose linears run emulated NVFP4."""
    return tuple(range(n_layers - bf16_blocks(n_layers, fraction)))


def check_shapes(name: str, run) -> None:
    """Every quantized dimension must be a multiple of 16 (no padding): d_model, d_ff, the
    attention width and batch·seq (the wgrad GEMM quantizes along the tokens)."""
    model = run.model_config
    sizes = {"d_model": model.d_model, "d_ff": model.d_ff, "n_heads·head_dim": model.n_heads * model.head_dim,
             "batch·seq": run.batch_size * run.seq_len}
    for what, size in sizes.items():
        if size % BLOCK:
            raise ParallaxError(f"recipe '{name}': NVFP4 blocks need {what} divisible by {BLOCK}; "
                                f"this run has {size}")
