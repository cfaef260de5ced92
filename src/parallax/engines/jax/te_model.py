"""The Flax LLaMA of ``model.py`` with its blocks built from TransformerEngine's JAX modules
(``transformer_engine.jax.flax``, TE 2.20).

Each block holds the three TE modules whose GEMMs TE runs in fp8 under its autocast:

- ``qkv``: ``LayerNormDenseGeneral(3·H·hd, layernorm_type="rmsnorm")``, the attention RMSNorm
  fused into the QKV projection: ``scale`` is ``attention_norm``, ``kernel`` [d, 3·H·hd] is
  [wq | wk | wv] along its output axis;
- ``wo``: ``DenseGeneral(d)``, ``kernel`` [H·hd, d];
- ``mlp``: ``LayerNormMLP(d_ff, layernorm_type="rmsnorm", activations=("silu", "linear"))``:
  ``scale`` is ``ffn_norm``, ``wi_kernel`` [d, 2, d_ff] stacks (w_gate, w_up) on axis 1,
  ``wo_kernel`` [d_ff, d] is w_down.

SwiGLU order: TE's JAX gated activations split ``wi_kernel``'s output on its stacking axis (-2)
and apply ``activations[k]`` to slice k, then multiply (``cpp_extensions/activation.py``
``_jax_act_lu``, the reference TE's own tests check the fused kernel against); ("silu",
"linear") is TE's SWIGLU. So slice 0 is the gate and slice 1 the up projection, our
[w_gate; w_up] order — the same order TE torch's fc1 has (``engines/torch/te_model.py``). TE
reverses an activation list that starts with "linear", so ("linear", "silu") would mean the
same thing: the SiLU always goes to slice 0.

Between the TE modules runs the plain model's code: the head split, the half-split RoPE in
float32 and ``jax.nn.dot_product_attention`` with the implementation the engine chose. The
embedding, final RMSNorm, lm_head and float32 loss are the plain model's (``TeLlama`` only
replaces ``Llama.block``): the first and last layers are never fp8.

Parameters are float32 (the TE modules' ``dtype`` is their parameter dtype); TE computes in the
dtype of its input, the bf16 residual stream, and returns that dtype. Without an fp8 recipe TE
casts the kernels to bf16 and runs its RMSNorm and dense unfused; with DelayedScaling it fuses
the RMSNorm into the fp8 cast (``layernorm_dense``, ``layernorm_mlp``) and keeps, per GEMM, a
scale and an amax history for x, the kernel and the output gradient in the ``fp8_metas``
collection (``recipes/te.py``).

TransformerEngine is imported only when a block is traced; the converters at the bottom work
on plain dicts of arrays, so they need neither TE nor a GPU.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from parallax.spec.config import ModelConfig
from parallax.engines.jax.convert import flax_path
from parallax.engines.jax.model import Llama, apply_rope, causal_attention
from parallax.engines.weights import check_canonical

# The parts of one layer's canonical weights in each TE parameter, in the order they are laid out.
QKV = ("wq", "wk", "wv")  # qkv/kernel [d, 3·H·hd]: column blocks
GATE_UP = ("w_gate", "w_up")  # mlp/wi_kernel [d, 2, d_ff]: slices of axis 1
WHOLE = {"attention_norm": ("qkv", "scale"), "wo": ("wo", "kernel"),
         "ffn_norm": ("mlp", "scale"), "w_down": ("mlp", "wo_kernel")}
# The TE kernels of a layer whose GEMMs run in fp8, with the canonical weights each holds.
TE_KERNELS = ((("qkv", "kernel"), "+".join(QKV)), (("wo", "kernel"), "wo"),
              (("mlp", "wi_kernel"), "+".join(GATE_UP)), (("mlp", "wo_kernel"), "w_down"))


class TeBlock(nn.Module):
    config: ModelConfig
    dtype: object
    attention: str

    @nn.compact
    def __call__(self, x, cos, sin):
        from transformer_engine.jax import flax as te_flax

        cfg = self.config
        batch, seq, _ = x.shape
        heads, hd = cfg.n_heads, cfg.head_dim

        qkv, _ = te_flax.LayerNormDenseGeneral(3 * heads * hd, layernorm_type="rmsnorm", epsilon=cfg.norm_eps,
                                               use_bias=False, dtype=jnp.float32, name="qkv")(x)
        q, k, v = (qkv.reshape(batch, seq, 3, heads, hd)[:, :, j] for j in range(3))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = causal_attention(q, k, v, self.attention)
        x = x + te_flax.DenseGeneral(cfg.d_model, use_bias=False, dtype=jnp.float32,
                                     name="wo")(a.reshape(batch, seq, heads * hd))

        y, _ = te_flax.LayerNormMLP(intermediate_dim=cfg.d_ff, layernorm_type="rmsnorm", epsilon=cfg.norm_eps,
                                    activations=("silu", "linear"), use_bias=False, intermediate_dropout_rate=0.0,
                                    dtype=jnp.float32, name="mlp")(x, deterministic=True)
        return x + y


class TeLlama(Llama):
    """``Llama`` with TE blocks: tokens [B, S] int -> logits [B, S, vocab] float32."""

    def block(self, i: int) -> nn.Module:
        return TeBlock(self.config, self.dtype, self.attention, name=f"layers_{i}")


def quantized_kernels(config: ModelConfig) -> list[tuple[tuple[str, ...], str]]:
    """(param tree path, name) of every TE kernel, layer by layer; the name lists the canonical
    weights the kernel holds, e.g. ``layers.0.wq+wk+wv``."""
    return [((f"layers_{i}", *path), f"layers.{i}.{name}") for i in range(config.n_layers)
            for path, name in TE_KERNELS]


# ---- canonical weights <-> TE Flax params, on plain dicts of arrays (exact: only copies)

def to_te_flax(weights: dict[str, np.ndarray], config: ModelConfig) -> dict:
    """Nested TE-model params (NumPy float32 leaves) from canonical ``weights``."""
    check_canonical(config, weights)
    w = {name: np.asarray(value, dtype=np.float32) for name, value in weights.items()}
    tree: dict = {}
    for name in ("tok_embeddings", "norm", "lm_head"):
        module, leaf = flax_path(name)
        tree[module] = {leaf: w[name]}
    for i in range(config.n_layers):
        p = f"layers.{i}."
        layer = {"qkv": {}, "wo": {}, "mlp": {}}
        for name, (module, leaf) in WHOLE.items():
            layer[module][leaf] = w[p + name]
        layer["qkv"]["kernel"] = np.concatenate([w[p + n] for n in QKV], axis=1)
        layer["mlp"]["wi_kernel"] = np.stack([w[p + n] for n in GATE_UP], axis=1)
        tree[f"layers_{i}"] = layer
    return tree


def from_te_flax(params, config: ModelConfig) -> dict[str, np.ndarray]:
    """Canonical float32 weights (in ``config.param_shapes()`` order) from a TE-model param
    tree or its gradients (dicts or FrozenDicts; device arrays are copied to the host)."""

    def get(*path):
        node = params
        for key in path:
            node = node[key]
        return np.asarray(node, dtype=np.float32)

    out: dict[str, np.ndarray] = {}
    for name in config.param_shapes():
        if not name.startswith("layers."):
            out[name] = get(*flax_path(name))
            continue
        _, i, leaf = name.split(".")
        layer = f"layers_{i}"
        if leaf in WHOLE:
            out[name] = get(layer, *WHOLE[leaf])
        elif leaf in QKV:
            out[name] = np.split(get(layer, "qkv", "kernel"), len(QKV), axis=1)[QKV.index(leaf)].copy()
        else:
            out[name] = get(layer, "mlp", "wi_kernel")[:, GATE_UP.index(leaf), :].copy()
    check_canonical(config, out)
    return out
