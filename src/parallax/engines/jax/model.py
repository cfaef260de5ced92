"""The shared LLaMA decoder in Flax (linen), built to MaxText's ``llama2`` decoder numerics.

Pre-norm blocks: x + attention(RMSNorm(x)), then h + SwiGLU(RMSNorm(h)); a final RMSNorm
and an untied lm_head. Parameters are float32; every matmul runs in ``dtype`` (bfloat16 for
training, float32 for CPU parity). Where the numerics are fixed (identical in the torch engine):

- the residual stream is carried in ``dtype`` (the embedding rows are gathered in float32
  and cast to it); only RMSNorm statistics, RoPE, the attention softmax and the loss are float32;
- RMSNorm: y = x32 · rsqrt(mean(x32²) + eps), cast to ``dtype``, times the gain cast to ``dtype``;
- RoPE, half-split: out = x32·cos + rotate_half(x32)·sin, cast back to the input dtype; the
  cos/sin tables are computed in float64 with NumPy and rounded once to float32, so they do not
  depend on a framework's pow/sin kernels;
- causal attention with scale 1/sqrt(head_dim) through ``jax.nn.dot_product_attention``
  (``attention`` = "cudnn" or "xla", chosen by the engine and recorded);
- logits are computed in ``dtype`` and cast to float32 for the loss.

Parameter tree (``convert.py`` maps it to and from the canonical layout):
tok_embeddings/embedding, layers_{i}/{attention_norm,ffn_norm}/scale,
layers_{i}/{wq,wk,wv,wo,w_gate,w_up,w_down}/kernel ([in, out]), norm/scale, lm_head/kernel.
A recipe's dot_general class adds its variables beside them in its own collection, e.g.
Flax fp8's ``_overwrite_with_gradient``: layers_{i}/<linear>/<Op>_0/{input,kernel,
output_grad}_{scale,amax_history} (``<Op>`` the class name).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from parallax.spec.config import ModelConfig
from parallax.engines.profiling import ATTENTION_SCOPE
from parallax.engines.rope import rope_tables


class RMSNorm(nn.Module):
    eps: float
    dtype: Any

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), jnp.float32)
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
        return y.astype(self.dtype) * scale.astype(self.dtype)



def causal_attention(q, k, v, implementation: str):
    """Causal SDPA of [B, S, N, head_dim] q, k, v, in the name scope a profile tells attention's
    ops by (``profiling.ATTENTION_SCOPE``: with ``implementation='xla'`` they are plain dots)."""
    with jax.named_scope(ATTENTION_SCOPE):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=implementation)


def apply_rope(x, cos, sin):
    """Rotate x [B, S, N, head_dim] by the tables [S, head_dim] (half-split pairs)."""
    half = x.shape[-1] // 2
    x32 = x.astype(jnp.float32)
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    out = x32 * cos[None, :, None, :] + rotated * sin[None, :, None, :]
    return out.astype(x.dtype)


class Embedding(nn.Module):
    """Rows of a float32 table, gathered in float32 and then cast to ``dtype``: the backward
    pass then accumulates the table's gradient in float32 (a token seen many times in a batch
    adds up without bf16 rounding), as torch's nn.Embedding followed by a cast does. (Flax's
    nn.Embed casts the whole table first, which accumulates in ``dtype``.)"""

    vocab_size: int
    features: int
    dtype: Any

    @nn.compact
    def __call__(self, tokens):
        table = self.param("embedding", nn.initializers.normal(0.02), (self.vocab_size, self.features),
                           jnp.float32)
        return jnp.take(table, tokens, axis=0).astype(self.dtype)


# The block linears a precision recipe may quantize, in the order the numerics guard reads them.
BLOCK_LINEARS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


def _dense(features: int, dtype, name: str, dot_general_cls=None) -> nn.Dense:
    # Initial values come from parallax.engines.weights through convert.py; this initializer only
    # gives model.init shapes. ``dot_general_cls`` None is Flax's default, lax.dot_general.
    return nn.Dense(features, use_bias=False, dtype=dtype, param_dtype=jnp.float32, name=name,
                    dot_general_cls=dot_general_cls)


class Block(nn.Module):
    config: ModelConfig
    dtype: Any
    attention: str
    dot_general_cls: Any = None  # of the BLOCK_LINEARS; None: XLA's own dot

    def _linear(self, features: int, name: str) -> nn.Dense:
        return _dense(features, self.dtype, name, self.dot_general_cls)

    @nn.compact
    def __call__(self, x, cos, sin):
        cfg = self.config
        batch, seq, _ = x.shape
        heads, hd = cfg.n_heads, cfg.head_dim

        h = RMSNorm(cfg.norm_eps, self.dtype, name="attention_norm")(x)
        q = self._linear(heads * hd, "wq")(h).reshape(batch, seq, heads, hd)
        k = self._linear(heads * hd, "wk")(h).reshape(batch, seq, heads, hd)
        v = self._linear(heads * hd, "wv")(h).reshape(batch, seq, heads, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = causal_attention(q, k, v, self.attention)
        x = x + self._linear(cfg.d_model, "wo")(a.reshape(batch, seq, heads * hd))

        h = RMSNorm(cfg.norm_eps, self.dtype, name="ffn_norm")(x)
        gate = self._linear(cfg.d_ff, "w_gate")(h)
        up = self._linear(cfg.d_ff, "w_up")(h)
        return x + self._linear(cfg.d_model, "w_down")(nn.silu(gate) * up)


class Llama(nn.Module):
    """tokens [B, S] int -> logits [B, S, vocab] float32. ``dot_general_cls`` (a precision
    recipe's, e.g. Flax's fp8 ops) goes to the block linears only: the embedding and lm_head
    stay in ``dtype``, as in the torch recipes. Its variables, if any, live in their own
    collections; ``params`` is the same tree with or without it."""

    config: ModelConfig
    dtype: Any = jnp.bfloat16
    attention: str = "xla"
    dot_general_cls: Any = None

    @nn.compact
    def __call__(self, tokens):
        cfg = self.config
        cos, sin = rope_tables(tokens.shape[1], cfg.head_dim, cfg.rope_theta)
        x = Embedding(cfg.vocab_size, cfg.d_model, self.dtype, name="tok_embeddings")(tokens)
        for i in range(cfg.n_layers):
            x = self.block(i)(x, cos, sin)
        x = RMSNorm(cfg.norm_eps, self.dtype, name="norm")(x)
        logits = _dense(cfg.vocab_size, self.dtype, "lm_head")(x)
        return logits.astype(jnp.float32)

    def block(self, i: int) -> nn.Module:
        """Decoder layer ``i`` (called inside ``__call__``); a model variant overrides it and
        keeps everything around the blocks, e.g. ``te_model.TeLlama``."""
        return Block(self.config, self.dtype, self.attention, self.dot_general_cls, name=f"layers_{i}")


def loss_fn(model: Llama, params, batch, extra=None):
    """Mean cross-entropy over all B·S tokens of a [B, S+1] batch (inputs [:, :-1], targets [:, 1:]).
    ``extra``: the recipe's other variable collections ({name: tree}), e.g. fp8 scales."""
    logits = model.apply({"params": params, **(extra or {})}, batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


def param_shapes(model: Llama, seq_len: int = 8) -> dict:
    """The Flax parameter tree of ``model`` as shapes, without allocating (jax.eval_shape)."""
    tokens = jax.ShapeDtypeStruct((1, seq_len), jnp.int32)
    variables = jax.eval_shape(model.init, jax.random.key(0), tokens)
    return jax.tree.map(lambda a: a.shape, variables["params"])


def count_params(model: Llama) -> int:
    shapes = jax.tree.leaves(param_shapes(model), is_leaf=lambda s: isinstance(s, tuple))
    return int(sum(np.prod(s) for s in shapes))
