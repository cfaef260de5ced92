"""The schema of a run configuration file (``train --config``, benchmark cells, run.json's
'config'): every field's type and range in one table, checked before a RunConfig is built.

Types come from RunConfig's and OptimConfig's annotations; ranges from RANGES below. JSON has no
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

from parallax.errors import ParallaxError

# field -> (lowest, lowest allowed itself?); a field not named has no bound. "optim.x": OptimConfig's.
RANGES: dict[str, tuple[float, bool]] = {
    "batch_size": (1, True), "seq_len": (2, True), "steps": (1, True), "warmup": (0, True),
    "eval_every": (0, True), "eval_batches": (1, True), "epochs": (0, False), "gpus": (1, True),
    "peak_tflops": (0, False), "dist_timeout_s": (0, False),
    "optim.lr": (0, False), "optim.min_lr_ratio": (0, True), "optim.beta1": (0, True),
    "optim.beta2": (0, True), "optim.eps": (0, False), "optim.weight_decay": (0, True),
    "optim.grad_clip": (0, False), "optim.lr_warmup_steps": (0, True),
}
# Below one (exclusive) as well: Adam's betas.
BELOW_ONE = ("optim.beta1", "optim.beta2")
REQUIRED = ("framework", "precision", "model")

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
    if name in RANGES:
        low, inclusive = RANGES[name]
        if value < low or (value == low and not inclusive):
            raise ParallaxError(f"'{name}' must be {'at least' if inclusive else 'greater than'} {low}, got {shown}")
    if name in BELOW_ONE and value >= 1:
        raise ParallaxError(f"'{name}' must be below 1, got {shown}")
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
