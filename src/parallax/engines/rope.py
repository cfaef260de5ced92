"""The RoPE tables both engines use, computed once in NumPy so they match bit for bit.

Half-split ("rotate_half") convention: angle = pos · θ^(-2i/head_dim) for i in [0, head_dim/2),
repeated for both halves. The angles are computed in float64 and rounded once to float32, so
the tables do not depend on a framework's pow/sin/cos kernels.
"""

from __future__ import annotations

import numpy as np


def rope_tables(seq_len: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin, [seq_len, head_dim] float32: angle = pos · θ^(-2i/head_dim), both halves."""
    i = np.arange(head_dim // 2, dtype=np.float64)
    inv_freq = theta ** (-2.0 * i / head_dim)
    angle = np.arange(seq_len, dtype=np.float64)[:, None] * inv_freq[None, :]
    angle = np.concatenate([angle, angle], axis=-1)
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
