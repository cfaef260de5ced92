"""JAX runtime pieces shared by training and the parity reference trainer: importing JAX
with the right allocator settings, device choice, the attention implementation, the
optimizer and the jitted step functions."""

from __future__ import annotations

import os
from functools import partial

from parallax.config import ModelConfig, OptimConfig
from parallax.errors import ParallaxError, missing_dependency
from parallax.schedule import lr_at

# The BFC allocator stays (fast), but without grabbing 75% of the GPU up front, so that
# peak_bytes_in_use reflects what the run needs; a user's explicit setting wins.
ALLOCATOR_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def import_jax():
    """Import jax (plus flax and optax) after setting the allocator environment."""
    for key, value in ALLOCATOR_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import jax
    except ImportError as exc:
        raise missing_dependency("jax", "jax") from exc
    for module in ("flax", "optax"):
        try:
            __import__(module)
        except ImportError as exc:
            raise missing_dependency(module, "jax") from exc
    return jax


def resolve_device(name: str):
    """The jax.Device for a --device value: auto, cpu, gpu/cuda, or gpu:N/cuda:N."""
    jax = import_jax()
    kind, _, index = name.partition(":")
    if kind == "auto":
        return jax.devices()[0]
    if kind not in ("cpu", "gpu", "cuda"):
        raise ParallaxError(f"unknown device '{name}' for the JAX engine; use auto, cpu or gpu")
    try:
        devices = jax.devices("cpu" if kind == "cpu" else "gpu")
    except RuntimeError:
        raise ParallaxError(
            "JAX sees no GPU; install the CUDA build with: pip install 'jax[cuda13]', or use --device cpu"
        ) from None
    position = int(index) if index.isdigit() else 0
    if position >= len(devices):
        raise ParallaxError(f"device '{name}' does not exist; JAX sees {len(devices)} {kind} device(s)")
    return devices[position]


def choose_attention(compute_dtype, device, shape: tuple[int, int, int, int]) -> tuple[str, str]:
    """("cudnn" | "xla", why): cuDNN fused attention where it compiles and runs forward and
    backward at ``shape`` = [B, S, heads, head_dim] on ``device``, else XLA's own."""
    import jax
    import jax.numpy as jnp

    if device.platform != "gpu":
        return "xla", f"cuDNN attention needs an NVIDIA GPU (device is {device.platform})"
    if jnp.dtype(compute_dtype) not in (jnp.bfloat16, jnp.float16):
        return "xla", f"cuDNN attention needs bf16/fp16 inputs (compute dtype is {jnp.dtype(compute_dtype)})"

    def total(q, k, v):
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
        return out.astype(jnp.float32).sum()

    try:
        x = jax.device_put(jnp.ones(shape, compute_dtype), device)
        jax.block_until_ready(jax.jit(jax.grad(total, argnums=(0, 1, 2)))(x, x, x))
    except Exception as exc:  # any failure means "not usable here"; the reason is recorded
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return "xla", f"cuDNN attention failed here: {first_line[:200]}"
    return "cudnn", "cuDNN fused attention compiled and ran forward+backward at this shape"


def decay_mask(params):
    """AdamW weight decay on matrices (ndim >= 2: embeddings and linears), not on norm gains."""
    import jax

    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(optim: OptimConfig, total_steps: int):
    """Clip by global norm, then AdamW with the shared schedule. Optax calls the schedule
    with the count of updates already applied, so the k-th update (k from 0) uses lr_at(k),
    as the torch engine does. Two known differences from torch, both far below parity noise:
    clipping scales by max_norm/norm where torch's clip_grad_norm_ uses max_norm/(norm + 1e-6),
    and weight decay is added to the Adam direction (p − lr·(adam + wd·p)) where torch first
    scales p by (1 − lr·wd): the same value, rounded in another order."""
    import jax.numpy as jnp
    import optax

    def schedule(count):
        return lr_at(count, optim, total_steps, xp=jnp)

    return optax.chain(
        optax.clip_by_global_norm(optim.grad_clip),
        optax.adamw(schedule, b1=optim.beta1, b2=optim.beta2, eps=optim.eps,
                    weight_decay=optim.weight_decay, mask=decay_mask),
    )


def train_step(model, tx, params, opt_state, batch):
    """One optimizer step on a [B, S+1] batch; returns (params, opt_state, metrics) where
    metrics = [loss before the step, gradient global norm before clipping] (float32), one
    array so the host reads both with one copy."""
    import jax
    import jax.numpy as jnp
    import optax

    from parallax.engines.jax.model import loss_fn

    loss, grads = jax.value_and_grad(partial(loss_fn, model))(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    metrics = jnp.stack([loss, optax.tree.norm(grads)]).astype(jnp.float32)
    return optax.apply_updates(params, updates), opt_state, metrics


def jit_train_step(model, tx):
    """The jitted step; params and optimizer state are donated (updated in place)."""
    import jax

    return jax.jit(partial(train_step, model, tx), donate_argnums=(0, 1))


def build_model(config: ModelConfig, compute_dtype: str, device, batch_size: int, seq_len: int):
    """(Llama module, attention implementation, why) for this device and shape."""
    import jax.numpy as jnp

    from parallax.engines.jax.model import Llama

    dtype = jnp.dtype(compute_dtype)
    shape = (batch_size, seq_len, config.n_heads, config.head_dim)
    attention, reason = choose_attention(dtype, device, shape)
    return Llama(config, dtype=dtype, attention=attention), attention, reason
