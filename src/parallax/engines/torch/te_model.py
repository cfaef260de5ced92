"""The LLaMA decoder of ``model.py`` with its blocks built from TransformerEngine modules.

Each block holds the three TE modules whose GEMMs TE can run in fp8:

- ``attention.qkv``: ``te.LayerNormLinear(d, 3d, normalization="RMSNorm")``, the attention
  RMSNorm fused into the QKV projection (its ``layer_norm_weight`` is ``attention_norm``);
- ``attention.wo``: ``te.Linear(d, d)``;
- ``feed_forward``: ``te.LayerNormMLP(d, d_ff, normalization="RMSNorm", activation="swiglu")``:
  the FFN RMSNorm (``layer_norm_weight`` = ``ffn_norm``), fc1 = [w_gate; w_up] (out dim), SwiGLU,
  fc2 = w_down.

Between them runs our own torch code, the same as the plain model's: the head split and the
half-split RoPE in float32 (``split_heads``), causal SDPA with the backend the engine chose. With
``attention="te"`` the attention itself is TE's too: ``te.DotProductAttention`` (cuDNN's fused
attention), the one place TE runs attention in FP8 (``DelayedScaling(fp8_dpa=True)``, the recipe
``te-fp8-dpa`` in ``recipes/te.py``). It holds no weights, only its FP8 scaling state
(``attention.core._extra_state``), which the converters drop like the linears' own.
Embedding, final RMSNorm, lm_head and the float32 loss are plain torch (``Head``), in bf16
under autocast: the first and last layers are never fp8.

SwiGLU order: TE's ``swiglu`` applies SiLU to the *first* half of fc1's output and multiplies
by the second (TransformerEngine ``tests/pytorch/test_numerics.py``: ``TorchGLU`` computes
``act(x[..., :n/2]) * x[..., n/2:]`` and ``test_layernorm_mlp_accuracy`` checks
``LayerNormMLP(activation="swiglu")`` against it with ``fc1_weight`` copied unchanged). So
``fc1_weight`` is ``[w_gate; w_up]``, the layout of the plain model's ``w_gate_up``.

CUDA graphs (``--cuda-graphs``, ``recipes/te.py``: ``TransformerEngineHooks.graph``): every block, as a
function of the residual stream alone (``OneInputBlock``), is captured forward and backward by
``te.make_graphed_callables``; ``use_graphed`` makes training forwards replay them, while a
forward under ``torch.no_grad`` (evaluation, logits) runs the same blocks eagerly.

Parameters are float32 master weights (``params_dtype=torch.float32``); TE, like nn.Linear,
takes its compute dtype from ``torch.autocast``. The converters at the bottom work on plain
state dicts with TE's parameter names, so they need neither TE nor a GPU.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from parallax.spec.config import ModelConfig
from parallax.engines.torch.convert import from_torch_state, to_torch_state
from parallax.engines.torch.model import RMSNorm, apply_rope
from parallax.engines.rope import rope_tables

# The TE linear weights of one block, whose GEMMs run in fp8 under an fp8 recipe.
TE_LINEAR_WEIGHTS = ("attention.qkv.weight", "attention.wo.weight",
                     "feed_forward.fc1_weight", "feed_forward.fc2_weight")


def split_heads(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_heads: int, head_dim: int):
    """[B, S, 3·H·hd] → q, k, v as [B, H, S, hd] for SDPA, RoPE applied to q and k."""
    batch, seq, _ = qkv.shape
    q, k, v = qkv.view(batch, seq, 3, n_heads, head_dim).unbind(2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


# Where a block's attention runs: torch's SDPA (the engine's backend), or TE's DotProductAttention.
ATTENTIONS = ("sdpa", "te")


class Attention(nn.Module):
    def __init__(self, te, config: ModelConfig, device, attention: str = "sdpa"):
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        d, width = config.d_model, config.n_heads * config.head_dim
        self.qkv = te.LayerNormLinear(d, 3 * width, eps=config.norm_eps, bias=False, normalization="RMSNorm",
                                      params_dtype=torch.float32, device=device)
        self.wo = te.Linear(width, d, bias=False, params_dtype=torch.float32, device=device)
        # TE's attention takes [B, S, H, hd] and gives [B, S, H·hd]; causal, scale 1/sqrt(hd) as SDPA's
        self.core = (te.DotProductAttention(config.n_heads, config.head_dim, qkv_format="bshd",
                                            attn_mask_type="causal", attention_dropout=0.0)
                     if attention == "te" else None)

    def forward(self, h, cos, sin, split):
        q, k, v = split(self.qkv(h), cos, sin, self.n_heads, self.head_dim)
        if self.core is not None:
            # back to [B, S, H, hd]: q and k are RoPE's own tensors again, v a view of the QKV output
            q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
            return self.wo(self.core(q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        batch, _, seq, _ = out.shape
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class Block(nn.Module):
    def __init__(self, te, config: ModelConfig, compute_dtype: torch.dtype, device, attention: str = "sdpa"):
        super().__init__()
        self.attention = Attention(te, config, device, attention)
        self.feed_forward = te.LayerNormMLP(config.d_model, config.d_ff, eps=config.norm_eps, bias=False,
                                            normalization="RMSNorm", activation="swiglu",
                                            params_dtype=torch.float32, device=device)
        self.compute_dtype = compute_dtype

    def forward(self, h, cos, sin, split):
        h = h + self.attention(h, cos, sin, split).to(self.compute_dtype)
        return h + self.feed_forward(h).to(self.compute_dtype)


class Head(nn.Module):
    """Final RMSNorm, lm_head and the float32 cross-entropy: plain torch, compiled as one."""

    def __init__(self, config: ModelConfig, compute_dtype: torch.dtype, device):
        super().__init__()
        self.norm = RMSNorm(config.d_model, config.norm_eps, compute_dtype).to(device)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, device=device)

    def forward(self, h, targets=None):
        logits = self.lm_head(self.norm(h))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten().long())


class OneInputBlock(nn.Module):
    """A block as a function of the residual stream alone, the RoPE tables (of one sequence
    length) and the split fixed: what ``te.make_graphed_callables`` captures, since a graphed
    callable takes tensor arguments only. It holds the block itself, so its parameters are the
    model's; it is not registered in the model (no second name for them in the state dict)."""

    def __init__(self, block: Block, cos: torch.Tensor, sin: torch.Tensor, split):
        super().__init__()
        self.block, self.cos, self.sin, self.split = block, cos, sin, split

    def forward(self, h):
        return self.block(h, self.cos, self.sin, self.split)


class TELlama(nn.Module):
    def __init__(self, te, config: ModelConfig, compute_dtype: torch.dtype, device, attention: str = "sdpa"):
        super().__init__()
        self.config, self.compute_dtype = config, compute_dtype
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.d_model, device=device)
        self.layers = nn.ModuleList(Block(te, config, compute_dtype, device, attention)
                                    for _ in range(config.n_layers))
        self.head = Head(config, compute_dtype, device)
        self.split = split_heads  # compile_glue() swaps in a compiled one
        cos, sin = rope_tables(config.max_seq_len, config.head_dim, config.rope_theta)
        self.register_buffer("rope_cos", torch.from_numpy(cos).to(device), persistent=False)
        self.register_buffer("rope_sin", torch.from_numpy(sin).to(device), persistent=False)
        # use_graphed() sets these: the blocks' CUDA graphs and the [B, S, d] shape they replay
        # (a plain tuple, so that nn.Module registers nothing new).
        self.graphed: tuple | None = None
        self.graph_shape: tuple[int, int, int] | None = None

    def one_input_blocks(self, seq: int) -> tuple[OneInputBlock, ...]:
        """Every block as a callable of h alone, for sequences of ``seq`` tokens (after
        ``compile_glue``, so that the graphs capture the compiled split)."""
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        return tuple(OneInputBlock(layer, cos, sin, self.split) for layer in self.layers)

    def use_graphed(self, graphed, shape: tuple[int, int, int]) -> None:
        """Run ``graphed`` (one callable of h per block, same parameters) in place of the
        blocks whenever autograd records (training); evaluation under no_grad stays eager."""
        if len(graphed) != len(self.layers):
            raise ValueError(f"{len(graphed)} graphed blocks for {len(self.layers)} layers")
        self.graphed, self.graph_shape = tuple(graphed), tuple(shape)

    def compile_glue(self, mode: str) -> None:
        """torch.compile the pure-torch pieces: the head split + RoPE (one function shared by
        every layer) and the head (norm, lm_head, loss). The TE modules stay eager."""
        self.split = torch.compile(split_heads, mode=mode)
        self.head.compile(mode=mode)  # in place: parameter names unchanged

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        seq = tokens.shape[1]
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        h = self.tok_embeddings(tokens).to(self.compute_dtype)
        if self.graphed is not None and torch.is_grad_enabled():
            # A graph replays the shapes it was captured at: another shape is a caller's bug.
            if tuple(h.shape) != self.graph_shape:
                raise RuntimeError(f"the blocks' CUDA graphs replay shape {self.graph_shape}, got {tuple(h.shape)}")
            for block in self.graphed:
                h = block(h)
        else:
            for layer in self.layers:
                h = layer(h, cos, sin, self.split)
        return self.head(h, targets)


# ---- canonical weights ([in, out], parallax.engines.weights) <-> the TE model's state (weights [out, in])
#
# The TE model holds exactly the tensors of the plain ``Llama`` (fused qkv, fc1 = [w_gate; w_up])
# under other names, so its converters are the plain ones (``convert.py``) with the names mapped.

# Plain ``Llama`` state name (after the "layers.{i}." prefix where there is one) -> TELlama's.
TE_NAMES = {
    "norm.weight": "head.norm.weight",
    "lm_head.weight": "head.lm_head.weight",
    "attention_norm.weight": "attention.qkv.layer_norm_weight",
    "attention.wqkv.weight": "attention.qkv.weight",
    "ffn_norm.weight": "feed_forward.layer_norm_weight",
    "feed_forward.w_gate_up.weight": "feed_forward.fc1_weight",
    "feed_forward.w_down.weight": "feed_forward.fc2_weight",
}
PLAIN_NAMES = {te: plain for plain, te in TE_NAMES.items()}


def _renamed(name: str, table: dict[str, str]) -> str:
    """``name`` with its part after any "layers.{i}." prefix looked up in ``table``."""
    prefix, rest = "", name
    if name.startswith("layers."):
        index, rest = name.split(".", 2)[1:]
        prefix = f"layers.{index}."
    return prefix + table.get(rest, rest)


def to_te_state(model: ModelConfig, weights: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """The ``TELlama`` parameters (float32, CPU) holding canonical ``weights``; exact."""
    return {_renamed(k, TE_NAMES): v for k, v in to_torch_state(model, weights).items()}


def from_te_state(model: ModelConfig, state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Canonical float32 arrays from a ``TELlama`` state dict (or its gradients); TE's
    ``_extra_state`` entries (fp8 scales and amax history) are not weights and are dropped."""
    plain = {_renamed(k, PLAIN_NAMES): v for k, v in state.items() if not k.endswith("_extra_state")}
    return from_torch_state(model, plain)
