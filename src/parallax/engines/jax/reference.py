"""The JAX ReferenceTrainer (engines/base.py): the training model and optimizer, synchronous
and untimed, speaking canonical NumPy float32 for ``parallax parity``."""

from __future__ import annotations

import contextlib

import numpy as np

from parallax.spec.config import RunConfig
from parallax.engines.jax.convert import from_flax, to_flax
from parallax.engines.jax.runtime import build_model, import_jax, jit_train_step, make_optimizer, resolve_device
from parallax.engines.jax.recipes.select import check_compute_dtype


class JaxReferenceTrainer:
    def __init__(self, run: RunConfig, weights: dict[str, np.ndarray], compute_dtype: str, device: str):
        jax = import_jax()
        from parallax.engines.jax.model import loss_fn

        self.compute_dtype = check_compute_dtype(compute_dtype)
        self.device = resolve_device(device)
        config = run.model_config
        self.model, self.attention_backend, self.attention_reason = build_model(
            config, compute_dtype, self.device, run.batch_size, run.seq_len)
        self._params = jax.device_put(to_flax(weights, config), self.device)
        tx = make_optimizer(run.optim, run.steps)
        self._opt_state = jax.device_put(tx.init(self._params), self.device)
        self._extra = {}  # reference runs use XLA's dots: no recipe variables
        model = self.model
        self._logits = jax.jit(lambda p, tokens: model.apply({"params": p}, tokens))
        self._loss_and_grads = jax.jit(jax.value_and_grad(lambda p, b: loss_fn(model, p, b)))
        self._step = jit_train_step(model, tx)

    def _precision(self):
        """float32 compute means float32 matmuls (no TF32 on GPUs); bf16 keeps the default."""
        import jax

        if self.compute_dtype == "float32":
            return jax.default_matmul_precision("highest")
        return contextlib.nullcontext()

    def _put(self, batch: np.ndarray):
        import jax

        return jax.device_put(np.asarray(batch, dtype=np.int32), self.device)

    def logits(self, batch: np.ndarray) -> np.ndarray:
        with self._precision():
            out = self._logits(self._params, self._put(batch)[:, :-1])
        return np.asarray(out, dtype=np.float32)

    def loss_and_grads(self, batch: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        with self._precision():
            loss, grads = self._loss_and_grads(self._params, self._put(batch))
        return float(loss), from_flax(grads)

    def step(self, batch: np.ndarray) -> float:
        with self._precision():
            self._params, self._extra, self._opt_state, metrics = self._step(
                self._params, self._extra, self._opt_state, self._put(batch))
        return float(metrics[0])

    def params(self) -> dict[str, np.ndarray]:
        return from_flax(self._params)
