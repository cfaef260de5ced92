"""Model presets and run configuration: the only home of defaults, validated in one place."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from parallax.errors import ParallaxError
from parallax.spec import config_schema, tuning
from parallax.spec.recipe import FORMATS as PRECISIONS
from parallax.spec.recipe import FRAMEWORKS, Recipe


@dataclass(frozen=True)
class ModelConfig:
    """A LLaMA decoder: pre-norm RMSNorm, RoPE (half-split), SwiGLU MLP, untied embeddings."""

    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    max_seq_len: int
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical parameter names and shapes; linear weights are [in, out] (y = x @ W)."""
        d, f, v = self.d_model, self.d_ff, self.vocab_size
        shapes: dict[str, tuple[int, ...]] = {"tok_embeddings": (v, d)}
        for i in range(self.n_layers):
            p = f"layers.{i}."
            shapes[p + "attention_norm"] = (d,)
            for name in ("wq", "wk", "wv"):
                shapes[p + name] = (d, self.n_heads * self.head_dim)
            shapes[p + "wo"] = (self.n_heads * self.head_dim, d)
            shapes[p + "ffn_norm"] = (d,)
            shapes[p + "w_gate"] = (d, f)
            shapes[p + "w_up"] = (d, f)
            shapes[p + "w_down"] = (f, d)
        shapes["norm"] = (d,)
        shapes["lm_head"] = (d, v)
        return shapes

    def param_count(self) -> int:
        total = 0
        for shape in self.param_shapes().values():
            n = 1
            for s in shape:
                n *= s
            total += n
        return total


PRESETS: dict[str, ModelConfig] = {
    # The spec's model: exactly 100,313,856 parameters.
    "llama-100m": ModelConfig(
        name="llama-100m", vocab_size=10_000, d_model=768, n_layers=12, n_heads=12,
        d_ff=2048, max_seq_len=1024,
    ),
    # llama-100m with 6 heads of 128 instead of 12 of 64: the same d_model, weights and FLOPs in
    # every accounting (spec/flops.py counts attention as L·S·H·head_dim, and H·head_dim stays 768),
    # so only the attention kernels' shape differs. It exists because TransformerEngine's and
    # cuDNN's FP8 attention train only at head_dim 128 on Hopper (docs/fp8-attention.md).
    "llama-100m-hd128": ModelConfig(
        name="llama-100m-hd128", vocab_size=10_000, d_model=768, n_layers=12, n_heads=6,
        d_ff=2048, max_seq_len=1024,
    ),
    # Larger members of the same family, for where fp8 starts to pay (docs/presets.md):
    # 24 layers of d 1024 (16 heads of 64, SwiGLU 2816 = 8/3·d rounded up to 256): 328,811,520.
    "llama-330m": ModelConfig(
        name="llama-330m", vocab_size=10_000, d_model=1024, n_layers=24, n_heads=16,
        d_ff=2816, max_seq_len=1024,
    ),
    # 16 layers of d 2048 (16 heads of 128, SwiGLU 5632): 863,111,168.
    "llama-860m": ModelConfig(
        name="llama-860m", vocab_size=10_000, d_model=2048, n_layers=16, n_heads=16,
        d_ff=5632, max_seq_len=1024,
    ),
    # For tests and CPU runs: same architecture, small enough to train in seconds.
    "tiny": ModelConfig(
        name="tiny", vocab_size=10_000, d_model=64, n_layers=2, n_heads=4,
        d_ff=128, max_seq_len=128,
    ),
}


# What `train` and `benchmark` run when --model is not given: "auto" picks GPU_MODEL where the
# native probe finds an NVIDIA GPU, else CPU_MODEL on the CPU (see parallax.cli.defaults).
AUTO_MODEL = "auto"
DEFAULT_MODEL = AUTO_MODEL
GPU_MODEL, CPU_MODEL = "llama-100m", "tiny"

# ``RunConfig.cuda_graphs``: whether the torch engine captures the model's blocks in CUDA graphs
# (``engines/torch/engine.py`` decides in ``check``). "auto": where the recipe supports it (the
# TransformerEngine recipes, ``Recipe.cuda_graphs``) on a CUDA device; "on": that, or an error;
# "off": never.
CUDA_GRAPHS = ("auto", "on", "off")

# ``RunConfig.sharding``: how a run on several GPUs (``RunConfig.gpus`` > 1) holds its weights.
# "ddp": every rank holds all parameters and optimizer state, gradients are all-reduced
# (torch DistributedDataParallel; JAX: replicated params); "fsdp": parameters, gradients and
# optimizer state sharded over the ranks, gathered per block for compute (torch FSDP2
# ``fully_shard``; JAX: params sharded along the data axis). With one GPU both are plain training.
SHARDINGS = ("ddp", "fsdp")
# The collectives' timeout of a multi-process run (torch.distributed's process group): a rank
# that hangs makes the others' collectives fail within it instead of waiting forever.
DIST_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class PresetSizes:
    """The batch size and sequence length a preset runs with unless the user gives them."""

    batch_size: int
    seq_len: int


PRESET_SIZES: dict[str, PresetSizes] = {
    "llama-100m": PresetSizes(batch_size=32, seq_len=1024),  # the spec's benchmark shape
    "llama-100m-hd128": PresetSizes(batch_size=32, seq_len=1024),
    # The crossover presets keep the benchmark's tokens per step, so that speedups line up by size.
    "llama-330m": PresetSizes(batch_size=32, seq_len=1024),
    "llama-860m": PresetSizes(batch_size=32, seq_len=1024),
    "tiny": PresetSizes(batch_size=8, seq_len=128),  # seconds per step on a CPU
}


def get_preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ParallaxError(
            f"unknown model preset '{name}'; choose one of: {', '.join(PRESETS)}"
        ) from None


def preset_sizes(name: str) -> PresetSizes:
    get_preset(name)  # an unknown name is the same one-line error
    return PRESET_SIZES[name]


@dataclass(frozen=True)
class DataConfig:
    """How token data is prepared: `parallax data prepare`, and `train --data` on a raw corpus."""

    vocab_size: int = PRESETS["llama-100m"].vocab_size
    text_field: str = "text"
    valid: tuple[str, ...] = ()  # validation files; none: hold out every round(1/valid_fraction)-th document
    valid_fraction: float = 0.01  # TinyStories' own validation split is ~1% of its train split
    tokenizer: str | None = None  # a given tokenizer.json; none: train a byte-level BPE
    tokenizer_sample_mb: float = 256.0  # the tokenizer trains on at most this much leading train text
    hf: bool = False
    hf_dataset: str = "roneneldan/TinyStories"
    hf_train_split: str = "train"
    hf_valid_split: str = "validation"

    def validate(self) -> "DataConfig":
        """The ranges of config_schema.RANGES, in the command line's words."""
        ranges = config_schema.RANGES
        if ranges["vocab_size"].refusal(self.vocab_size):
            raise ParallaxError(f"--vocab-size must be in [2, 65536] (uint16 tokens), got {self.vocab_size}")
        if ranges["valid_fraction"].refusal(self.valid_fraction):
            raise ParallaxError(f"--valid-fraction must be in (0, 0.5], got {self.valid_fraction}")
        config_schema.check_option("tokenizer_sample_mb", self.tokenizer_sample_mb)
        if self.hf and self.valid:
            raise ParallaxError("--valid names local files; with --hf the dataset's validation split is used")
        return self


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup then cosine decay; identical in every engine."""

    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    lr_warmup_steps: int = 20


# RunConfig fields whose range ``validate`` checks; ``gpus`` is counted, and its range checked, by
# ``plan.world.resolve_gpus``.
RANGED_OPTIONS = ("batch_size", "seq_len", "steps", "warmup", "eval_every", "eval_batches", "epochs",
                  "peak_tflops", "dist_timeout_s", "seed")


@dataclass(frozen=True)
class RunConfig:
    """One training run: what `parallax train` does and what a benchmark cell runs."""

    framework: str = "torch"
    precision: str = "bf16"  # the number format; its framework's default recipe unless ``recipe``
    recipe: str | None = None  # a recipe name of the registry (parallax check-env lists them)
    model: str = GPU_MODEL  # a resolved preset; the command line's default is DEFAULT_MODEL
    batch_size: int = PRESET_SIZES[GPU_MODEL].batch_size
    seq_len: int = PRESET_SIZES[GPU_MODEL].seq_len
    steps: int = 200
    warmup: int = 20
    seed: int = 0
    synthetic: bool = True
    data: str | None = None
    eval_every: int = 0
    eval_batches: int = 8
    epochs: float | None = None  # passes over the training tokens allowed; None: at most one
    compile: bool = True
    cuda_graphs: str = "auto"  # one of CUDA_GRAPHS
    tuning: str = "default"  # a knob set of the framework, or "tuned" (spec/tuning.py)
    device: str = "auto"
    output_dir: str = "runs/latest"
    peak_tflops: float | None = None
    # Several GPUs (docs/multi-gpu.md): the resolved count of ranks (GPUs, or with --device cpu
    # CPU processes/devices); batch_size stays the PER-GPU batch (``global_batch``).
    gpus: int = 1
    sharding: str = "ddp"  # one of SHARDINGS
    dist_timeout_s: float = DIST_TIMEOUT_S
    optim: OptimConfig = field(default_factory=OptimConfig)

    @classmethod
    def for_preset(cls, model: str, **given) -> "RunConfig":
        """A run of preset ``model``: its batch size and sequence length unless ``given``."""
        sizes = preset_sizes(model)
        return cls(model=model, **{"batch_size": sizes.batch_size, "seq_len": sizes.seq_len, **given})

    @property
    def model_config(self) -> ModelConfig:
        return get_preset(self.model)

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over all ranks: ``batch_size`` per GPU × ``gpus``."""
        return self.batch_size * self.gpus

    @property
    def tokens_per_step(self) -> int:
        """GLOBAL tokens per optimizer step (all ranks together)."""
        return self.global_batch * self.seq_len

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, required: tuple[str, ...] = ()) -> "RunConfig":
        """The run of a configuration file's ``data``, its fields' types and ranges checked
        (``spec/config_schema.py``): a one-line ParallaxError for the first bad field, or for a
        field of ``required`` missing. A file that names a preset and leaves out its batch size or
        sequence length gets the preset's, as the command line does (``for_preset``)."""
        checked = config_schema.check(cls, data, required)
        if checked.get("model") in PRESET_SIZES:
            return cls.for_preset(**checked)
        return cls(**checked)

    def validate(self, timed: bool = True, recipe: Recipe | None = None) -> "RunConfig":
        """Raise ParallaxError for the first bad field; return the run with its recipe named
        (``precision`` the recipe's format) when all are good. ``recipe``: the run's recipe,
        where the caller looked it up (``plan.resolve``, with the machine's GPU choosing a
        default); None: looked up here, the format's default where no GPU chooses. ``timed``:
        the run's step times are measured, so its first step, which compiles (torch.compile,
        XLA), must be a warmup step. ``parallax parity`` times nothing. ``gpus`` is checked
        against the machine by ``plan.world.resolve_gpus``, not here."""
        from parallax.spec import registry

        if recipe is None:
            recipe = registry.resolve(self.framework, self.precision, self.recipe)
        model = get_preset(self.model)
        for name in RANGED_OPTIONS:  # the ranges a configuration file is held to (config_schema.RANGES)
            config_schema.check_option(name, getattr(self, name))
        if timed and self.warmup < 1:
            raise ParallaxError(
                "--warmup must be at least 1: the first step compiles, and timing it would skew every statistic"
            )
        if self.steps <= self.warmup:
            raise ParallaxError(
                f"--steps ({self.steps}) must be greater than --warmup ({self.warmup}): "
                "warmup steps are excluded from throughput"
            )
        if self.seq_len > model.max_seq_len:
            raise ParallaxError(
                f"--seq-len {self.seq_len} exceeds the '{model.name}' preset's maximum "
                f"{model.max_seq_len}; lower --seq-len or pick another --model"
            )
        if self.seq_len % 2:
            raise ParallaxError(f"--seq-len must be even for RoPE, got {self.seq_len}")
        if self.cuda_graphs not in CUDA_GRAPHS:
            raise ParallaxError(f"--cuda-graphs must be one of {', '.join(CUDA_GRAPHS)}, got {self.cuda_graphs!r}")
        if self.sharding not in SHARDINGS:
            raise ParallaxError(f"--sharding must be one of {', '.join(SHARDINGS)}, got {self.sharding!r}")
        knob_set = tuning.resolve(self.framework, recipe, self.tuning)
        if not self.compile and (knob_set.compile_mode or knob_set.inductor):
            raise ParallaxError(f"--tuning {knob_set.name} sets torch.compile's knobs; drop --no-compile "
                                "or use --tuning default")
        return self.replace(precision=recipe.format, recipe=recipe.name)
