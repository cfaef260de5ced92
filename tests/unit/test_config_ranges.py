"""Numeric ranges are decided in one place (``config_schema.RANGES``): a configuration file and
the command line (``RunConfig.validate``) refuse the same values, each in its own words."""

from __future__ import annotations

import math
import typing

import pytest

from parallax.errors import ParallaxError
from parallax.spec import config_schema
from parallax.spec.config import RANGED_OPTIONS, RunConfig
from parallax.spec.config_schema import RANGES, Range

BASE = {"framework": "torch", "precision": "bf16", "model": "tiny", "device": "cpu", "batch_size": 2,
        "seq_len": 16, "steps": 4, "warmup": 1}


def edges(name: str) -> tuple[float, float]:
    """The value just out of ``name``'s range and the value just in it."""
    bound = RANGES[name]
    step = 1 if typing.get_type_hints(RunConfig)[name] is int else 0.5
    if bound.inclusive:
        return bound.low - step, bound.low
    return bound.low, bound.low + step


@pytest.mark.parametrize("name", RANGED_OPTIONS)
def test_a_file_and_the_command_line_refuse_the_same_values(name):
    out, inside = edges(name)
    with pytest.raises(ParallaxError, match=f"^'{name}' must be"):
        config_schema.check(RunConfig, {**BASE, name: out})
    with pytest.raises(ParallaxError, match=" must "):
        config_schema.check_option(name, out)
    config_schema.check(RunConfig, {**BASE, name: inside})
    config_schema.check_option(name, inside)


@pytest.mark.parametrize("name", [n for n in RANGED_OPTIONS if RANGES[n].high is not None])
def test_a_file_and_the_command_line_refuse_the_same_large_values(name):
    high = RANGES[name].high
    over = high + 1 if typing.get_type_hints(RunConfig)[name] is int else high * 2
    with pytest.raises(ParallaxError, match=f"^'{name}' must be at most"):
        config_schema.check(RunConfig, {**BASE, name: over})
    with pytest.raises(ParallaxError, match=" must be at most "):
        config_schema.check_option(name, over)
    config_schema.check_option(name, high)


def test_every_ranged_option_has_a_high_bound():
    """A number the engines cannot take (an int64 step count, a seed past uint32) is refused by
    the table, not by an OverflowError in the middle of a run."""
    assert [n for n in RANGED_OPTIONS if RANGES[n].high is None] == []


def test_the_command_line_keeps_its_words():
    cases = {("batch_size", 0): "--batch-size must be positive, got 0",
             ("warmup", -1): "--warmup must not be negative, got -1",
             ("eval_every", -1): "--eval-every must be 0 (never) or positive, got -1",
             ("eval_batches", 0): "--eval-batches must be positive, got 0 (to skip evaluation, use --eval-every 0)",
             ("epochs", 0.0): "--epochs must be positive, got 0.0",
             ("peak_tflops", math.nan): "--peak-tflops must be a finite number, got nan",
             ("epochs", math.inf): "--epochs must be a finite number, got inf",
             ("steps", 10**20): "--steps must be at most 2147483647, got 100000000000000000000",
             ("seed", 10**23): "--seed must be at most 4294967295, got 100000000000000000000000",
             ("batch_size", 10**8): "--batch-size must be at most 65536, got 100000000",
             ("dist_timeout_s", 0.0): "dist_timeout_s must be positive, got 0.0"}
    for (name, value), message in cases.items():
        with pytest.raises(ParallaxError) as refused:
            RunConfig.for_preset("tiny", **{"steps": 4, "warmup": 1, name: value}).validate()
        assert str(refused.value) == message


def test_a_changed_range_changes_both_paths(monkeypatch):
    monkeypatch.setitem(RANGES, "steps", Range(5))
    with pytest.raises(ParallaxError, match=r"^'steps' must be at least 5, got 4$"):
        RunConfig.from_dict({**BASE, "steps": 4})
    with pytest.raises(ParallaxError, match=r"^--steps must be at least 5, got 4$"):
        RunConfig.for_preset("tiny", steps=4, warmup=1).validate()


def test_a_file_naming_a_preset_without_its_sizes_takes_the_presets():
    run = RunConfig.from_dict({"framework": "torch", "precision": "bf16", "model": "tiny", "seq_len": 64})
    assert (run.batch_size, run.seq_len) == (8, 64)  # tiny's batch, the file's sequence length
    run = RunConfig.from_dict({"framework": "torch", "precision": "bf16", "model": "tiny"})
    assert (run.batch_size, run.seq_len) == (8, 128)
