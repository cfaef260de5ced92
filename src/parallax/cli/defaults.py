"""What `train` and `benchmark` run when the user leaves things out, said in one line.

``--model auto`` (the default, ``config.DEFAULT_MODEL``) is llama-100m where the native probe
finds an NVIDIA GPU, else the tiny preset on the CPU. A preset brings its own batch size and
sequence length (``config.PRESET_SIZES``) unless the user gives them. The values themselves
live in ``spec/config.py``; this module only decides between them.
"""

from __future__ import annotations

from parallax import errors
from parallax.spec.config import AUTO_MODEL, CPU_MODEL, DEFAULT_MODEL, GPU_MODEL, PRESET_SIZES, RunConfig, preset_sizes


def gpu_found() -> bool:
    from parallax.plan import machine

    return bool(machine.devices())


def model_help() -> str:
    return (f"Model preset ({', '.join(PRESET_SIZES)}) or '{AUTO_MODEL}': {GPU_MODEL} on a GPU, "
            f"else {CPU_MODEL} on the CPU.")


def sizes_help(field: str) -> str:
    """'[default: the preset's: llama-100m 32, tiny 8]' for --batch-size (field batch_size)."""
    values = ", ".join(f"{name} {getattr(sizes, field)}" for name, sizes in PRESET_SIZES.items())
    return f"the preset's: {values}"


def resolve(given: dict, doing: str = "training") -> tuple[dict, str | None]:
    """``given`` (the options the user set, None left out) with the model resolved and the
    preset's sizes filled in, and for ``--model auto`` the line that says what it chose."""
    model = given.get("model", DEFAULT_MODEL)
    resolved = dict(given)
    if model == AUTO_MODEL:
        if gpu_found():
            model = GPU_MODEL
        else:
            model = CPU_MODEL
            resolved.setdefault("device", "cpu")
    sizes = preset_sizes(model)
    resolved["model"] = model
    resolved.setdefault("batch_size", sizes.batch_size)
    resolved.setdefault("seq_len", sizes.seq_len)
    note = None
    if given.get("model", DEFAULT_MODEL) == AUTO_MODEL:
        shape = f"batch {resolved['batch_size']}, seq {resolved['seq_len']}"
        if model == CPU_MODEL:
            note = f"no NVIDIA GPU found; {doing} the '{CPU_MODEL}' preset on the CPU ({shape}) instead of {GPU_MODEL}"
        else:
            note = f"NVIDIA GPU found; {doing} {GPU_MODEL} ({shape}); --model {CPU_MODEL} for a quick run"
    return resolved, note


def run_config(given: dict, doing: str = "training") -> tuple[RunConfig, str | None]:
    """The RunConfig of ``given`` options (what is not given keeps RunConfig's defaults) and
    the note of ``resolve``."""
    resolved, note = resolve(given, doing)
    return RunConfig.for_preset(resolved.pop("model"), **resolved), note


def say(note: str | None) -> None:
    """The note of ``resolve`` on stderr: print it once the input is known to be good, so that
    bad input stays one error line."""
    if note:
        errors.say(f"parallax: {note}")
