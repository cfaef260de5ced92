"""The schema of a run configuration file (``train --config``, benchmark cells, run.json's
'config'): every field's type and range in one table, checked before a RunConfig is built.

Types come from RunConfig's and OptimConfig's annotations; ranges from RANGES below, which the
command line's checks (``RunConfig.validate``) read too, in their own words. JSON has no
int/bool/float distinction that Python keeps, so it is made here: ``true`` is not a step count,
``8.7`` not a batch size, ``"8"`` not a number. A file must name what it runs (REQUIRED); other
fields missing take RunConfig's defaults (older files lack newer fields).
The loader is ``RunConfig.from_dict``; ``train --config`` asks for REQUIRED.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass

from parallax.errors import ParallaxError

@dataclass(frozen=True)
class Range:
    """A numeric field's bounds: ``low`` (allowed itself when ``inclusive``), below 1 as well with
    ``below_one`` (Adam's betas), at most ``high`` (what the engines and the machine can take:
    indices, seeds, timers); every value finite."""

    low: float
    inclusive: bool = True
    below_one: bool = False
    high: float | None = None

    def refusal(self, value) -> str | None:
        """Why ``value`` is out of range ('must be at least 1', ...), or None. NaN and the
        infinities are out of every range."""
        return self.unbounded(value) or self.below(value) or self.above(value)

    @staticmethod
    def unbounded(value) -> str | None:
        """'must be a finite number' for NaN and the infinities, else None."""
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        return None

    def below(self, value) -> str | None:
        """Why ``value`` is under the low bound, or None."""
        if not (value > self.low or (self.inclusive and value == self.low)):
            return f"must be {'at least' if self.inclusive else 'greater than'} {self.low}"
        return None

    def above(self, value) -> str | None:
        """Why ``value`` is over the high bound, or None."""
        if self.below_one and value >= 1:
            return "must be below 1"
        if self.high is not None and value > self.high:
            return f"must be at most {self.high:g}" if isinstance(self.high, float) else f"must be at most {self.high}"
        return None


# The largest values the engines take: a step counter and a token index in int32 (XLA, CUDA
# kernels), a seed in uint32 (numpy's and JAX's generators), a timeout in a C timer.
MAX_STEPS = 2**31 - 1
MAX_SEED = 2**32 - 1
MAX_BATCH = 2**16  # sequences per GPU; batch × sequence length stays an int32 index
MAX_SECONDS = 10.0**7  # 115 days
MAX_FLOAT = 10.0**6  # epochs, TFLOP/s, loss gaps: finite and far above any real value

# The one place that decides every numeric field's range, for a configuration file (``check``),
# for the command line (``check_option``, from ``RunConfig.validate``) and for the options of
# the commands around a run (benchmark's ``repeats``...: ``check_option`` from their validation).
# A field not named has no bound but finiteness; "optim.x" is OptimConfig's.
RANGES: dict[str, Range] = {
    "batch_size": Range(1, high=MAX_BATCH), "seq_len": Range(1, high=2**20), "steps": Range(1, high=MAX_STEPS),
    "warmup": Range(0, high=MAX_STEPS), "eval_every": Range(0, high=MAX_STEPS), "eval_batches": Range(1, high=2**20),
    "epochs": Range(0, False, high=MAX_FLOAT), "gpus": Range(1, high=2**16), "seed": Range(0, high=MAX_SEED),
    "peak_tflops": Range(0, False, high=MAX_FLOAT), "dist_timeout_s": Range(0, False, high=MAX_SECONDS),
    "optim.lr": Range(0, False, high=MAX_FLOAT), "optim.min_lr_ratio": Range(0, high=MAX_FLOAT),
    "optim.beta1": Range(0, below_one=True), "optim.beta2": Range(0, below_one=True),
    "optim.eps": Range(0, False, high=MAX_FLOAT), "optim.weight_decay": Range(0, high=MAX_FLOAT),
    "optim.grad_clip": Range(0, False, high=MAX_FLOAT), "optim.lr_warmup_steps": Range(0, high=MAX_STEPS),
    # the options around a run (benchmark, profile)
    "repeats": Range(1, high=10**4), "concurrent": Range(1, high=256), "max_loss_gap": Range(0, False, high=MAX_FLOAT),
    "timeout_per_run": Range(0, False, high=MAX_SECONDS), "profile_warmup": Range(1, high=10**6),
    "profile_steps": Range(1, high=10**6),
    # data prepare (DataConfig): uint16 token files; a hold-out of at most half; a finite sample
    "vocab_size": Range(2, high=65536), "valid_fraction": Range(0, False, high=0.5),
    "tokenizer_sample_mb": Range(0, False, high=MAX_FLOAT),
}
# The command line's words for a bound (a configuration file says the bound itself: 'at least 1').
BOUND_WORDS = {(1, True): "must be positive", (0, False): "must be positive", (0, True): "must not be negative"}
# Fields whose command-line refusal reads otherwise: field -> (its name in the message, the words
# after it, a hint after the value); None keeps '--field-name' and BOUND_WORDS.
OPTION_WORDING: dict[str, tuple[str | None, str | None, str]] = {
    "eval_every": (None, "must be 0 (never) or positive", ""),
    "eval_batches": (None, None, " (to skip evaluation, use --eval-every 0)"),
    "dist_timeout_s": ("dist_timeout_s", None, ""),
    "repeats": (None, "must be at least 1", ""),
    "concurrent": (None, "must be at least 1", ""),
    "profile_warmup": ("--warmup", None, ""),
    "profile_steps": ("--steps", None, ""),
}
REQUIRED = ("framework", "precision", "model")


def check_option(name: str, value) -> None:
    """A one-line ParallaxError in the command line's words ('--batch-size must be positive, got
    0') when ``value`` of RunConfig field ``name`` is out of RANGES; None passes (an unset option)."""
    bound = RANGES[name]
    if value is None or bound.refusal(value) is None:
        return
    label, words, hint = OPTION_WORDING.get(name, (None, None, ""))
    label = label or f"--{name.replace('_', '-')}"
    low = None if bound.unbounded(value) else bound.below(value)
    if low is None:  # not finite, or too large
        raise ParallaxError(f"{label} {bound.unbounded(value) or bound.above(value)}, got {value}")
    words = words or BOUND_WORDS.get((bound.low, bound.inclusive), low)
    raise ParallaxError(f"{label} {words}, got {value}{hint}")


_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _kind(value, annotation) -> type | None:
    """The plain type ``value`` must have under ``annotation`` (None: it is None and may be)."""
    args = typing.get_args(annotation)
    if value is None and type(None) in args:
        return None
    base = next((a for a in args if a is not type(None)), annotation)
    return base


def _check_value(name: str, value, annotation):
    kind, shown = _kind(value, annotation), json.dumps(value)  # as the file wrote it
    if kind is None:
        return value
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(kind, True)
    if not ok:
        raise ParallaxError(f"'{name}' must be {_KINDS[kind]}, got {shown}")
    if kind is float:
        value = float(value)
        if not math.isfinite(value):
            raise ParallaxError(f"'{name}' must be a finite number, got {shown}")
    refusal = RANGES[name].refusal(value) if name in RANGES else None
    if refusal:
        raise ParallaxError(f"'{name}' {refusal}, got {shown}")
    return value


def _check_fields(cls, data, prefix: str = "") -> dict:
    if not isinstance(data, dict):
        raise ParallaxError(f"'{prefix.rstrip('.') or 'the file'}' must be a JSON object, got {json.dumps(data)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ParallaxError(f"unknown field '{prefix}{unknown[0]}'; the fields are: {', '.join(sorted(names))}")
    return {k: _check_value(prefix + k, v, hints[k]) for k, v in data.items()}


def check(cls, data, required: tuple[str, ...] = ()) -> dict:
    """``data`` of a RunConfig ``cls`` with its numbers as their fields' types, or a one-line ParallaxError naming the
    first field of a wrong type, out of range, unknown, or ``required`` (a whole run's file:
    REQUIRED; a benchmark matrix's base run lacks the cell's fields) and missing."""
    if not isinstance(data, dict):
        raise ParallaxError(f"a run configuration is a JSON object, got {type(data).__name__}")
    missing = [k for k in required if k not in data]
    if missing:
        raise ParallaxError(f"'{missing[0]}' is missing; a run configuration names {', '.join(required)}")
    optim = data.get("optim", {})
    checked = _check_fields(cls, {k: v for k, v in data.items() if k != "optim"})
    optim_cls = typing.get_type_hints(cls)["optim"]
    checked["optim"] = optim_cls(**_check_fields(optim_cls, optim, "optim."))
    return checked
