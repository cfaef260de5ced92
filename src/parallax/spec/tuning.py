"""Stock tuning: named sets of the knobs each framework's own documentation offers, as data.

A run's ``RunConfig.tuning`` names one knob set of its framework (``parallax train --tuning``,
``parallax benchmark --tunings``). ``default`` is what the engines do without tuning: no knob
at all, so its run is the run made before tuning existed. The knobs:

  JAX       XLA flags, added to XLA_FLAGS before JAX starts (``engines/jax/engine.py``).
  torch     the torch.compile mode (``reduce-overhead``: CUDA graphs of the compiled step) and
            torch._inductor.config options (``engines/torch/engine.py``).
  MaxText   MaxText config keys over the recipe's performance settings, and XLA flags in its
            child's XLA_FLAGS (``engines/maxtext/``).

``tuned`` is not a knob set but a lookup: ``TUNED[(framework, recipe)]`` names the knob set a
tuning sweep (``parallax benchmark --plan tuning``) chose for that recipe on the maintainers'
GPU; a recipe without an entry runs ``default``, and run.json says which it resolved to
(``record``). ``slow`` knob sets compile for minutes; the shipped plan leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parallax.errors import ParallaxError

DEFAULT, TUNED_NAME = "default", "tuned"

LHS = "--xla_gpu_enable_latency_hiding_scheduler=true"
NO_TRITON_GEMM = "--xla_gpu_enable_triton_gemm=false"
COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN"
NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="
AUTOTUNE_OFF = "--xla_gpu_autotune_level=0"


@dataclass(frozen=True)
class KnobSet:
    framework: str
    name: str
    summary: str
    xla_flags: tuple[str, ...] = ()  # jax, maxtext
    compile_mode: str | None = None  # torch: torch.compile's mode; None: "default"
    inductor: dict = field(default_factory=dict)  # torch: torch._inductor.config options
    maxtext_keys: dict = field(default_factory=dict)  # maxtext: config keys over the recipe's settings
    maxtext_grain: bool = False  # maxtext: real tokens through MaxText's Grain, not Parallax's loader
    graphs: bool = False  # CUDA graphs of the compiled step: not with a recipe that graphs its blocks
    slow: bool = False  # compiles for minutes: a user's choice, not the shipped plan's

    @property
    def knobs(self) -> dict:
        """The knobs that are set, as run.json records them."""
        found = {"xla_flags": list(self.xla_flags), "compile_mode": self.compile_mode,
                 "inductor": dict(self.inductor), "maxtext_keys": dict(self.maxtext_keys),
                 "maxtext_grain": self.maxtext_grain}
        return {k: v for k, v in found.items() if v}


def _set(framework: str, name: str, summary: str, **knobs) -> KnobSet:
    return KnobSet(framework, name, summary, **knobs)


KNOB_SETS: tuple[KnobSet, ...] = (
    _set("torch", DEFAULT, "torch.compile mode default, inductor's defaults"),
    _set("torch", "reduce-overhead", "torch.compile mode reduce-overhead: the compiled step replayed as CUDA graphs",
         compile_mode="reduce-overhead", graphs=True),
    _set("torch", "coordinate-descent", "inductor's coordinate-descent tuning of its Triton kernels' tile sizes",
         inductor={"coordinate_descent_tuning": True}),
    _set("torch", "max-autotune-no-cudagraphs", "torch.compile mode max-autotune-no-cudagraphs: every GEMM and "
         "kernel autotuned (compiles for minutes)", compile_mode="max-autotune-no-cudagraphs", slow=True),
    _set("torch", "max-autotune", "torch.compile mode max-autotune: autotuning and CUDA graphs (compiles for minutes)",
         compile_mode="max-autotune", graphs=True, slow=True),
    _set("jax", DEFAULT, "XLA's defaults"),
    _set("jax", "lhs", "XLA's latency-hiding scheduler", xla_flags=(LHS,)),
    _set("jax", "no-triton-gemm", "XLA's GEMMs through cuBLAS, not its Triton GEMM emitter",
         xla_flags=(NO_TRITON_GEMM,)),
    _set("jax", "lhs-no-triton-gemm", "the latency-hiding scheduler and cuBLAS GEMMs (JAX-Toolbox's GPU advice)",
         xla_flags=(LHS, NO_TRITON_GEMM)),
    _set("jax", "command-buffers", "XLA command buffers (CUDA graphs) over fusions, cuBLAS(Lt), custom calls, cuDNN",
         xla_flags=(COMMAND_BUFFERS,)),
    _set("jax", "lhs-no-triton-gemm-cb", "lhs-no-triton-gemm and command buffers",
         xla_flags=(LHS, NO_TRITON_GEMM, COMMAND_BUFFERS)),
    _set("jax", "no-command-buffers", "XLA command buffers off", xla_flags=(NO_COMMAND_BUFFERS,)),
    _set("jax", "autotune-off", "XLA's GEMM and fusion autotuning off (--xla_gpu_autotune_level=0): what "
         "autotuning buys", xla_flags=(AUTOTUNE_OFF,)),
    _set("maxtext", DEFAULT, "the recipe's performance settings (engines/maxtext/config.py), XLA's defaults"),
    _set("maxtext", "lhs-no-triton-gemm", "XLA's latency-hiding scheduler and cuBLAS GEMMs in MaxText's child",
         xla_flags=(LHS, NO_TRITON_GEMM)),
    _set("maxtext", "command-buffers", "XLA command buffers in MaxText's child", xla_flags=(COMMAND_BUFFERS,)),
    _set("maxtext", "remat-full", "remat_policy full (base.yml's: recompute every layer's activations)",
         maxtext_keys={"remat_policy": "full"}),
    _set("maxtext", "grain", "real tokens through MaxText's own Grain mmap_npy pipeline, 8 worker processes each "
         "16 samples ahead (engines/maxtext/config.py GRAIN_FEED), not Parallax's loader", maxtext_grain=True),
    _set("maxtext", "grain-in-process", "Grain without worker processes: its 16 read threads prefetch samples "
         "in MaxText's own process, and no sample crosses a process boundary (real tokens only)",
         maxtext_keys={"grain_worker_count": 0}, maxtext_grain=True),
    _set("maxtext", "grain-16", "sixteen Grain workers, each 32 samples ahead (real tokens only; the grain "
         "knob set's are 8 workers, 16 ahead: engines/maxtext/config.py GRAIN_FEED)",
         maxtext_keys={"grain_worker_count": 16, "grain_per_worker_buffer_size": 32}, maxtext_grain=True),
)

# (framework, recipe name) -> the knob set a tuning sweep chose (``tuned``). Filled from the
# sweep's report (``analysis/tuning.py``'s snippet); a recipe not here runs ``default``. Empty on
# the evidence of the H200 sweep (docs/results/2026-12-04-h200-c/): no knob set beat its
# recipe's default beyond the interval (docs/tuning.md#what-the-h200-said-2026-12-04).
TUNED: dict[tuple[str, str], str] = {}


def names(framework: str) -> tuple[str, ...]:
    return tuple(k.name for k in KNOB_SETS if k.framework == framework)


def get(framework: str, name: str) -> KnobSet:
    """The knob set ``name`` of ``framework``; a one-line error naming the choices."""
    for knob_set in KNOB_SETS:
        if (knob_set.framework, knob_set.name) == (framework, name):
            return knob_set
    others = [k.framework for k in KNOB_SETS if k.name == name]
    where = f" (a knob set of {', '.join(others)}, not of {framework})" if others else ""
    raise ParallaxError(f"unknown --tuning '{name}' for {framework}{where}; choose one of: "
                        f"{', '.join((TUNED_NAME, *names(framework)))}")


def resolve(framework: str, recipe, name: str) -> KnobSet:
    """The knob set a run of ``recipe`` (a spec.recipe.Recipe) with ``--tuning name`` runs,
    ``tuned`` looked up in TUNED; a one-line error for a name the recipe cannot take."""
    if name == TUNED_NAME:
        name = TUNED.get((framework, recipe.name), DEFAULT)
    knob_set = get(framework, name)
    if knob_set.graphs and recipe.cuda_graphs:
        others = ", ".join(n for n in names(framework) if not get(framework, n).graphs)
        raise ParallaxError(f"--tuning {knob_set.name} replays the compiled step as CUDA graphs, but recipe "
                            f"{recipe.key} compiles only its glue and captures its blocks itself (--cuda-graphs); "
                            f"choose another knob set: {others}")
    clash = {f.split("=", 1)[0] for f in recipe.params.get("xla_flags", ())} & \
        {f.split("=", 1)[0] for f in knob_set.xla_flags}
    if clash:
        raise ParallaxError(f"--tuning {knob_set.name} sets {sorted(clash)[0]}, which recipe {recipe.key} sets "
                            "itself; choose another knob set")
    return knob_set


def record(framework: str, recipe, name: str) -> dict:
    """run.json's ``tuning``: the name asked for, the knob set it ran, and its knobs."""
    knob_set = resolve(framework, recipe, name)
    return {"name": name, "knob_set": knob_set.name, "knobs": knob_set.knobs}


def of_run(run: dict) -> str:
    """The knob set a run.json ran: ``default`` for runs written before tuning existed."""
    tuning = run.get("tuning") if isinstance(run.get("tuning"), dict) else {}
    return str(tuning.get("knob_set") or DEFAULT)


def of_framework(entries: tuple[str, ...], framework: str) -> tuple[str, ...]:
    """The knob sets a benchmark's ``--tunings`` (entries "FRAMEWORK:NAME", or a bare NAME for
    every framework) gives ``framework``'s cells, in order; none named: default."""
    found = [e.rpartition(":")[2] for e in entries if e.rpartition(":")[0] in ("", framework)]
    return tuple(dict.fromkeys(found)) or (DEFAULT,)


def takes(recipe, name: str) -> bool:
    """Whether ``recipe`` can run the knob set ``name`` (a benchmark makes no cell where not)."""
    try:
        resolve(recipe.framework, recipe, name)
    except ParallaxError:
        return False
    return True
