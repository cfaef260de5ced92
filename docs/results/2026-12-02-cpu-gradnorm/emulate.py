"""The jax engine's model, loss, optimizer and batches (TokenBatches) on the tiny run of cfg-jax.json,
optionally with MaxText's query parametrization ('q': kernel stored as wq/sqrt(head_dim), gradient wrt it)
and MaxText's warm-up ('lag': lr*step/W)."""
import sys, json, math
from pathlib import Path
import numpy as np, jax, jax.numpy as jnp, optax
from parallax.config import RunConfig
from parallax.data.loader import TokenBatches
from parallax.engines.jax.model import Llama, loss_fn
from parallax.engines.jax.runtime import decay_mask
from parallax.engines.jax.convert import to_flax
from parallax.weights import init_weights
from parallax.schedule import lr_at

variant = sys.argv[1]
run = RunConfig.from_dict(json.load(open(Path(__file__).with_name("cfg-jax.json"))))
cfg, optim, steps, W = run.model_config, run.optim, run.steps, run.optim.lr_warmup_steps
model = Llama(cfg, dtype=jnp.bfloat16, attention="xla")
params = jax.tree.map(jnp.asarray, to_flax(init_weights(cfg, run.seed), cfg))
s = math.sqrt(cfg.head_dim)
reparam, lag = "q" in variant, "lag" in variant

def scale_q(p, f):
    p = dict(p)
    for i in range(cfg.n_layers):
        layer = dict(p[f"layers_{i}"]); layer["wq"] = {"kernel": layer["wq"]["kernel"] * f}; p[f"layers_{i}"] = layer
    return p

if reparam:
    params = scale_q(params, 1 / s)
def sched(count):
    ours = lr_at(count, optim, steps, xp=jnp)
    return jnp.where(count < W, optim.lr * count / W, ours) if lag else ours
tx = optax.chain(optax.clip_by_global_norm(optim.grad_clip),
                 optax.adamw(sched, b1=optim.beta1, b2=optim.beta2, eps=optim.eps, weight_decay=optim.weight_decay,
                             mask=decay_mask))
opt = tx.init(params)

@jax.jit
def step(params, opt, b):
    loss, g = jax.value_and_grad(lambda p: loss_fn(model, scale_q(p, s) if reparam else p, b))(params)
    qn = jnp.sqrt(sum(jnp.sum(jnp.square(g[f"layers_{i}"]["wq"]["kernel"])) for i in range(cfg.n_layers)))
    up, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, up), opt, loss, optax.tree.norm(g), qn, optax.tree.norm(params)

out = []
with TokenBatches.from_run(run) as batches:
    for k, b in zip(range(steps), batches):
        params, opt, loss, gn, qn, pn = step(params, opt, jnp.asarray(np.asarray(b)))
        out.append({"step": k, "loss": float(loss), "grad_norm": float(gn), "q_norm": float(qn), "param_norm": float(pn)})
json.dump(out, open(Path(__file__).with_name(f"emu-{variant}.json"), "w"))
print(variant, "done", out[-1])
