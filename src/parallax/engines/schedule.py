"""The learning-rate schedule every engine uses: linear warmup, then cosine decay.

Step numbers are 0-based optimizer steps. For step < W: lr·(step+1)/W. After it, cosine from
lr down to lr·min_lr_ratio at the last step. ``xp`` is ``math``-like: pass ``numpy`` or
``jax.numpy`` to evaluate it on arrays (the JAX engine traces it inside Optax).
"""

from __future__ import annotations

import numpy as np

from parallax.spec.config import OptimConfig


def lr_at(step, optim: OptimConfig, total_steps: int, xp=np):
    peak = optim.lr
    floor = optim.lr * optim.min_lr_ratio
    warm = max(optim.lr_warmup_steps, 0)
    warmup_lr = peak * (step + 1) / max(warm, 1)
    span = max(total_steps - 1 - warm, 1)
    progress = xp.clip((step - warm) / span, 0.0, 1.0)
    cosine_lr = floor + 0.5 * (peak - floor) * (1.0 + xp.cos(np.pi * progress))
    return xp.where(step < warm, warmup_lr, cosine_lr)
