"""Canonical weights (``parallax.engines.weights``) <-> the Flax parameter tree of ``model.Llama``.

The canonical layout already stores linear weights [in, out], which is Flax's ``Dense``
kernel layout, so conversion only renames: values are copied bit for bit both ways.

  tok_embeddings         <-> tok_embeddings/embedding
  layers.{i}.<norm>      <-> layers_{i}/<norm>/scale      (attention_norm, ffn_norm)
  layers.{i}.<linear>    <-> layers_{i}/<linear>/kernel   (wq wk wv wo w_gate w_up w_down)
  norm                   <-> norm/scale
  lm_head                <-> lm_head/kernel
"""

from __future__ import annotations

import numpy as np

from parallax.spec.config import ModelConfig
from parallax.engines.weights import check_canonical

NORMS = ("attention_norm", "ffn_norm", "norm")


def flax_path(name: str) -> tuple[str, ...]:
    """The Flax tree path of canonical parameter ``name``."""
    if name == "tok_embeddings":
        return ("tok_embeddings", "embedding")
    parts = name.split(".")
    if parts[0] == "layers":
        prefix, leaf = (f"layers_{parts[1]}",), parts[2]
    else:
        prefix, leaf = (), parts[0]
    return prefix + (leaf, "scale" if leaf in NORMS else "kernel")


def canonical_name(path: tuple[str, ...]) -> str:
    """The canonical name of Flax tree ``path`` (inverse of ``flax_path``)."""
    if path == ("tok_embeddings", "embedding"):
        return "tok_embeddings"
    *modules, _leaf = path
    if modules[0].startswith("layers_"):
        return f"layers.{modules[0][len('layers_'):]}.{modules[1]}"
    return modules[0]


def to_flax(weights: dict[str, np.ndarray], model: ModelConfig) -> dict:
    """Nested Flax params (NumPy float32 leaves) from canonical ``weights``; checks names and shapes."""
    check_canonical(model, weights)
    tree: dict = {}
    for name, value in weights.items():
        node = tree
        *modules, leaf = flax_path(name)
        for module in modules:
            node = node.setdefault(module, {})
        node[leaf] = np.asarray(value, dtype=np.float32)
    return tree


def from_flax(params) -> dict[str, np.ndarray]:
    """Canonical float32 NumPy weights from a Flax param tree (device arrays are copied to host)."""
    out = {}

    def visit(node, path):
        if isinstance(node, dict) or hasattr(node, "items"):
            for key, child in node.items():
                visit(child, path + (key,))
        else:
            out[canonical_name(path)] = np.asarray(node, dtype=np.float32)

    visit(params, ())
    return out
