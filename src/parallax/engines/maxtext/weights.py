"""Canonical weights (``parallax.engines.weights``) -> MaxText 0.2.5's parameter tree of our llama2 model.

NumPy only: the engine's child process (``initial_weights.py``) runs it in MaxText's environment,
and CI tests it without MaxText. Paths are MaxText's NNX state paths joined by ``/`` (read from its
abstract model, ``create_nnx_abstract_model``; ``tests/fixtures/maxtext_0_2_5_param_tree_*.txt``):

  tok_embeddings          -> token_embedder/embedding                     [vocab, d]
  layers.{i}.wq           -> decoder/layers_{i}/self_attention/query/kernel  [d, heads, head_dim] / sqrt(head_dim)
  layers.{i}.wk, wv       -> .../self_attention/key, value/kernel         [d, heads, head_dim]
  layers.{i}.wo           -> .../self_attention/out/kernel                [heads, head_dim, d]
  layers.{i}.w_gate, w_up -> .../mlp/wi_0, wi_1/kernel (silu, linear)     [d, d_ff]
  layers.{i}.w_down       -> .../mlp/wo/kernel                            [d_ff, d]
  layers.{i}.attention_norm, ffn_norm -> .../pre_, post_self_attention_layer_norm/scale
  norm                    -> decoder/decoder_norm/scale
  lm_head                 -> decoder/logits_dense/kernel                  [d, vocab]

With ``scan_layers: true`` the layers are one stacked tree, ``decoder/layers/...``, each leaf with
the layer index inserted at ``param_scan_axis`` (base.yml: 1), e.g. query [d, L, heads, head_dim].

Two facts of MaxText's function decide the values, both read from MaxText 0.2.5's code:

- **Query scale.** Its attention computes softmax(q·k) with no 1/sqrt(head_dim) (``attention_op``:
  the dot-product path has none, cuDNN's is called with ``scale=1.0``); the scale is folded into
  the query kernel's initializer instead (``attentions.init_query_w``: ``kernel_init /
  sqrt(head_dim)``). Our engines scale in the attention op, so the query kernel is ``wq /
  sqrt(head_dim)``: the same function (exact in bf16 too where sqrt(head_dim) is a power of two,
  as for every preset of head_dim 16 or 64). Not the same parametrization: MaxText's gradient for
  this kernel is sqrt(head_dim) times ours, so under AdamW its query moves sqrt(head_dim) times
  as far per step (weight decay the same), and its gradient norm weighs the query more
  (docs/results/2026-12-02-cpu-gradnorm/).
- **RoPE.** MaxText's llama2 (``rope_type: default``) uses ``embeddings.RotaryEmbedding``:
  half-split (``_rotate_half``: (x1, x2) -> (-x2, x1) over the two halves of head_dim), angle
  pos / (θ^(2i/head_dim)), i < head_dim/2, both halves: ``parallax.engines.rope``'s convention exactly,
  so the q and k kernels need no permutation of their head dimensions.
"""

from __future__ import annotations

import math

import numpy as np

from parallax.spec.config import ModelConfig
from parallax.errors import ParallaxError
from parallax.engines.weights import check_canonical

SEP = "/"


def layer_leaves(weights: dict[str, np.ndarray], model: ModelConfig, i: int) -> dict[str, np.ndarray]:
    """Layer ``i``'s MaxText leaves, by their path inside the layer."""
    d, heads, hd = model.d_model, model.n_heads, model.head_dim
    w = lambda name: np.asarray(weights[f"layers.{i}.{name}"], dtype=np.float32)
    by_head = lambda name: w(name).reshape(d, heads, hd)
    return {
        "mlp/wi_0/kernel": w("w_gate"),
        "mlp/wi_1/kernel": w("w_up"),
        "mlp/wo/kernel": w("w_down"),
        "post_self_attention_layer_norm/scale": w("ffn_norm"),
        "pre_self_attention_layer_norm/scale": w("attention_norm"),
        "self_attention/key/kernel": by_head("wk"),
        "self_attention/out/kernel": w("wo").reshape(heads, hd, d),
        "self_attention/query/kernel": by_head("wq") / np.float32(math.sqrt(hd)),
        "self_attention/value/kernel": by_head("wv"),
    }


def to_maxtext(weights: dict[str, np.ndarray], model: ModelConfig, scan_axis: int | None = None) -> dict[str, np.ndarray]:
    """MaxText's flat parameter tree ({path: float32 array}) of canonical ``weights``.

    ``scan_axis``: None for ``scan_layers: false`` (``decoder/layers_{i}/...``), else MaxText's
    ``param_scan_axis`` (the layers stacked on that axis under ``decoder/layers/...``)."""
    check_canonical(model, weights)
    layers = [layer_leaves(weights, model, i) for i in range(model.n_layers)]
    tree = {
        "decoder/decoder_norm/scale": np.asarray(weights["norm"], dtype=np.float32),
        "decoder/logits_dense/kernel": np.asarray(weights["lm_head"], dtype=np.float32),
        "token_embedder/embedding": np.asarray(weights["tok_embeddings"], dtype=np.float32),
    }
    if scan_axis is None:
        for i, leaves in enumerate(layers):
            tree.update({f"decoder/layers_{i}/{path}": value for path, value in leaves.items()})
    else:
        for path in layers[0]:
            tree[f"decoder/layers/{path}"] = np.stack([leaves[path] for leaves in layers], axis=scan_axis)
    return dict(sorted(tree.items()))


def check_tree(tree: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]]) -> None:
    """A ParallaxError naming the first path (in sorted order) where ``tree`` and MaxText's
    ``expected`` {path: shape} disagree: a path one lacks, or another shape."""
    for path in sorted(set(tree) | set(expected)):
        if path not in expected:
            raise ParallaxError(f"MaxText's parameter tree has no '{path}', which the converted weights hold: "
                                "this MaxText's model is not the one parallax.engines.maxtext.weights writes")
        if path not in tree:
            raise ParallaxError(f"the converted weights lack MaxText's parameter '{path}' {tuple(expected[path])}")
        if tuple(tree[path].shape) != tuple(expected[path]):
            raise ParallaxError(f"MaxText's parameter '{path}' has shape {tuple(expected[path])}; the converted "
                                f"weights give {tuple(tree[path].shape)}")


def nested(tree: dict[str, np.ndarray]) -> dict:
    """The flat tree as nested dicts (what Orbax saves)."""
    out: dict = {}
    for path, value in tree.items():
        *modules, leaf = path.split(SEP)
        node = out
        for module in modules:
            node = node.setdefault(module, {})
        node[leaf] = value
    return out


def read_tree_fixture(text: str) -> dict[str, tuple[int, ...]]:
    """{path: shape} from lines ``path<TAB>d0,d1,...`` (the committed fixtures; ``#`` comments)."""
    found = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            path, _, dims = line.partition("\t")
            found[path] = tuple(int(n) for n in dims.split(",") if n)
    return found
