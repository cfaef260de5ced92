"""Our jax engine's train step vs the same step with MaxText's query parametrization
(query kernel stored as wq/sqrt(head_dim), no 1/sqrt(head_dim) in attention) and/or MaxText's lr lag."""
import sys, json, math
from pathlib import Path
import numpy as np, jax, jax.numpy as jnp, optax
from parallax.config import ModelConfig, OptimConfig, PRESETS
from parallax.engines.jax.model import Llama, loss_fn
from parallax.engines.jax.runtime import make_optimizer, decay_mask
from parallax.engines.jax.convert import to_flax
from parallax.weights import init_weights
from parallax.schedule import lr_at

shape = sys.argv[1]; steps = int(sys.argv[2]); variant = sys.argv[3]
if shape == "tiny":
    cfg = PRESETS["tiny"]
else:  # head_dim 64 as llama-100m
    cfg = ModelConfig(name="hd64", vocab_size=10_000, d_model=128, n_layers=2, n_heads=2, d_ff=256, max_seq_len=128)
B, S, W = 8, 128, 20
optim = OptimConfig(lr=6e-4, min_lr_ratio=0.1, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0, lr_warmup_steps=W)
raw = np.memmap("/tmp/mtw/ts/train.bin", dtype="<u2", mode="r", offset=64)
rng = np.random.default_rng(0)
n_win = (len(raw) - 1) // S
order = rng.permutation(n_win)
def batch(k):
    idx = [order[(k * B + r) % n_win] for r in range(B)]
    return jnp.asarray(np.stack([raw[i * S:i * S + S + 1] for i in idx]).astype(np.int32))

model = Llama(cfg, dtype=jnp.bfloat16, attention="xla")
params = jax.tree.map(jnp.asarray, to_flax(init_weights(cfg, 0), cfg))
s = math.sqrt(cfg.head_dim)
reparam = "q" in variant
lag = "lag" in variant
def scale_q(p, f):
    p = jax.tree.map(lambda x: x, p)
    for i in range(cfg.n_layers):
        p[f"layers_{i}"] = dict(p[f"layers_{i}"]); p[f"layers_{i}"]["wq"] = {"kernel": p[f"layers_{i}"]["wq"]["kernel"] * f}
    return p
if reparam:
    params = scale_q(params, 1 / s)
def sched(count):
    ours = lr_at(count, optim, steps, xp=jnp)
    if not lag:
        return ours
    return jnp.where(count < W, optim.lr * count / W, ours)
tx = optax.chain(optax.clip_by_global_norm(optim.grad_clip),
                 optax.adamw(sched, b1=optim.beta1, b2=optim.beta2, eps=optim.eps, weight_decay=optim.weight_decay, mask=decay_mask))
opt = tx.init(params)

@jax.jit
def step(params, opt, b):
    def L(p):
        return loss_fn(model, scale_q(p, s) if reparam else p, b)
    loss, g = jax.value_and_grad(L)(params)
    qn = jnp.sqrt(sum(jnp.sum(jnp.square(g[f"layers_{i}"]["wq"]["kernel"])) for i in range(cfg.n_layers)))
    up, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, up), opt, loss, optax.tree.norm(g), qn
out = []
for k in range(steps):
    params, opt, loss, gn, qn = step(params, opt, batch(k))
    out.append({"step": k, "loss": float(loss), "grad_norm": float(gn), "q_norm": float(qn)})
json.dump(out, open(Path(__file__).with_name(f"{shape}-{variant}.json"), "w"))
for k in [0, 1, 2, 5, 10, 20, 30, 50, 75, 100, 149, 199, 299]:
    if k < steps: print(variant, k, round(out[k]["loss"], 4), round(out[k]["grad_norm"], 4), "q", round(out[k]["q_norm"], 4))
