"""Experiment plans: a benchmark's matrix and protocol as a TOML file, run by ``parallax benchmark --plan``.

The plans the project runs ship in this package (``fp8-matrix.toml``, ...); a user's plan is any
file with the same keys. A plan's keys are ``parallax benchmark``'s options under their option
names (``batch_size`` for ``--batch-size``), lists as TOML arrays, plus:
- ``description``: one line, what the plan answers (``--list-plans`` prints it);
- ``protocol``: ``throughput`` or ``convergence`` (``--convergence``);
- ``data``: ``synthetic``, ``hf`` or ``tokens`` (a prepared token folder, given with ``--data DIR``
  where the plan runs: its place differs between machines);
- ``presets`` instead of ``model``: a crossover plan, one benchmark per preset into OUTPUT/PRESET.
Options the plan leaves out keep the command's defaults; every key and type is checked on load.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from parallax.errors import ParallaxError
from parallax.store import files

SUFFIX = ".toml"
PROTOCOLS = ("throughput", "convergence")
DATA = ("synthetic", "hf", "tokens")
# key -> (type, what the error calls it); lists hold the type named after "list of"
KEYS: dict[str, tuple[type, str]] = {
    "description": (str, "a string"),
    "protocol": (str, f"one of {', '.join(PROTOCOLS)}"),
    "frameworks": (list, "a list of strings"),
    "precisions": (list, "a list of strings"),
    "recipes": (list, "a list of strings"),
    "tunings": (list, "a list of strings (FRAMEWORK:KNOBSET or KNOBSET)"),
    "model": (str, "a string (a preset)"),
    "presets": (list, "a list of strings (presets)"),
    "batch_size": (int, "an integer"),
    "seq_len": (int, "an integer"),
    "steps": (int, "an integer"),
    "warmup": (int, "an integer"),
    "repeats": (int, "an integer"),
    "seeds": (list, "a list of integers"),
    "data": (str, f"one of {', '.join(DATA)}"),
    "epochs": (float, "a number"),
    "eval_every": (int, "an integer"),
    "eval_batches": (int, "an integer"),
    "timeout_per_run": (float, "a number (seconds)"),
    "concurrent": (int, "an integer"),
    "gpus": (list, "a list of integers or \"all\""),
    "sharding": (str, "a string"),
    "max_loss_gap": (float, "a number"),
    "compile": (bool, "true or false"),
    "cuda_graphs": (str, "a string"),
    "report": (bool, "true or false"),
    "resume": (bool, "true or false"),
}
REQUIRED = ("description", "protocol", "frameworks", "precisions")
LIST_ITEMS = {"seeds": int, "gpus": (int, str)}  # other lists hold strings
# plan keys that are benchmark options as they are (the rest are translated in `options`)
SAME = ("batch_size", "seq_len", "steps", "warmup", "repeats", "epochs", "eval_every", "eval_batches",
        "timeout_per_run", "concurrent", "sharding", "max_loss_gap", "cuda_graphs", "report", "resume")


@dataclass(frozen=True)
class Plan:
    name: str
    source: str  # the file it was read from
    values: dict  # the plan's keys as written

    @property
    def description(self) -> str:
        return self.values["description"]

    @property
    def presets(self) -> tuple[str, ...]:
        """A crossover plan's presets (one benchmark each); () for a plan of one benchmark."""
        return tuple(self.values.get("presets", ()))

    def options(self) -> dict:
        """The plan as ``parallax benchmark``'s option values (as click passes them), presets aside."""
        v = self.values
        out = {k: float(v[k]) if KEYS[k][0] is float else v[k] for k in SAME if k in v}  # 20 -> 20.0, as click
        out["frameworks"] = ",".join(v["frameworks"])
        out["precisions"] = ",".join(v["precisions"])
        out["convergence"] = v["protocol"] == "convergence"
        for key in ("recipes", "seeds", "gpus", "tunings"):
            if key in v:
                out[key] = ",".join(str(x) for x in v[key])
        if "model" in v:
            out["model"] = v["model"]
        if "compile" in v:
            out["no_compile"] = not v["compile"]
        if "data" in v:
            out["synthetic"], out["hf"] = v["data"] == "synthetic", v["data"] == "hf"
        return out

    @property
    def needs_tokens(self) -> bool:
        return self.values.get("data") == "tokens"


def shipped() -> dict[str, Path]:
    """name -> file of every plan in this package."""
    folder = resources.files(__name__)
    return {p.name.removesuffix(SUFFIX): Path(str(p)) for p in sorted(folder.iterdir(), key=lambda p: p.name)
            if p.name.endswith(SUFFIX)}


def find(name_or_file: str) -> Path:
    """A shipped plan's file by name, or the TOML file given."""
    if name_or_file.endswith(SUFFIX) or "/" in name_or_file:
        path = Path(name_or_file)
        if not path.is_file():
            raise ParallaxError(f"no plan file {name_or_file}; give a TOML file or a plan name "
                                f"({', '.join(shipped())})")
        return path
    plans = shipped()
    if name_or_file not in plans:
        raise ParallaxError(f"unknown plan '{name_or_file}'; choose one of: {', '.join(plans)} (or give a "
                            f"{SUFFIX} file)")
    return plans[name_or_file]


def load(name_or_file: str) -> Plan:
    path = find(name_or_file)
    try:
        values = tomllib.loads(files.read_text(path, "plan", f"pass a {SUFFIX} file (UTF-8 TOML)"))
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        raise ParallaxError(f"{path}:{line.group(1) if line else 1}: not valid TOML ({exc})") from None
    check(values, path)
    return Plan(path.name.removesuffix(SUFFIX), str(path), values)


def check(values: dict, path: Path) -> None:
    """Every key known and of its type, the required ones there, values from their choices."""
    for key, value in values.items():
        if key not in KEYS:
            raise ParallaxError(f"{path}: unknown key '{key}'; remove it (the keys: {', '.join(KEYS)})")
        check_type(key, value, path)
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise ParallaxError(f"{path}: missing key '{missing[0]}'; add it ({KEYS[missing[0]][1]})")
    if ("model" in values) == ("presets" in values):
        raise ParallaxError(f"{path}: give either 'model' (one benchmark) or 'presets' (a crossover), not "
                            f"{'both' if 'model' in values else 'neither'}")
    for key, choices in (("protocol", PROTOCOLS), ("data", DATA)):
        if key in values and values[key] not in choices:
            raise ParallaxError(f"{path}: '{key}' must be one of {', '.join(choices)}, got '{values[key]}'")
    check_names(values, path)


def check_type(key: str, value, path: Path) -> None:
    kind, said = KEYS[key]
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is list:
        item = LIST_ITEMS.get(key, str)
        ok = isinstance(value, list) and bool(value) and all(
            isinstance(x, item) and not isinstance(x, bool) for x in value)
        if key == "gpus" and ok:
            ok = all(isinstance(x, int) or x == "all" for x in value)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ParallaxError(f"{path}: '{key}' must be {said}{' (not empty)' if kind is list else ''}, "
                            f"got {value!r}")


def check_names(values: dict, path: Path) -> None:
    """Frameworks, formats, recipes and presets that exist: a typo fails here, before any cell runs."""
    from parallax.spec.config import PRESETS
    from parallax.spec import registry, tuning

    try:
        frameworks = tuple(registry.check_framework(f) for f in values["frameworks"])
        formats = tuple(registry.check_format(p) for p in values["precisions"])
        registry.select(frameworks, formats + tuple(values.get("recipes", ())))
    except ParallaxError as exc:
        raise ParallaxError(f"{path}: {exc}") from None
    for entry in values.get("tunings", ()):  # a knob set of a framework of the plan
        framework, _, name = entry.rpartition(":")
        try:
            for fw in [framework] if framework else frameworks:
                if name != tuning.TUNED_NAME:
                    tuning.get(registry.check_framework(fw), name)
        except ParallaxError as exc:
            raise ParallaxError(f"{path}: {exc}") from None
    for preset in values.get("presets", [values.get("model")]):
        if preset not in PRESETS and preset != "auto":
            raise ParallaxError(f"{path}: unknown model preset '{preset}'; choose one of: {', '.join(PRESETS)}")


def listing() -> list[tuple[str, str]]:
    """(name, what it answers) of each shipped plan."""
    return [(name, load(str(path)).description) for name, path in shipped().items()]


def benchmark_runs(plan: Plan, options: dict, given: set[str]) -> list[dict]:
    """The options of each benchmark the plan runs: the plan's value of each option the command line
    did not give (given ones win), and for a crossover plan one benchmark per preset into
    OUTPUT/PRESET (``--model`` narrows it to that preset)."""
    mine = plan.options()
    if given & {"synthetic", "hf", "data"}:  # the command line's data replaces the plan's
        mine.pop("synthetic", None), mine.pop("hf", None)
    elif plan.needs_tokens:
        raise ParallaxError(f"plan '{plan.name}' trains on a prepared token folder; give --data DIR "
                            "(see 'parallax data prepare')")
    resolved = {**options, **{k: v for k, v in mine.items() if k not in given}}
    if not plan.presets:
        return [resolved]
    presets = (options["model"],) if "model" in given else plan.presets
    return [{**resolved, "model": p, "output_dir": str(Path(options["output_dir"]) / p)} for p in presets]
