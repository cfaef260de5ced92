"""Cross-framework parity: the torch and JAX engines on the same weights and batches.

Both engines' ReferenceTrainers (engines/base.py) are built from one ``init_weights`` and fed
the same synthetic batches; we compare the logits and loss of batch 0, every gradient of
batch 0, the losses of N optimizer steps, and the parameters after them (and their change
from the initial weights, which is far more sensitive than the parameters themselves).

Error measures, torch taken as the reference b and JAX as a:
  max abs  = max |a − b| over the elements of a tensor;
  max rel  = max |a − b| / max |b|, per tensor (for a scalar: |a − b| / |b|).
For a family of tensors (gradients, parameters) the row shows the worst tensor and names it.
A per-tensor max-normalised error does not blow up on elements that happen to be near zero,
which an element-wise relative error would.

Tolerances are per compute dtype. float32 rows gate the result (the CLI exits 1 on a
failure); bfloat16 rows are report-only: the two frameworks round in different places
(fusions, accumulation order, attention kernels), so bf16 agreement is an observation
documented in docs/results/, not a pass/fail criterion.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from parallax.config import RunConfig
from parallax.data.synthetic import synthetic_batch
from parallax.errors import ParallaxError
from parallax.weights import init_weights

DTYPES = ("float32", "bfloat16")
DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class Tolerances:
    """Maximum ``max rel`` per quantity, and whether exceeding one fails the check."""

    logits: float
    loss: float
    grads: float
    step_losses: float
    params: float
    updates: float
    gate: bool


TOLERANCES = {
    # float32: both frameworks do the same float32 arithmetic in a different order; observed
    # errors on the CPU (tiny, B2 S32, 3 steps) are 10-1000x below these bounds.
    # loss 1e-5 and grads 1e-4 are the project's acceptance thresholds.
    "float32": Tolerances(logits=1e-5, loss=1e-5, grads=1e-4, step_losses=1e-5, params=1e-6,
                          updates=1e-3, gate=True),
    # bfloat16 (unit roundoff u = 2^-8 ≈ 3.9e-3): report-only bounds of a few u for the
    # quantities that average over many terms (loss), larger for single elements (logits) and
    # for gradients, which go through every rounding of the forward and backward pass.
    "bfloat16": Tolerances(logits=5e-2, loss=1e-2, grads=1e-1, step_losses=1e-2, params=1e-2,
                           updates=2.0, gate=False),
}


@dataclass
class Row:
    quantity: str
    max_abs: float
    max_rel: float
    tolerance: float
    worst: str = ""  # the tensor with the largest max_rel, for families of tensors

    @property
    def within(self) -> bool:
        return bool(np.isfinite(self.max_rel)) and self.max_rel <= self.tolerance


@dataclass
class ParityReport:
    settings: dict
    rows: list[Row]
    gate: bool
    backends: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """False only when a gated row is out of tolerance."""
        return not self.gate or all(row.within for row in self.rows)

    def to_dict(self) -> dict:
        rows = [{**asdict(row), "within": row.within} for row in self.rows]
        return {"settings": self.settings, "backends": self.backends, "gate": self.gate,
                "passed": self.passed, "rows": rows}


def errors(a, b) -> tuple[float, float]:
    """(max |a − b|, max |a − b| / max |b|) of two arrays or scalars (b is the reference)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    if scale == 0.0:
        return diff, 0.0 if diff == 0.0 else float("inf")
    return diff, diff / scale


def tensor_row(quantity: str, a: dict, b: dict, tolerance: float) -> Row:
    """The worst tensor of two canonical dicts with the same names."""
    if set(a) != set(b):
        raise ValueError(f"{quantity}: tensor names differ: {sorted(set(a) ^ set(b))[:3]}")
    worst = Row(quantity, 0.0, 0.0, tolerance)
    for name in sorted(a):
        max_abs, max_rel = errors(a[name], b[name])
        worst.max_abs = max(worst.max_abs, max_abs)
        if not max_rel <= worst.max_rel:  # also takes NaN
            worst.max_rel, worst.worst = max_rel, name
    return worst


def parity_run(model: str, batch_size: int, seq_len: int, steps: int, seed: int, device: str) -> RunConfig:
    """The RunConfig both reference trainers get (its optimizer and schedule over ``steps``)."""
    return RunConfig(model=model, batch_size=batch_size, seq_len=seq_len, steps=steps, warmup=0,
                     seed=seed, device=device).validate()


def run_parity(model: str = "tiny", batch_size: int = 2, seq_len: int = 32, steps: int = 3, seed: int = 0,
               dtype: str = "float32", device: str = "cpu") -> ParityReport:
    """Build both engines' reference trainers from the same weights and batches and compare."""
    from parallax.engines import get_engine

    if dtype not in DTYPES:
        raise ParallaxError(f"unknown --dtype '{dtype}'; choose one of: {', '.join(DTYPES)}")
    if device not in DEVICES:
        raise ParallaxError(f"unknown --device '{device}'; choose one of: {', '.join(DEVICES)}")
    run = parity_run(model, batch_size, seq_len, steps, seed, device)
    config = run.model_config
    weights = init_weights(config, seed)
    batches = [synthetic_batch(seed, k, batch_size, seq_len, config.vocab_size) for k in range(steps)]
    torch_ref = get_engine("torch").reference_trainer(run.replace(framework="torch"), weights, dtype, device)
    jax_ref = get_engine("jax").reference_trainer(run.replace(framework="jax"), weights, dtype, device)
    rows = compare(jax_ref, torch_ref, weights, batches, TOLERANCES[dtype])
    settings = {"model": model, "batch_size": batch_size, "seq_len": seq_len, "steps": steps, "seed": seed,
                "dtype": dtype, "device": device, "relative_error": "max|jax - torch| / max|torch| per tensor"}
    backends = {"jax_attention": getattr(jax_ref, "attention_backend", None),
                "torch_attention": getattr(torch_ref, "attention_backend", None)}
    return ParityReport(settings, rows, TOLERANCES[dtype].gate, backends)


def compare(a, b, initial: dict, batches: list[np.ndarray], tol: Tolerances) -> list[Row]:
    """Rows for trainer ``a`` against reference trainer ``b`` (both start from ``initial``)."""
    logits = Row("logits (batch 0)", *errors(a.logits(batches[0]), b.logits(batches[0])), tol.logits)
    loss_a, grads_a = a.loss_and_grads(batches[0])
    loss_b, grads_b = b.loss_and_grads(batches[0])
    loss = Row("loss (batch 0)", *errors(loss_a, loss_b), tol.loss)
    grads = tensor_row("gradients (batch 0)", grads_a, grads_b, tol.grads)
    losses_a = [a.step(batch) for batch in batches]
    losses_b = [b.step(batch) for batch in batches]
    n = len(batches)
    step_losses = Row(f"losses of {n} optimizer steps", *_worst_scalar(losses_a, losses_b), tol.step_losses)
    params_a, params_b = a.params(), b.params()
    params = tensor_row(f"params after {n} steps", params_a, params_b, tol.params)
    updates = tensor_row(f"param updates over {n} steps",
                         {k: params_a[k] - initial[k] for k in initial},
                         {k: params_b[k] - initial[k] for k in initial}, tol.updates)
    return [logits, loss, grads, step_losses, params, updates]


def _worst_scalar(a: list[float], b: list[float]) -> tuple[float, float]:
    pairs = [errors(x, y) for x, y in zip(a, b)]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)
