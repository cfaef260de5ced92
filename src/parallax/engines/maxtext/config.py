"""A RunConfig as MaxText config keys: the one mapping ``export-configs`` and the engine share.

Keys were read from MaxText 0.2.5 (``maxtext/configs/base.yml``, ``configs/types.py``,
``utils/maxtext_utils.py:create_learning_rate_schedule``, ``optimizers/optimizers.py``). Every
key written here must exist in the installed ``base.yml``; ``check_keys`` names the first that
does not (a MaxText version whose keys moved).

What matches our engines exactly: the model (REFERENCE.md §5), batch, sequence, steps, AdamW
(b1, b2, eps, weight decay on matrices only via ``adamw_mask``), global-norm clipping, the
cosine part of the schedule (MaxText's ``pct = (step - W) / (steps - W - 1)`` is ours), and the
initial weights: the engine writes ``parallax.engines.weights.init_weights(model, seed)`` as a MaxText
checkpoint (``initial_weights.py``) and names it in ``load_parameters_path`` (``weights_keys``).
What cannot: MaxText's linear warmup starts at 0 (``lr·step/W``), ours at ``lr/W``
(``lr·(step+1)/W``), so MaxText's warmup runs one step behind ours. And MaxText's llama2 holds
the query kernel as ``wq / s`` (s = sqrt(head_dim), the attention scale folded into the kernel,
``weights.py``), which no key changes: the same function, but AdamW on ``wq / s`` moves the query
projection s times as far per step as ours (8x for head_dim 64), and its global gradient norm
(metric and clipping) counts the query's gradient s times. That is why MaxText's gradient norm
runs above ours after warm-up (docs/results/2026-12-02-cpu-gradnorm/).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from parallax.spec.config import RunConfig
from parallax.spec.recipe import Recipe
from parallax.engines.maxtext.child import TRAIN_MODULE  # noqa: F401 (config.TRAIN_MODULE, as before)
from parallax.errors import ParallaxError

# MaxText's pyconfig takes argv[1] as the config only when it ends in ".yml".
SUFFIX = ".yml"
PINNED_VERSION = "0.2.5"

# How MaxText is set up for one GPU: its documentation's advice for small models on GPUs
# (no layer scan, the cheaper remat policy, cuDNN flash attention through JAX, which needs no
# TE; measured: docs/maxtext.md#tuning-a-fair-maxtext), and how Grain feeds real tokens
# (GRAIN_FEED; synthetic data reads none of them).
#
# Grain (real tokens only; docs/maxtext.md#feeding-maxtext): MaxText 0.2.5's mmap_npy pipeline
# runs ``mp_prefetch`` BEFORE ``batch`` (to keep the sample order), so each worker process hands
# over single samples and ``grain_per_worker_buffer_size`` counts samples, not batches. base.yml's
# buffer of 1 lets each worker run one sample ahead of the training loop, which then waits on
# the workers for every one of a batch's 32 samples: input-bound at 493k tokens/s against 627k
# synthetic on the H200 with four workers (docs/results/2026-12-01-h200-e/, -f/, the 2026-12-04
# evidence). Tuned: eight worker processes (the H200 host has 16 cores; one sample costs one core
# 2.5-5 ms, docs/results/2026-12-01-cpu-maxtext/grain/, so eight make a 32-row batch in ~10-20 ms
# against a ~52 ms step), each up to GRAIN_BUFFER_SAMPLES samples (two batches over the
# workers, twice over) ahead. The read threads and read-ahead of each worker (``grain.ReadOptions``)
# stay at base.yml's values, written out. mp_prefetch interleaves its workers round-robin, which
# keeps the batches in our order (80 of 80 batches equal to our loader's with 1, 2 and 4
# workers, on the CPU; eight not yet checked there). Measured on the H200 (docs/results/
# 2026-12-04-h200-c/): still input-bound (478k tokens/s, 61% of the step waiting, against 624k
# synthetic), as is Grain in process (--tuning grain-in-process): the cost is per sample in the
# consuming process, which no worker count removes; docs/maxtext.md#feeding-maxtext.
GRAIN_WORKERS = 8
GRAIN_BUFFER_SAMPLES = 16
GRAIN_FEED = {"grain_worker_count": GRAIN_WORKERS, "grain_per_worker_buffer_size": GRAIN_BUFFER_SAMPLES,
              "grain_num_threads": 16, "grain_prefetch_buffer_size": 500}
# base.yml's own Grain values
GRAIN_BASE = {"grain_worker_count": 1, "grain_per_worker_buffer_size": 1, "grain_num_threads": 16,
              "grain_prefetch_buffer_size": 500}
TUNINGS = {
    "tuned": {"scan_layers": False, "remat_policy": "minimal", "attention": "cudnn_flash_jax", **GRAIN_FEED},
    # base.yml's own values, written out so that the file says what runs.
    "defaults": {"scan_layers": True, "remat_policy": "full", "attention": "autoselected", **GRAIN_BASE},
}
DEFAULT_TUNING = "tuned"


def recipe_tuning(recipe) -> str:
    """The performance settings a ``maxtext`` recipe runs with (its ``params["tuning"]``)."""
    tuning = recipe.params.get("tuning", DEFAULT_TUNING)
    if tuning not in TUNINGS:
        raise RuntimeError(f"recipe {recipe.key} names an unknown MaxText tuning '{tuning}'")
    return tuning


@dataclass(frozen=True)
class Section:
    title: str
    keys: dict


def warmup_fraction(warmup_steps: int, steps: int) -> float:
    """The ``warmup_steps_fraction`` for which MaxText's ``int(steps * fraction)`` is exactly
    ``warmup_steps`` (``W / steps`` can land a hair below W in floating point)."""
    if warmup_steps <= 0:
        return 0.0
    fraction = warmup_steps / steps
    while int(steps * fraction) < warmup_steps:
        fraction = math.nextafter(fraction, 1.0)
    if int(steps * fraction) != warmup_steps:
        raise ParallaxError(f"no warmup_steps_fraction gives {warmup_steps} warmup steps of {steps}")
    return fraction


def model_keys(run: RunConfig) -> dict:
    m = run.model_config
    return {
        "model_name": "default",
        "decoder_block": "llama2",
        "base_num_decoder_layers": m.n_layers,
        "base_emb_dim": m.d_model,
        "base_num_query_heads": m.n_heads,
        "base_num_kv_heads": m.n_heads,
        "head_dim": m.head_dim,
        "base_mlp_dim": m.d_ff,
        "mlp_activations": ["silu", "linear"],
        "normalization_layer_epsilon": m.norm_eps,
        "rope_max_timescale": int(m.rope_theta),
        "vocab_size": m.vocab_size,
        "logits_via_embedding": False,
        "dropout_rate": 0.0,
        "dtype": "bfloat16",
        "weight_dtype": "float32",
    }


def run_keys(run: RunConfig) -> dict:
    return {
        "max_target_length": run.seq_len,
        "per_device_batch_size": run.batch_size,  # one GPU: the global batch
        "steps": run.steps,
        "init_weights_seed": run.seed,
        "data_shuffle_seed": run.seed,
        "enable_checkpointing": False,
        "hardware": "gpu",
    }


def schedule_steps(warmup_steps: int, steps: int) -> int:
    """MaxText's ``learning_rate_schedule_steps`` for our schedule of ``steps`` steps.

    ``steps`` itself, except when the run is shorter than W + 2 steps: MaxText's
    ``warmup_steps_fraction`` must be <= 1 (its config rejects more), and its cosine of one
    step is already at the floor (``pct = 1.0`` when ``len_steps`` is 1) where ours is at the
    peak. With W + 2 schedule steps its warm-up is W steps and its cosine starts at the peak;
    the run stops at ``steps`` as ours does (MaxText's zero-LR tail needs steps > schedule)."""
    return max(steps, max(warmup_steps, 0) + 2)


def schedule_keys(run: RunConfig) -> dict:
    o = run.optim
    length = schedule_steps(o.lr_warmup_steps, run.steps)
    return {
        "learning_rate": o.lr,
        "lr_schedule_type": "cosine",
        "learning_rate_final_fraction": o.min_lr_ratio,
        "warmup_steps_fraction": warmup_fraction(o.lr_warmup_steps, length),
        "learning_rate_schedule_steps": length,
    }


def optimizer_keys(run: RunConfig) -> dict:
    o = run.optim
    return {
        "opt_type": "adamw",
        "adam_b1": o.beta1,
        "adam_b2": o.beta2,
        "adam_eps": o.eps,
        "adam_eps_root": 0.0,
        "adam_weight_decay": o.weight_decay,
        # no decay on the RMSNorm scales (paths .../pre_self_attention_layer_norm/scale, decoder_norm)
        "adamw_mask": ["norm"],
        "gradient_clipping_threshold": o.grad_clip,
    }


def mode_keys(recipe: Recipe) -> dict:
    return recipe.load_hooks().keys()


def synthetic_keys() -> dict:
    return {"dataset_type": "synthetic"}


def weights_keys(checkpoint_dir: Path) -> dict:
    """MaxText starts from the params-only checkpoint ``initial_weights.py`` wrote there (its
    own init, ``init_weights_seed``, is then overwritten leaf by leaf)."""
    return {"load_parameters_path": str(checkpoint_dir)}


def sections(run: RunConfig, recipe: Recipe, tuning: str | None = None, data: dict | None = None,
             output: dict | None = None, weights: dict | None = None, knobs: dict | None = None) -> list[Section]:
    """The keys of ``run`` of ``recipe`` in the order a reader wants them; ``tuning`` (default:
    the recipe's own), ``data`` (default synthetic), ``output`` (run_name, directories, metrics_file) and
    ``weights`` (``weights_keys``; default none: MaxText's own initial weights) as the engine
    fills them in; ``knobs``: the keys of the run's knob set (``--tuning``, spec/tuning.py)."""
    if tuning is None:
        tuning = recipe_tuning(recipe)
    if tuning not in TUNINGS:
        raise ParallaxError(f"unknown MaxText tuning '{tuning}'; choose one of: {', '.join(TUNINGS)}")
    found = [
        Section(f"model: {run.model} ({run.model_config.param_count():,} parameters)", model_keys(run)),
        Section("batch, sequence, steps, seeds", run_keys(run)),
        Section("schedule: linear warmup, then cosine to learning_rate * learning_rate_final_fraction",
                schedule_keys(run)),
        Section("optimizer: AdamW, global-norm clipping", optimizer_keys(run)),
        Section(f"precision: recipe maxtext:{recipe.name} ({recipe.format})", mode_keys(recipe)),
        Section(f"performance settings ({tuning}" + (f", with --tuning {run.tuning}'s keys)" if knobs else ")"),
                {**TUNINGS[tuning], **(knobs or {})}),
        Section("data", data or synthetic_keys()),
    ]
    if weights:
        found.append(Section(f"initial weights: parallax.engines.weights.init_weights({run.model}, seed {run.seed})",
                             weights))
    if output:
        found.append(Section("output", output))
    return found


def flat(found: list[Section]) -> dict:
    keys: dict = {}
    for section in found:
        twice = set(keys) & set(section.keys)
        if twice:
            raise RuntimeError(f"MaxText keys written twice: {', '.join(sorted(twice))}")
        keys.update(section.keys)
    return keys


# ----------------------------------------------------------------------------- YAML


def yaml_value(value) -> str:
    """A YAML scalar or flow list that PyYAML and OmegaConf read back as the same value
    (floats always with a '.' and a signed exponent: YAML 1.1 reads '1e-08' as a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text:
            mantissa, _, exponent = text.partition("e")
            if "." not in mantissa:
                mantissa += ".0"
            if exponent[0] not in "+-":
                exponent = "+" + exponent
            text = f"{mantissa}e{exponent}"
        elif "." not in text:
            text += ".0"
        return text
    if isinstance(value, str):
        return '""' if value == "" else _quoted(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    raise TypeError(f"no YAML form for {value!r}")


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(found: list[Section], header: list[str]) -> str:
    lines = [f"# {line}" if line else "#" for line in header]
    lines += ["", "base_config: base.yml"]
    for section in found:
        lines += ["", f"# {section.title}"]
        lines += [f"{key}: {yaml_value(value)}" for key, value in section.keys.items()]
    return "\n".join(lines) + "\n"


def header(run: RunConfig, recipe: Recipe, file_name: str, tuning: str) -> list[str]:
    """What the file is, what it needs, and the command that runs it."""
    from parallax import __version__

    need_cc = ".".join(map(str, recipe.min_cc or recipe.native_min_cc))
    packages = [f"maxtext {PINNED_VERSION}"]
    packages += [d[0] for d in recipe.backend.distributions if d[0] != "maxtext"]
    te = any("transformer_engine" in d[0] for d in recipe.backend.distributions)
    return [
        f"MaxText config written by Parallax {__version__} (parallax export-configs): recipe maxtext:{recipe.name},",
        f"{recipe.summary}; model {run.model}, batch {run.batch_size} x {run.seq_len}, {run.steps} steps, "
        f"tuning '{tuning}'.",
        f"Hardware: one NVIDIA GPU of compute capability {need_cc}+ ({recipe.format}).",
        f"Packages: Python >= 3.12, {', '.join(packages)}: pip install 'slm-parallax[maxtext]'"
        + (" (TE's JAX extension: transformer-engine[jax])" if te else "") + ".",
        "Run (any key=value after the file overrides it):",
        f"  DECOUPLE_GCLOUD=TRUE python3 -m {TRAIN_MODULE} {file_name} \\",
        "    run_name=parallax base_output_directory=/tmp/maxtext_output metrics_file=/tmp/metrics.jsonl",
        "Data: synthetic (MaxText repeats one fixed batch). parallax train --framework maxtext --data DIR",
        "keeps this key and hands MaxText Parallax's batches in its process (engines/maxtext/feed.py); with",
        "--tuning grain it writes the grain/mmap_npy keys in Parallax's batch order instead (docs/maxtext.md).",
        "Initial weights: MaxText's own (init_weights_seed). To start from Parallax's, as parallax train does:",
        f"  python3 -m parallax.engines.maxtext.initial_weights {file_name} /tmp/weights {run.model} {run.seed}",
        "  and add load_parameters_path=/tmp/weights (an absolute path).",
    ]


def file_name(run: RunConfig, recipe: Recipe) -> str:
    return f"maxtext-{run.model}-{recipe.name}{SUFFIX}"


# ----------------------------------------------------------------------------- drift check

_TOP_LEVEL_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:", re.MULTILINE)


def base_yml_keys(path: Path) -> set[str]:
    """The top-level keys of a MaxText ``base.yml`` (every key of the file starts a line)."""
    from parallax.store.files import read_text

    fix = "pass MaxText's configs/base.yml, or reinstall MaxText (pip install 'slm-parallax[maxtext]')"
    keys = set(_TOP_LEVEL_KEY.findall(read_text(path, "MaxText base.yml", fix)))
    if not keys:
        raise ParallaxError(f"MaxText base.yml {path} holds no top-level YAML key: it is not a base.yml; {fix}")
    return keys


def check_keys(keys: dict, base_yml: Path, version: str | None = None) -> None:
    """A one-line ParallaxError naming the first key that ``base_yml`` lacks."""
    known = base_yml_keys(base_yml)
    missing = [k for k in keys if k not in known]
    if missing:
        which = f"MaxText {version}" if version else "this MaxText"
        more = f" (and {len(missing) - 1} more: {', '.join(missing[1:4])})" if len(missing) > 1 else ""
        raise ParallaxError(
            f"{which} has no config key '{missing[0]}'{more} in {base_yml}; Parallax writes the keys of "
            f"MaxText {PINNED_VERSION}: pip install 'maxtext=={PINNED_VERSION}'")


def installed_base_yml() -> Path | None:
    """``maxtext/configs/base.yml`` of the installed MaxText, found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("maxtext")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "configs" / "base.yml"
        if path.is_file():
            return path
    return None


def installed_version() -> str | None:
    from parallax.plan.envinfo import package_version

    return package_version("maxtext")
