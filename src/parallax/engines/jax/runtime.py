"""JAX runtime pieces shared by training and the parity reference trainer: importing JAX
with the right allocator settings, device choice, the attention implementation, the
optimizer and the jitted step functions."""

from __future__ import annotations

import os
from functools import partial

from parallax.spec.config import ModelConfig, OptimConfig
from parallax.errors import ParallaxError, missing_dependency
from parallax.engines.profiling import OPTIMIZER_SCOPE
from parallax.engines.schedule import lr_at

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


def train_step(model, tx, watched, params, extra, opt_state, batch, gather=None):
    """One optimizer step on a [B, S+1] batch; returns (params, extra, opt_state, metrics).

    ``extra`` holds the recipe's other variable collections (Flax fp8's amax histories and
    scales; {} for bf16). The gradient is taken with respect to params and extra together:
    the fp8 ops' custom_vjp returns each variable's next value as its 'gradient', and that
    value replaces it (Flax's OVERWRITE_WITH_GRADIENT convention). Only params go through
    Optax: clipping, the global norm and AdamW never see the meta 'gradients', which are
    histories of amaxes, not derivatives, and would swamp the norm.

    metrics = [loss before the step, params' gradient global norm before clipping, then the
    gradient norm of each ``watched`` kernel (param tree paths, ``quantized_kernels``)],
    float32, one array so the host reads them with one copy.

    ``gather`` (FSDP, ``parallel.Layout.gather``) turns sharded parameters into whole ones
    where the loss reads them; the gradient then comes back in the parameters' sharding.
    """
    import jax
    import jax.numpy as jnp
    import optax

    from parallax.engines.jax.model import loss_fn

    def loss_of(p, e):
        return loss_fn(model, gather(p) if gather else p, batch, e)

    loss, (grads, extra) = jax.value_and_grad(loss_of, argnums=(0, 1))(params, extra)
    with jax.named_scope(OPTIMIZER_SCOPE):  # how a profile tells the optimizer's fusions (profiling.py)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
    norms = [optax.tree.norm(tree_at(grads, path)) for path in watched]
    metrics = jnp.stack([loss, optax.tree.norm(grads), *norms]).astype(jnp.float32)
    return params, extra, opt_state, metrics


def tree_at(tree, path: tuple[str, ...]):
    """The node of a nested dict at ``path`` (a tuple of keys)."""
    for key in path:
        tree = tree[key]
    return tree


def jit_train_step(model, tx, watched=(), layout=None, state=None):
    """The jitted step; params, extra variables and optimizer state are donated (updated in
    place). ``watched``: param tree paths of kernels whose gradient norms join the metrics.
    On a mesh (``layout``, a ``parallel.Layout`` of several devices), the step keeps the
    shardings of ``state`` = (params, extra, opt_state): the batch is split along the mesh
    and the metrics are replicated."""
    import jax

    if layout is None or layout.single:
        return jax.jit(partial(train_step, model, tx, tuple(watched)), donate_argnums=(0, 1, 2))
    shardings = jax.tree.map(lambda a: a.sharding, tuple(state))
    step = partial(train_step, model, tx, tuple(watched), gather=layout.gather())
    return jax.jit(step, in_shardings=(*shardings, layout.batch_sharding()),
                   out_shardings=(*shardings, layout.replicated()), donate_argnums=(0, 1, 2))


def quantized_kernels(config: ModelConfig, dot_general_cls) -> list[tuple[str, str, str]]:
    """The param tree path (layer, linear, "kernel") of every kernel a recipe's dot_general
    quantizes, layer by layer in BLOCK_LINEARS order; none without one. The numerics guard
    reads their gradient norms."""
    from parallax.engines.jax.model import BLOCK_LINEARS

    if dot_general_cls is None:
        return []
    # An op that quantizes only some blocks says which (the emulated NVFP4 op's quantized_layers).
    layers = getattr(dot_general_cls, "quantized_layers", range(config.n_layers))
    return [(f"layers_{i}", name, "kernel") for i in layers for name in BLOCK_LINEARS]


def init_extra(model, collections: tuple[str, ...], batch_shape: tuple[int, int], device) -> dict:
    """The initial values of the recipe's collections (``model.init`` without params: jit
    drops the parameter initialisers it does not return); {} when there are none."""
    import jax
    import jax.numpy as jnp

    if not collections:
        return {}

    def init(key, tokens):
        variables = model.init(key, tokens)
        return {c: variables[c] for c in collections}

    with jax.default_device(device):
        return jax.jit(init)(jax.random.key(0), jnp.zeros(batch_shape, jnp.int32))


def build_model(config: ModelConfig, compute_dtype: str, device, batch_size: int, seq_len: int,
                dot_general_cls=None, module=None, attention: str | None = None):
    """(Flax module, attention implementation, why) for this device and shape: the plain Llama
    with ``dot_general_cls`` (a recipe's) in the block linears, or what ``module(config, dtype,
    attention)`` builds (a recipe's own model, e.g. TransformerEngine's, ``JaxHooks.model``).
    ``attention`` (cudnn or xla) overrides the choice (``choose_attention``)."""
    import jax.numpy as jnp

    from parallax.engines.jax.model import Llama

    dtype = jnp.dtype(compute_dtype)
    shape = (batch_size, seq_len, config.n_heads, config.head_dim)
    if attention is None:
        attention, reason = choose_attention(dtype, device, shape)
    else:
        reason = "asked for"
    if module is not None:
        return module(config, dtype, attention), attention, reason
    model = Llama(config, dtype=dtype, attention=attention, dot_general_cls=dot_general_cls)
    return model, attention, reason
