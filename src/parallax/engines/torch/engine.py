"""The PyTorch training engine: the recipe's model and context, fused AdamW, torch.compile, SDPA.

What precision means here is the recipe's business (``engines/torch/recipes/``): its hooks build the
model, give the context every forward runs in and say which layers are quantized; this module
runs the loop, times it and guards the numerics.

Importing this module does not import torch (``check`` names the extra when it is missing).

Timing (``docs/timing.md``): every step ends with a mark — a CUDA event on the GPU, a
``perf_counter`` reading on the CPU. Step k's time is the interval from the previous mark to
step k's mark. The host enqueues step k, then waits for step k-1's mark only, so one step is
always queued on the device while the host reads step k-1's loss (copied to pinned memory
inside the stream) and feeds the progress bar. The first step, which compiles, is waited for
and timed on the host as ``compile_s``; evaluation is followed by a fresh mark, so it is never
part of a step time. Each step's data wait (``StepRecord.data_wait_ms``) is the host time of
drawing its batch and starting the batch's copy to the device, read on the host clock.

Several GPUs (``RunConfig.gpus`` > 1, one process per GPU: ``engines/torch/parallel.py``): the
model runs under DDP or FSDP2, each rank times its own steps, and at the end every rank's step
times, losses and peak memory are gathered (``EngineOutput.extra["parallel"]``); a step's loss
is the mean of the ranks' losses (the loss of the global batch), an evaluation's the mean of
the ranks' slices.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import warnings
from dataclasses import dataclass

import numpy as np

from parallax.spec.config import ModelConfig, OptimConfig, RunConfig
from parallax.engines.base import (
    BatchSource,
    Engine,
    EngineOutput,
    EvalRecord,
    Plan,
    Progress,
    Step,
    StepRecord,
    bad_gradients,
    eval_due,
)
from parallax.native.gpu import gpu_uuid
from parallax.plan.resolve import RunPlan
from parallax.spec import tuning
from parallax.spec.recipe import Recipe
from parallax.errors import ParallaxError, missing_dependency
from parallax.engines.schedule import lr_at
from parallax.engines.weights import init_weights

TIMING_METHOD_CUDA = "cuda-events: interval between consecutive step-end events, one step in flight"
TIMING_METHOD_HOST = "perf_counter: interval between consecutive step ends (CPU runs synchronously)"

# Preference order; the first that accepts the run's shape and dtype (forward and backward) runs.
# cuDNN first: the fastest causal fwd+bwd on Hopper (measured: REFERENCE.md §6).
ATTENTION_ORDER = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
ATTENTION_NAMES = {
    "CUDNN_ATTENTION": "cudnn",
    "FLASH_ATTENTION": "flash",
    "EFFICIENT_ATTENTION": "efficient",
    "MATH": "math",
}


def import_torch():
    try:
        import torch
    except ImportError:
        raise missing_dependency("torch", "torch") from None
    return torch


def resolve_device(torch, spec: str):
    """``--device``: auto (the first CUDA GPU, else the CPU), cpu, cuda, cuda:N (gpu = cuda)."""
    spec = "cuda" if spec == "gpu" else spec
    if spec == "auto":
        # An explicit index: torch.cuda.set_device and friends refuse a bare "cuda".
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "cuda" or spec.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ParallaxError(f"--device {spec}: torch sees no CUDA GPU; use --device cpu or auto")
        device = torch.device(spec)
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise ParallaxError(
                f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) visible; pick one of them"
            )
        return torch.device("cuda", index)
    raise ParallaxError(f"unknown --device '{spec}'; choose auto, cpu, cuda or cuda:N")


def probe_attention(torch, device, dtype, model: ModelConfig, seq_len: int, refused: dict | None = None) -> str:
    """The first backend of ATTENTION_ORDER that runs causal SDPA forward and backward at the
    run's head count, head size, sequence length and dtype, in the model's [B, S, H, hd] view.
    ``refused`` (when given) receives each earlier backend's reason, for the run's record."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name in ATTENTION_ORDER:
        x = torch.randn(1, seq_len, model.n_heads, model.head_dim, device=device, dtype=dtype)
        x = x.transpose(1, 2).requires_grad_(True)
        with warnings.catch_warnings(record=True) as said:  # a refusing backend warns why
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([getattr(SDPBackend, name)]):
                    F.scaled_dot_product_attention(x, x, x, is_causal=True).float().sum().backward()
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                return name
            except RuntimeError as exc:
                if refused is not None:
                    refused[ATTENTION_NAMES[name]] = refusal(exc, said)
    raise ParallaxError(f"no scaled-dot-product-attention backend runs on {device}; check the torch install")


def refusal(exc: RuntimeError, said: list) -> str:
    """Why a backend refused: its own warnings (torch says there what did not fit), else the error."""
    lines = [str(w.message).strip().splitlines()[0] for w in said if str(w.message).strip()]
    return "; ".join(lines[:3])[:400] or (str(exc).strip().splitlines() or [type(exc).__name__])[0][:400]


def attention_context(attention: str):
    """SDPA restricted to ``attention`` and the backends after it, in that priority."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = ATTENTION_ORDER[ATTENTION_ORDER.index(attention):]
    return sdpa_kernel([getattr(SDPBackend, name) for name in order], set_priority=True)


def make_optimizer(torch, module, optim: OptimConfig, device):
    """AdamW; weight decay on matrices (ndim ≥ 2) only, never on the RMSNorm gains."""
    params = [p for p in module.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": optim.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups, lr=optim.lr, betas=(optim.beta1, optim.beta2), eps=optim.eps,
        fused=device.type == "cuda",
    )


def cuda_graphs_decision(run: RunConfig, recipe, device) -> bool:
    """Whether the step replays the model's blocks as CUDA graphs (``RunConfig.cuda_graphs``):
    ``auto`` where the recipe supports it (``Recipe.cuda_graphs``) on a CUDA device, ``off``
    never, ``on`` there or a ParallaxError that names the fix. Decided from the recipe and the
    device type alone, before any GPU work."""
    supported = recipe.cuda_graphs and device.type == "cuda"
    if run.cuda_graphs == "on" and not supported:
        if not recipe.cuda_graphs:
            from parallax.spec import registry

            graphable = ", ".join(r.name for r in registry.of_framework("torch") if r.cuda_graphs and r.implemented)
            raise ParallaxError(f"--cuda-graphs on: recipe '{recipe.name}' has no CUDA-graph capture (only "
                                f"{graphable} have); use --cuda-graphs auto or off")
        raise ParallaxError(f"--cuda-graphs on needs a CUDA GPU; this run is on {device}; "
                            "use --cuda-graphs auto or off, or --device cuda")
    return supported and run.cuda_graphs != "off"


# torch.compile modes that replay the compiled step as CUDA graphs (spec/tuning.py's knob sets)
GRAPH_MODES = ("reduce-overhead", "max-autotune")


class Trainer:
    """One model, its optimizer and its step, shared by ``train`` and the reference trainer.

    ``cuda_graphs``: once the optimizer exists and the model is compiled, the recipe's hooks
    capture the model's blocks in CUDA graphs at the run's one shape, (batch, seq, d_model)
    (``hooks.graph``; the TransformerEngine recipes); training steps then replay them."""

    def __init__(self, run: RunConfig, weights, precision, device, attention: str, compile: bool,
                 compile_mode: str = "default", cuda_graphs: bool = False, group=None, inductor: dict | None = None):
        self.torch = torch = import_torch()
        self.run, self.precision, self.device, self.attention = run, precision, device, attention
        self.hooks = hooks = precision.hooks
        self.model = hooks.build(torch, run.model_config, weights, device)
        # Several GPUs: ``group`` (engines/torch/parallel.py) wraps the model in DDP or shards
        # it with FSDP2; ``module`` is what the step calls, ``model`` the recipe's own module.
        self.group = group
        self.rank = group.rank.rank if group is not None else 0
        self.sharded = group is not None and group.sharding == "fsdp"
        if group is not None:
            from parallax.engines.torch.parallel import wrap

            self.module = wrap(torch, self.model, group, device)
        else:
            self.module = self.model
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in named]
        # The numerics guard reads these parameters' gradient norms every step (one foreach
        # norm that clipping needs anyway): all zero or non-finite fails the run.
        quantized = set(hooks.quantized(self.model))
        self.quantized = [(i, n) for i, (n, _) in enumerate(named) if n in quantized]
        self.optimizer = make_optimizer(torch, self.model, run.optim, device)
        # Compiling the module (forward, loss and, through AOTAutograd, backward) fuses the
        # norms, RoPE, SwiGLU and the float32 cross-entropy; the fused AdamW and the foreach
        # clipping are already a handful of kernels, so they stay eager. A recipe may compile
        # less (TransformerEngine's modules stay eager): ``hooks.compile`` decides.
        self.compile_mode = compile_mode if compile else None
        # inductor's options of the knob set (--tuning), patched in while the step compiles (train)
        self.inductor = dict(inductor or {}) if compile else {}
        self.forward = hooks.compile(torch, self.module, compile_mode) if compile else self.module
        self.cuda_graphs, self.graph_capture_s = cuda_graphs, None
        if cuda_graphs:
            started = time.perf_counter()
            shape = (run.batch_size, run.seq_len, run.model_config.d_model)
            hooks.graph(torch, self.model, shape, device, lambda: attention_context(attention))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.graph_capture_s = time.perf_counter() - started

    def upload(self, batch: np.ndarray, pinned: bool = False):
        """A [B, S+1] host batch on the device, copied asynchronously. A batch already in
        pinned memory (the native loader's ring: ``pinned``, the source's word, or torch's
        is_pinned) is copied from where it is: the loop has waited for this step's end before
        the source may reuse the buffer (two draws later). Pageable batches are first copied
        to pinned memory, which frees them at once."""
        if batch.dtype not in (np.int32, np.int64):
            batch, pinned = batch.astype(np.int32), False
        tensor = self.torch.from_numpy(batch)
        if self.device.type != "cuda":
            return tensor
        if not (pinned or tensor.is_pinned()):
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    def loss(self, batch):
        from parallax.engines.torch.model import batch_loss

        with self.precision.autocast(self.torch, self.device.type), attention_context(self.attention):
            return batch_loss(self.forward, batch)

    def train_step(self, batch, lr: float):
        """Enqueue one optimizer step; return [loss, pre-clip gradient norm, the gradient norm
        of each quantized parameter] as one float32 device tensor."""
        torch = self.torch
        if self.compile_mode in GRAPH_MODES:  # a new step of the compiled step's CUDA graphs
            torch.compiler.cudagraph_mark_step_begin()
        loss = self.loss(batch)
        loss.backward()
        if self.sharded:
            norms, grad_norm = self.clip_sharded()
        else:
            norms = torch._foreach_norm([p.grad for p in self.params])
            grad_norm = torch.linalg.vector_norm(torch.stack(norms))
            torch.nn.utils.clip_grads_with_norm_(self.params, self.run.optim.grad_clip, grad_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        watched = [norms[i] for i, _ in self.quantized]
        return torch.stack([loss.detach().float(), grad_norm.float(), *(n.float() for n in watched)])

    def clip_sharded(self):
        """FSDP2: (per-parameter norms, global norm) of the sharded gradients, and the gradients
        clipped by the global norm as ``clip_grads_with_norm_`` clips them. Each rank holds a
        shard of every gradient: one all-reduce sums the shards' squared norms."""
        from parallax.engines.torch.parallel import local

        torch = self.torch
        grads = [local(p.grad) for p in self.params]
        squares = torch.stack(torch._foreach_norm(grads)).float().square()
        self.group.sum_(squares)
        grad_norm = squares.sum().sqrt()
        coef = torch.clamp(self.run.optim.grad_clip / (grad_norm + 1e-6), max=1.0)
        torch._foreach_mul_(grads, coef)
        return list(squares.sqrt().unbind()), grad_norm

    def eval_losses(self, batches) -> list[float]:
        """The loss of each validation batch (one device-to-host copy for all); with several
        ranks the mean of their slices' losses, the loss of the global evaluation batch."""
        with self.torch.no_grad():
            losses = self.torch.stack([self.loss(b).float() for b in batches])
            if self.group is not None:
                self.group.average(losses)
        return losses.tolist()

    def eval_loss(self, batches) -> float:
        losses = self.eval_losses(batches)
        return float(sum(losses) / len(losses))

    def lr(self, step: int) -> float:
        return float(lr_at(step, self.run.optim, self.run.steps))


class CudaClock:
    def __init__(self, torch):
        self.torch = torch

    def mark(self):
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def wait(self, mark) -> None:
        mark.synchronize()

    def elapsed_ms(self, start, end) -> float:
        return start.elapsed_time(end)


class HostClock:
    def mark(self) -> float:
        return time.perf_counter()

    def wait(self, mark) -> None:
        pass

    def elapsed_ms(self, start, end) -> float:
        return (end - start) * 1e3


@dataclass
class _Pending:
    step: int
    start: object
    end: object
    lr: float
    data_wait_ms: float  # host time drawing the batch and starting its copy to the device


class TrainLoop:
    """Runs ``run.steps`` steps with one step in flight and collects the records."""

    def __init__(self, trainer: Trainer, batches: BatchSource, progress: Progress):
        torch, run = trainer.torch, trainer.run
        self.trainer, self.batches, self.progress, self.run = trainer, batches, progress, run
        # A source whose batches lie in page-locked memory says so (TokenBatches.pinned).
        self.pinned = bool(getattr(batches, "pinned", False))
        cuda = trainer.device.type == "cuda"
        self.clock = CudaClock(torch) if cuda else HostClock()
        # Losses and gradient norms land here by an in-stream copy, readable once a step's
        # mark has passed, without a device synchronisation.
        self.host = torch.zeros((run.steps, 2 + len(trainer.quantized)), dtype=torch.float32, pin_memory=cuda)
        self.records: list[StepRecord] = []
        self.evals: list[EvalRecord] = []
        self.compile_s = 0.0
        self.step = 0  # the step being run
        from parallax.plan.world import FAULT_ENV, planted_fault

        # The test hook of parallax.plan.world (a planted rank failure); None in real runs.
        self.fault = planted_fault if os.environ.get(FAULT_ENV) else None
        # Several GPUs: the last warmup step runs under torch.profiler (CUDA kernels), for the
        # share of GPU kernel time in NCCL's collectives (parallel.communication_record). Not
        # the first step (it compiles) and not a measured one (the profiler costs time).
        profiled = trainer.group is not None and cuda and run.warmup >= 2
        self.profile_step = run.warmup - 1 if profiled else None
        self.communication: dict | None = None

    def run_steps(self) -> None:
        run, clock = self.run, self.clock
        eval_set = self._eval_set()
        batches = iter(self.batches)
        self.progress.phase("compiling" if run.compile else "warming up")
        started = time.perf_counter()
        try:
            self._steps(eval_set, batches, started, clock.mark())
        except BaseException as exc:  # a rank's failure record names the step it failed in
            with contextlib.suppress(AttributeError):
                exc.parallax_step = self.step
            raise

    def _steps(self, eval_set, batches, started, previous) -> None:
        run, trainer, clock = self.run, self.trainer, self.clock
        pending = None
        for step in range(run.steps):
            self.step = step
            if self.fault is not None:
                self.fault(trainer.rank, step)
            lr = trainer.lr(step)
            profiler = None
            if step == self.profile_step:  # the profile holds this step's kernels only
                if pending is not None:
                    clock.wait(pending.end)
                profiler = self._profiler()
            asked = time.perf_counter()
            batch = trainer.upload(next(batches), self.pinned)
            wait_ms = (time.perf_counter() - asked) * 1e3
            metrics = trainer.train_step(batch, lr)
            self.host[step].copy_(metrics, non_blocking=True)
            end = clock.mark()
            if profiler is not None:
                self._profiled(profiler, end, step)
            if step == 0:
                clock.wait(end)
                self.compile_s = time.perf_counter() - started
                self.progress.phase("training")
            self._finish(pending)
            pending, previous = _Pending(step, previous, end, lr, wait_ms), end
            if eval_set and eval_due(run, step):
                self._finish(pending)
                pending = None
                self.evals.append(EvalRecord.of(step, trainer.eval_losses(eval_set)))
                previous = clock.mark()  # evaluation is no part of the next step's time
        self._finish(pending)

    def _profiler(self):
        from torch.profiler import ProfilerActivity, profile

        profiler = profile(activities=[ProfilerActivity.CUDA])
        profiler.start()
        return profiler

    def _profiled(self, profiler, end, step: int) -> None:
        from parallax.engines.torch.parallel import communication_record
        from parallax.engines.profiling import torch_kernel_events

        self.clock.wait(end)
        profiler.stop()
        self.communication = communication_record(torch_kernel_events(profiler), step)

    def _eval_set(self) -> list:
        if self.run.eval_every <= 0:
            return []
        return [self.trainer.upload(b).clone() for b in self.batches.eval_batches()]

    def _finish(self, pending: _Pending | None) -> None:
        if pending is None:
            return
        self.clock.wait(pending.end)
        step_ms = self.clock.elapsed_ms(pending.start, pending.end)
        loss, grad_norm, *watched = self.host[pending.step].tolist()
        names = [name for _, name in self.trainer.quantized]
        self.records.append(StepRecord(pending.step, loss, step_ms, pending.lr, grad_norm,
                                       bad_gradients(names, watched), data_wait_ms=pending.data_wait_ms))
        self.progress.step(pending.step, loss, step_ms)


class TorchEngine(Engine):
    name = "torch"

    def check(self, plan: RunPlan) -> Plan:
        """Device, recipe (library, capability, the recipe's own checks) and attention backend,
        decided once; ParallaxError before any training."""
        torch = import_torch()
        from parallax.plan import capability
        from parallax.engines.torch.recipes.select import for_recipe

        run, recipe = plan.run, plan.recipe
        rank = self.rank(run)
        if rank is not None:
            from parallax.engines.torch import parallel

            parallel.check_run(run, recipe)
            device = parallel.device_of(torch, run.device, rank)
        else:
            device = resolve_device(torch, run.device)
        cuda = device.type == "cuda"
        cc = "{}.{}".format(*torch.cuda.get_device_capability(device)) if cuda else None
        name = torch.cuda.get_device_name(device) if cuda else "cpu"
        cuda_graphs = cuda_graphs_decision(run, recipe, device)
        graphs_off = None
        if rank is not None and cuda_graphs:  # --cuda-graphs auto; 'on' was refused by check_run
            cuda_graphs, graphs_off = False, parallel.GRAPHS_OFF
        capability.require(recipe, "gpu" if cuda else "cpu", cc, name)
        # Attention is probed before the recipe's own checks: those import TransformerEngine, and
        # a cuDNN that TE loads first made torch's cuDNN attention refuse with
        # CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH and fall back to flash, slower
        # (docs/results/2026-12-01-h200-c/).
        refused: dict[str, str] = {}
        dtype = recipe.load_hooks().compute_dtype(torch)
        attention = probe_attention(torch, device, dtype, run.model_config, run.seq_len, refused)
        precision = for_recipe(torch, recipe, device, run)
        group = parallel.join(torch, run, rank, device) if rank is not None else None
        return Plan(recipe=recipe, precision=precision.info, device=str(device),
                    attention=ATTENTION_NAMES[attention], cuda_graphs=cuda_graphs,
                    rank=rank.rank if rank else 0, world=rank.world if rank else 1,
                    details={"cuda_graphs_off": graphs_off} if graphs_off else {},
                    handles={"device": device, "precision": precision, "attention": attention,
                             "attention_refused": refused, "group": group, "knobs": plan.knobs})

    @staticmethod
    def rank(run: RunConfig):
        """This process's RankInfo in a run of several GPUs (torchrun's environment), else None."""
        if run.gpus == 1:
            return None
        from parallax.plan.world import rank_info

        rank = rank_info()
        if rank is None:
            raise ParallaxError(f"--gpus {run.gpus}: this process is no rank of a torch.distributed launch; "
                                "start the run with parallax train --gpus, which launches the ranks")
        return rank

    def train(self, run: RunConfig, plan: Plan, batches: BatchSource, progress: Progress) -> EngineOutput:
        torch = import_torch()
        device, precision, attention = (plan.handles[k] for k in ("device", "precision", "attention"))
        group = plan.handles.get("group")
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.set_device(device)
            torch.cuda.reset_peak_memory_stats(device)
        progress.phase("building the model" + (", capturing CUDA graphs" if plan.cuda_graphs else ""))
        # --tuning: the compile mode and inductor's options (a Plan made without check: the default)
        knobs = plan.handles.get("knobs") or tuning.get("torch", tuning.DEFAULT)
        trainer = Trainer(run, init_weights(run.model_config, run.seed), precision, device, attention, run.compile,
                          compile_mode=knobs.compile_mode or "default", cuda_graphs=plan.cuda_graphs, group=group,
                          inductor=knobs.inductor)
        loop = TrainLoop(trainer, batches, progress)
        from torch._inductor import config as inductor_config

        with inductor_config.patch(trainer.inductor):  # inductor compiles in the first steps
            loop.run_steps()
        peak_allocated = torch.cuda.max_memory_allocated(device) if cuda else None
        peak_reserved = torch.cuda.max_memory_reserved(device) if cuda else None
        extra = {"parameters": sum(p.numel() for p in trainer.model.parameters()),  # FSDP2: global numel
                 "quantized_parameters": [name for _, name in trainer.quantized]}
        if group is not None:
            extra["parallel"] = gather_ranks(run, plan.recipe, group, device, loop, peak_allocated, peak_reserved)
        framework = {**framework_info(torch, trainer), "attention_refused": plan.handles.get("attention_refused")}
        if plan.details.get("cuda_graphs_off"):
            framework["cuda_graphs_off"] = plan.details["cuda_graphs_off"]
        return EngineOutput(
            steps=loop.records,
            precision=precision.info,
            framework=framework,
            timing_method=TIMING_METHOD_CUDA if cuda else TIMING_METHOD_HOST,
            compile_s=loop.compile_s,
            peak_allocated_bytes=peak_allocated,
            peak_reserved_bytes=peak_reserved,
            evals=loop.evals,
            extra=extra,
        )

    def build_step(self, plan, attention: str | None = None, compile_mode: str | None = None,
                   source=None) -> Step:
        """The Trainer's step of ``plan`` (a RunPlan of one device) as ``train`` builds it: the
        check's device, recipe, attention and CUDA-graphs decision, the run's compilation, the
        initial weights of its seed; ``attention`` (cudnn, flash, efficient, math) and
        ``compile_mode`` (a torch.compile mode, or eager) override the check's choices, for
        comparing variants. ``source``: the batches (a BatchSource; the run's synthetic ones
        when None). ``state`` is (the Trainer,); ``details`` what ``framework_info`` records of
        a run, and its earlier keys (compile_mode, attention, torch, cuda_graphs, device_name)."""
        import itertools

        from parallax.data.synthetic import SyntheticBatches

        run = plan.run
        if run.gpus > 1:
            raise ParallaxError(f"build_step builds the step of one device; the plan has --gpus {run.gpus}")
        torch = import_torch()
        checked = self.check(plan)
        device, precision = checked.handles["device"], checked.handles["precision"]
        chosen = {name: backend for backend, name in ATTENTION_NAMES.items()}.get(attention,
                                                                                  checked.handles["attention"])
        compiled = run.compile if compile_mode is None else compile_mode != "eager"
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.set_device(device)
        trainer = Trainer(run, init_weights(run.model_config, run.seed), precision, device, chosen, compiled,
                          compile_mode if compiled and compile_mode else "default", cuda_graphs=checked.cuda_graphs)
        if source is None:
            source = SyntheticBatches(run.seed, run.batch_size, run.seq_len, run.model_config.vocab_size)
        batches = (trainer.upload(b) for b in source)
        first = next(batches)
        steps = itertools.count()

        def fn(state, batch):
            return state, state.train_step(batch, state.lr(next(steps)))

        def wait(metrics) -> None:
            if cuda:
                torch.cuda.synchronize(device)

        details = {**framework_info(torch, trainer), "compile_mode": trainer.compile_mode or "eager",
                   "attention": ATTENTION_NAMES[chosen], "attention_refused": checked.handles["attention_refused"],
                   "torch": torch.__version__, "cuda_graphs": checked.cuda_graphs}
        return Step(fn=fn, state=(trainer,), batch=first, batches=itertools.chain([first], batches), wait=wait,
                    plan=checked, details=details)

    def close(self, plan: Plan) -> None:
        group = plan.handles.pop("group", None)
        if group is not None:
            group.close()

    def reference_trainer(self, run: RunConfig, weights: dict[str, np.ndarray], compute_dtype: str,
                          device: str) -> "TorchReferenceTrainer":
        return TorchReferenceTrainer(run, weights, compute_dtype, device)


def gather_ranks(run: RunConfig, recipe: Recipe, group, device, loop: TrainLoop, peak_allocated, peak_reserved) -> dict:
    """Every rank's step times, losses and peak memory, on every rank; the loop's records then
    hold the global batch's loss of each step (the mean of the ranks' equal slices). Nothing
    more is communicated; the group is left in ``close``, after the result is written."""
    from parallax.engines.torch import parallel

    mine = parallel.record(group, device, [r.step_ms for r in loop.records], [r.loss for r in loop.records],
                           peak_allocated, peak_reserved, loop.communication)
    ranks = group.gather(mine)
    for i, step in enumerate(loop.records):
        step.loss = statistics.fmean(r["loss"][i] for r in ranks)
    return parallel.parallel_extra(run, recipe, group, ranks)


def cudnn_version(torch) -> int | str:
    """torch's cuDNN version, or why torch refuses to say. A run's record is made after it
    trained: a failing version check must not lose it (with TransformerEngine loaded, torch's
    check can find a system cuDNN beside the one it was built with)."""
    try:
        return torch.backends.cudnn.version()
    except RuntimeError as exc:
        return f"unknown: {str(exc).splitlines()[0][:200]}"


def framework_info(torch, trainer: Trainer) -> dict:
    device = trainer.device
    cuda = device.type == "cuda"
    return {
        "name": "torch",
        "version": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": cudnn_version(torch) if cuda else None,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "device_uuid": gpu_uuid(torch.cuda.get_device_properties(device).uuid) if cuda else None,
        "compute_capability": "{}.{}".format(*torch.cuda.get_device_capability(device)) if cuda else None,
        "attention_backend": ATTENTION_NAMES[trainer.attention],
        "attention_selection": "first of " + ", ".join(ATTENTION_NAMES[n] for n in ATTENTION_ORDER)
        + " to run causal SDPA fwd+bwd at this shape and dtype",
        # a recipe that runs attention itself (TE's DotProductAttention) says so; None: the SDPA above
        "recipe_attention": trainer.hooks.attention_info(),
        "compiled": trainer.compile_mode is not None,
        "compile_mode": trainer.compile_mode,
        "inductor_options": dict(trainer.inductor),  # what --tuning set in torch._inductor.config
        "compile_scope": trainer.hooks.compile_info(trainer.cuda_graphs) if trainer.compile_mode is not None else None,
        "cuda_graphs": trainer.cuda_graphs,
        "graph_scope": trainer.hooks.graph_info(trainer.run.model_config) if trainer.cuda_graphs else None,
        # Warm-up iterations and capture, before the first step: neither in compile_s nor in a step.
        "graph_capture_s": trainer.graph_capture_s,
        # fused=False leaves the choice to torch, which takes the for-loop kernels on the CPU.
        "optimizer": "AdamW (fused)" if cuda else "AdamW (for-loop)",
        "fused_projections": ["wq+wk+wv", "w_gate+w_up"],
    }


class TorchReferenceTrainer:
    """The ReferenceTrainer of ``engines/base.py``: eager, synchronous, float32 canonical I/O.
    On the CPU, attention is the math backend (the textbook formula, deterministic)."""

    def __init__(self, run: RunConfig, weights: dict[str, np.ndarray], compute_dtype: str, device: str):
        torch = import_torch()
        from parallax.engines.torch.recipes.select import for_compute_dtype

        torch_device = resolve_device(torch, device)
        precision = for_compute_dtype(torch, compute_dtype, torch_device)
        if torch_device.type == "cpu":
            attention = "MATH"
        else:
            attention = probe_attention(torch, torch_device, precision.compute_dtype, run.model_config, run.seq_len)
        self.torch, self.config = torch, run.model_config
        self.trainer = Trainer(run, weights, precision, torch_device, attention, compile=False)
        self.steps_done = 0

    def logits(self, batch: np.ndarray) -> np.ndarray:
        trainer = self.trainer
        tokens = trainer.upload(np.asarray(batch))[:, :-1]
        with self.torch.no_grad(), trainer.precision.autocast(self.torch, trainer.device.type), \
                attention_context(trainer.attention):
            return trainer.model(tokens).float().cpu().numpy()

    def loss_and_grads(self, batch: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        trainer = self.trainer
        trainer.optimizer.zero_grad(set_to_none=True)
        loss = trainer.loss(trainer.upload(np.asarray(batch)))
        loss.backward()
        grads = {name: p.grad for name, p in trainer.model.named_parameters()}
        trainer.optimizer.zero_grad(set_to_none=True)
        return float(loss.item()), trainer.hooks.export(self.config, trainer.model, grads)

    def step(self, batch: np.ndarray) -> float:
        trainer = self.trainer
        metrics = trainer.train_step(trainer.upload(np.asarray(batch)), trainer.lr(self.steps_done))
        self.steps_done += 1
        return float(metrics[0].item())

    def params(self) -> dict[str, np.ndarray]:
        trainer = self.trainer
        return trainer.hooks.export(self.config, trainer.model, trainer.model.state_dict())
