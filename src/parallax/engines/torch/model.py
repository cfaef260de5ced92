"""The shared LLaMA decoder in PyTorch, built from a ``ModelConfig`` preset.

Pre-norm blocks: h += wo(attention(rope(q), rope(k), v)); h += w_down(silu(w_gate x) · w_up x).
The numerics are fixed because the JAX engine implements the identical math (parity):

- Residual stream in ``compute_dtype`` (the token embedding is cast to it, as MaxText's llama2
  decoder does), so under bf16 every activation between blocks is bf16.
- RMSNorm: mean of squares and rsqrt in float32, result cast to ``compute_dtype``, then times the
  gain cast to ``compute_dtype``. ε = ``ModelConfig.norm_eps``.
- RoPE, half-split ("rotate_half") convention: angle = pos·θ^(-2i/hd) for i in [0, hd/2); the
  cos/sin tables are computed in float64 with NumPy and rounded once to float32 (so they do not
  depend on a framework's pow/sin kernels); rotation in float32, result cast back.
- Attention: causal, scale 1/√hd, ``F.scaled_dot_product_attention`` (its backend is chosen by
  the caller through ``torch.nn.attention.sdpa_kernel``).
- Loss: cross-entropy of float32 logits, mean over all B·S tokens.

wq/wk/wv are one ``wqkv`` Linear and w_gate/w_up one ``w_gate_up`` Linear: one larger GEMM is
faster than three small ones; ``convert.py`` maps them to and from the canonical names.
Parameters are float32 (master weights); bf16 compute comes from autocast (``recipes/autocast.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from parallax.spec.config import ModelConfig
from parallax.engines.rope import rope_tables


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, compute_dtype: torch.dtype):
        super().__init__()
        self.eps = eps
        self.compute_dtype = compute_dtype
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(self.compute_dtype) * self.weight.to(self.compute_dtype)



def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, S, H, hd]; cos, sin: [S, hd]."""
    x32 = x.float()
    cos, sin = cos[:, None, :], sin[:, None, :]
    return (x32 * cos + rotate_half(x32) * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads, self.head_dim = config.n_heads, config.head_dim
        width = config.n_heads * config.head_dim
        self.wqkv = nn.Linear(config.d_model, 3 * width, bias=False)
        self.wo = nn.Linear(width, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.wqkv(x).view(batch, seq, 3, self.n_heads, self.head_dim).unbind(2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # SDPA wants [B, H, S, hd]; the transposes are views, which cuDNN and flash accept.
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.w_gate_up = nn.Linear(config.d_model, 2 * config.d_ff, bias=False)
        self.w_down = nn.Linear(config.d_ff, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(x).chunk(2, dim=-1)
        return self.w_down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, compute_dtype: torch.dtype):
        super().__init__()
        self.attention_norm = RMSNorm(config.d_model, config.norm_eps, compute_dtype)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps, compute_dtype)
        self.feed_forward = FeedForward(config)
        self.compute_dtype = compute_dtype

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # Autocast returns Linear outputs in the autocast dtype; the casts keep the residual
        # stream in compute_dtype also where autocast is off (float32 reference runs).
        h = h + self.attention(self.attention_norm(h), cos, sin).to(self.compute_dtype)
        return h + self.feed_forward(self.ffn_norm(h)).to(self.compute_dtype)


class Llama(nn.Module):
    def __init__(self, config: ModelConfig, compute_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.config, self.compute_dtype = config, compute_dtype
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Block(config, compute_dtype) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps, compute_dtype)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # Constants, not state: kept out of the state dict and refilled by reset_rope().
        cos, sin = rope_tables(config.max_seq_len, config.head_dim, config.rope_theta)
        self.register_buffer("rope_cos", torch.from_numpy(cos), persistent=False)
        self.register_buffer("rope_sin", torch.from_numpy(sin), persistent=False)

    def reset_rope(self) -> None:
        """Refill the RoPE tables (after ``to_empty`` left them uninitialised)."""
        cos, sin = rope_tables(self.config.max_seq_len, self.config.head_dim, self.config.rope_theta)
        with torch.no_grad():
            self.rope_cos.copy_(torch.from_numpy(cos))
            self.rope_sin.copy_(torch.from_numpy(sin))

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, S, V] for ``tokens`` [B, S]; with ``targets`` the mean cross-entropy."""
        seq = tokens.shape[1]
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        h = self.tok_embeddings(tokens).to(self.compute_dtype)
        for layer in self.layers:
            h = layer(h, cos, sin)
        logits = self.lm_head(self.norm(h))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten().long())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def batch_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss of a [B, S+1] token batch: inputs [:, :-1], targets [:, 1:]."""
    return model(batch[:, :-1], batch[:, 1:])
