"""Canonical weights (``parallax.engines.weights``) to and from the torch ``Llama`` state dict.

Canonical linear weights are [in, out] (y = x @ W); ``nn.Linear`` stores [out, in], so every
linear is transposed. The fused torch layers concatenate along the output dimension:
``wqkv`` = [wq; wk; wv] and ``w_gate_up`` = [w_gate; w_up]. Both directions are exact
(transposes and concatenations only), so a round trip gives the same bits.
"""

from __future__ import annotations

import numpy as np
import torch

from parallax.spec.config import ModelConfig
from parallax.engines.weights import check_canonical


def _linear(w: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(np.asarray(w, dtype=np.float32).T))


def _tensor(w: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(w, dtype=np.float32))


def to_torch_state(model: ModelConfig, weights: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """The ``Llama`` state dict (float32, CPU) holding canonical ``weights``."""
    check_canonical(model, weights)
    state = {
        "tok_embeddings.weight": _tensor(weights["tok_embeddings"]),
        "norm.weight": _tensor(weights["norm"]),
        "lm_head.weight": _linear(weights["lm_head"]),
    }
    for i in range(model.n_layers):
        p = f"layers.{i}."  # the same prefix in both layouts
        state[p + "attention_norm.weight"] = _tensor(weights[p + "attention_norm"])
        state[p + "ffn_norm.weight"] = _tensor(weights[p + "ffn_norm"])
        qkv = np.concatenate([weights[p + n] for n in ("wq", "wk", "wv")], axis=1)
        state[p + "attention.wqkv.weight"] = _linear(qkv)
        state[p + "attention.wo.weight"] = _linear(weights[p + "wo"])
        gate_up = np.concatenate([weights[p + "w_gate"], weights[p + "w_up"]], axis=1)
        state[p + "feed_forward.w_gate_up.weight"] = _linear(gate_up)
        state[p + "feed_forward.w_down.weight"] = _linear(weights[p + "w_down"])
    return state


def from_torch_state(model: ModelConfig, state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Canonical float32 NumPy arrays from a ``Llama`` state dict (or a dict of its gradients)."""

    def arr(name: str) -> np.ndarray:
        return state[name].detach().to("cpu", torch.float32).numpy()

    def linear(name: str) -> np.ndarray:
        return np.ascontiguousarray(arr(name).T)

    width = model.n_heads * model.head_dim
    out = {"tok_embeddings": arr("tok_embeddings.weight").copy()}
    for i in range(model.n_layers):
        p = f"layers.{i}."
        out[p + "attention_norm"] = arr(p + "attention_norm.weight").copy()
        qkv = linear(p + "attention.wqkv.weight")
        for j, n in enumerate(("wq", "wk", "wv")):
            out[p + n] = np.ascontiguousarray(qkv[:, j * width:(j + 1) * width])
        out[p + "wo"] = linear(p + "attention.wo.weight")
        out[p + "ffn_norm"] = arr(p + "ffn_norm.weight").copy()
        gate_up = linear(p + "feed_forward.w_gate_up.weight")
        out[p + "w_gate"] = np.ascontiguousarray(gate_up[:, :model.d_ff])
        out[p + "w_up"] = np.ascontiguousarray(gate_up[:, model.d_ff:])
        out[p + "w_down"] = linear(p + "feed_forward.w_down.weight")
    out["norm"] = arr("norm.weight").copy()
    out["lm_head"] = linear("lm_head.weight")
    return out
