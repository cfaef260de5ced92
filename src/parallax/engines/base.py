"""The interface every training engine implements.

An engine turns a validated RunConfig plus a BatchSource into raw measurements
(``EngineOutput``). Everything else — FLOPs, MFU, statistics, the result files — is done
once, for every engine, by ``parallax.run.train``.

Timing method (``docs/timing.md``): the step time of step k is the interval between the
completion of step k-1 and step k, with the next step already queued so the device never
waits on the host. The torch engine reads it on the GPU's clock (CUDA events); the JAX engine,
which has no event API, reads the host clock when step k's loss becomes ready.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from parallax.errors import ParallaxError
from parallax.plan.resolve import RunPlan
from parallax.spec.config import RunConfig
from parallax.spec.precision import PrecisionInfo
from parallax.spec.recipe import Recipe


class BatchSource(Protocol):
    """Training batches, [batch_size, seq_len + 1] integer arrays, and fixed eval batches.

    A source whose training batches lie in page-locked host memory may set ``pinned = True``
    (TokenBatches does, on the driver's word); engines then copy them to the device directly.
    Without the attribute an engine checks each batch itself."""

    description: str

    def __iter__(self) -> Iterator[np.ndarray]: ...

    def eval_batches(self) -> list[np.ndarray]: ...

    def close(self) -> None: ...


class Progress(Protocol):
    """Receives live progress; the CLI shows it, tests may record it."""

    def step(self, step: int, loss: float | None, step_ms: float | None) -> None: ...

    def phase(self, text: str) -> None: ...


class NullProgress:
    def step(self, step: int, loss: float | None, step_ms: float | None) -> None:
        pass

    def phase(self, text: str) -> None:
        pass


@dataclass
class Plan:
    """What ``Engine.check`` decided and ``Engine.train`` consumes: checked once."""

    recipe: Recipe
    precision: PrecisionInfo  # the label the run records
    device: str  # e.g. "cuda:0", "gpu:0", "cpu"
    attention: str | None = None  # the attention backend chosen for this shape and dtype
    cuda_graphs: bool = False  # the step replays the model's blocks as CUDA graphs (RunConfig.cuda_graphs)
    # This process among the run's processes, as the engine's runtime numbers them (torch:
    # one per GPU; JAX: one per host): it reads ``make_batch_source(run, rank, world)`` and
    # rank 0 alone writes the result.
    rank: int = 0
    world: int = 1
    details: dict = field(default_factory=dict)
    handles: dict = field(default_factory=dict)  # engine-private objects (device, hooks)


@dataclass
class StepRecord:
    step: int
    loss: float
    step_ms: float
    lr: float
    grad_norm: float | None = None  # before clipping; all-zero gradients are a failure to catch
    # Names of quantized layers whose gradient was all zero or not finite at this step
    # (the numerics guard; ``train.training_problem`` turns the first into a failure).
    bad_layers: list[str] | None = None
    # Several ranks: each rank's own time of this step (``step_ms`` is then the slowest's).
    rank_step_ms: list[float] | None = None
    # Host wall time this step spent getting its batch ready for the device (drawing it from
    # the source and handing it to the device), ms; None where the engine cannot see it
    # (docs/timing.md, "Data wait").
    data_wait_ms: float | None = None


@dataclass
class EvalRecord:
    step: int
    loss: float  # the mean over the validation batches
    batch_losses: list[float] = field(default_factory=list)  # each batch's, for paired intervals

    @classmethod
    def of(cls, step: int, batch_losses: list[float]) -> "EvalRecord":
        return cls(step, float(sum(batch_losses) / len(batch_losses)), [float(x) for x in batch_losses])


@dataclass
class EngineOutput:
    steps: list[StepRecord]
    precision: PrecisionInfo
    framework: dict  # name, version, device, attention backend, compiled, ...
    timing_method: str
    compile_s: float | None  # time of compilation (the first step(s), or what the engine measured); None: unknown
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    evals: list[EvalRecord] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


@dataclass
class Step:
    """One engine's training step, built as ``Engine.train`` builds it, for profilers and
    compiler inspection (``Engine.build_step``): no timing, no result.

    ``fn(*state, batch)`` runs one optimizer step and returns ``(*state, metrics)``; ``state``
    is what it advances (torch: the Trainer, whose model and optimizer change in place; JAX:
    params, the recipe's extra variables and the optimizer state, donated); ``batch`` is the
    run's first synthetic batch on the device and ``batches`` yields every batch from it, as
    ``train`` draws them. ``wait(metrics)`` blocks until the device has done the step that gave
    ``metrics``. ``plan``: what ``Engine.check`` decided; ``details``: what a profile records
    (compilation, attention, library versions). JAX's ``fn`` is the ahead-of-time compiled
    executable and ``lowered`` its lowering (``lowered.as_text()``: the HLO before XLA's passes,
    ``fn.as_text()``: after)."""

    fn: Callable
    state: tuple
    batch: Any
    batches: Iterator
    wait: Callable[[Any], None]
    plan: Plan
    details: dict = field(default_factory=dict)
    lowered: Any = None

    def run(self, n: int, each: Callable[[int], None] | None = None):
        """``n`` steps on the next batches, waiting for the last; its metrics. ``each(k)``, when
        given, is told once the k-th of them (0-based) is dispatched (a progress bar)."""
        metrics = None
        for k in range(n):
            *state, metrics = self.fn(*self.state, next(self.batches))
            self.state = tuple(state)
            if each is not None:
                each(k)
        self.wait(metrics)
        return metrics


def bad_gradients(names: list[str], norms: list[float]) -> list[str] | None:
    """The quantized layers whose gradient norm is exactly zero or not finite, or None
    (``StepRecord.bad_layers``; every engine's numerics guard)."""
    bad = [f"{name} ({'zero' if norm == 0.0 else norm})" for name, norm in zip(names, norms)
           if norm == 0.0 or not math.isfinite(norm)]
    return bad or None


def eval_due(run: RunConfig, step: int) -> bool:
    """Whether an engine evaluates after step ``step`` (0-based): every ``run.eval_every``
    steps and after the last one; never when ``eval_every`` is 0."""
    if run.eval_every <= 0:
        return False
    return (step + 1) % run.eval_every == 0 or step == run.steps - 1


class Engine(ABC):
    """A framework's training loop for the shared LLaMA model."""

    name: str

    @abstractmethod
    def check(self, plan: RunPlan) -> Plan:
        """Raise ParallaxError when ``plan``'s run cannot go (missing dependency, a recipe the
        GPU or installation cannot run, bad shape), before any training; else return the plan
        (device, recipe, attention backend) that ``train`` consumes. The recipe is the RunPlan's
        (``parallax.plan.resolve``): an engine never looks one up by name."""

    @abstractmethod
    def train(self, run: RunConfig, plan: Plan, batches: BatchSource, progress: Progress) -> EngineOutput:
        """Train ``run.steps`` steps from ``parallax.engines.weights.init_weights(model, run.seed)``
        as ``plan`` says."""

    def close(self, plan: Plan) -> None:
        """Release what ``check``/``train`` acquired beyond the run (a process group), once
        the result is written; nothing by default."""

    def build_step(self, plan) -> Step:
        """The training step of ``plan`` (a ``parallax.plan.RunPlan`` of one device) on the run's
        synthetic batches, for a profiler or an HLO dump (``Step``)."""
        raise ParallaxError(f"the {self.name} engine builds no step of its own here; profile it with "
                            f"parallax profile --framework {self.name}")

    @abstractmethod
    def reference_trainer(self, run: RunConfig, weights: dict[str, np.ndarray], compute_dtype: str,
                          device: str) -> "ReferenceTrainer":
        """A ReferenceTrainer over ``weights`` with compute in ``compute_dtype`` ("float32" or
        "bfloat16") on ``device`` ("cpu" or "gpu"), same optimizer and schedule as ``train``."""


class ReferenceTrainer(Protocol):
    """A synchronous, un-timed handle on one engine's model and optimizer, used by
    ``parallax parity`` to compare engines. Arrays are NumPy float32 in the canonical
    layout of ``parallax.engines.weights`` (names of ``ModelConfig.param_shapes()``, linear
    weights [in, out]); batches are [B, S+1] integer arrays."""

    def logits(self, batch: np.ndarray) -> np.ndarray: ...  # [B, S, V] float32

    def loss_and_grads(self, batch: np.ndarray) -> tuple[float, dict[str, np.ndarray]]: ...

    def step(self, batch: np.ndarray) -> float: ...  # one optimizer step; the loss before it

    def params(self) -> dict[str, np.ndarray]: ...
