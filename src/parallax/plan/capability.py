"""Can this machine run framework × precision, and how: native, emulated, cpu or unavailable, with why.

Decided per recipe of the registry from the GPU probe and installed-package metadata only
(no torch/JAX import), so ``check-env`` stays fast. Planned recipes (no hooks yet) are
reported as unavailable with what will run them and what the hardware would allow.
"""

from __future__ import annotations

import importlib.resources
import sys
from dataclasses import asdict, dataclass

from parallax.plan import hardware
from parallax.spec.precision import EMULATED, NATIVE, UNAVAILABLE
from parallax.spec import registry
from parallax.spec.recipe import FORMATS as PRECISIONS
from parallax.spec.recipe import FRAMEWORKS, Recipe

# Runs on the CPU: correct arithmetic, fine for the tiny preset and tests, not a benchmark.
CPU = "cpu"
STATUSES = (NATIVE, EMULATED, CPU, UNAVAILABLE)

# Distributions each framework's engine needs, and the extra that installs them.
REQUIRES = {
    "torch": (("torch",), "torch"),
    "jax": (("jax", "flax", "optax"), "jax"),
    "maxtext": (("maxtext",), "maxtext"),
}

NO_GPU = "no NVIDIA GPU found"


def runs_natively(fmt: str, platform: str, compute_capability=None) -> bool:
    """Whether a run's format executes in hardware: only on an NVIDIA GPU whose tensor cores
    have it. Never on the CPU, for every engine: XLA:CPU converts a bf16 dot's operands to
    float32, oneDNN has bf16 kernels only on some CPUs, and a CPU run is for correctness
    (status ``cpu``), not for a format's speed."""
    return platform in ("gpu", "cuda") and fmt in hardware.native_precisions(compute_capability)


def run_label(precision: dict) -> str:
    """The one word a result's precision (run.json's ``precision``) reads as, in every summary and
    report: 'emulated' for a quantize-dequantize recipe or a GPU that converts the format, 'cpu'
    for a run on the CPU (check-env's status), else 'native'."""
    details = precision.get("details") or {}
    if details.get("emulated"):
        return EMULATED
    if CPU in (details.get("device_type"), details.get("device_platform")):
        return CPU
    return EMULATED if precision.get("native") is False else NATIVE


@dataclass(frozen=True)
class Capability:
    framework: str
    recipe: str  # the recipe's name in the registry
    precision: str  # its format
    status: str  # one of STATUSES
    reason: str
    backend: str | None  # what runs it; None when nothing does
    default: bool = False  # the framework's recipe for --precision <format>

    @property
    def runnable(self) -> bool:
        return self.status != UNAVAILABLE

    def to_dict(self) -> dict:
        return asdict(self)


def engine_present(framework: str) -> bool:
    """Whether this installation ships the framework's engine (checked without importing it)."""
    try:
        return (importlib.resources.files("parallax.engines") / framework / "engine.py").is_file()
    except (ModuleNotFoundError, TypeError):
        return False


def _select_device(probe: dict | None, device_index: int) -> dict | None:
    devices = (probe or {}).get("devices") or []
    for device in devices:
        if device.get("index") == device_index:
            return device
    return None


def no_gpu_reason(probe: dict | None) -> str:
    """'no NVIDIA GPU found (<why>)', the why taken from the driver, then NVML."""
    probe = probe or {}
    errors = [(probe.get(part) or {}).get("error") for part in ("driver", "nvml")]
    why = next((e for e in errors if e), None)
    return f"{NO_GPU} ({why})" if why else NO_GPU


def _missing_packages(recipe: Recipe, packages: dict) -> str | None:
    names, extra = REQUIRES[recipe.framework]
    missing = [n for n in names if not packages.get(n)]
    backend = recipe.backend
    for options in backend.distributions:
        if not any(packages.get(n) for n in options) and options[0] not in missing:
            missing.append(options[0])
            extra = backend.extra or extra
    if not missing:
        return None
    text = f"{', '.join(missing)} not installed; pip install 'slm-parallax[{extra}]'"
    if recipe.framework == "maxtext" and sys.version_info < (3, 12):
        text += f" (needs Python >= 3.12; this is {sys.version_info[0]}.{sys.version_info[1]})"
    return text


def _no_cuda_build(framework: str, packages: dict) -> str | None:
    """Why the installed framework cannot use an NVIDIA GPU, judged from package metadata."""
    if framework == "torch":
        version = packages.get("torch") or ""
        local = version.partition("+")[2]
        if local.startswith(("cpu", "rocm")):
            return f"torch {version} is not a CUDA build; install torch built for CUDA"
    if framework in ("jax", "maxtext"):
        jaxlib = packages.get("jaxlib") or ""
        plugins = [p for p in ("jax_cuda12_plugin", "jax_cuda13_plugin") if packages.get(p)]
        if not plugins and "cuda" not in jaxlib.partition("+")[2]:
            return "jax has no CUDA plugin installed (CPU only); pip install 'jax[cuda13]' (or 'jax[cuda12]')"
    return None


def _hardware_clause(recipe: Recipe, device: dict) -> tuple[bool, str, bool]:
    """(runs here, text, native) for the recipe on this GPU."""
    cc = hardware.cc_string(device.get("compute_capability"))
    where = f"GPU {device.get('index', 0)} ({cc}, {hardware.family(cc)})"
    have = hardware.cc_tuple(cc) or (0, 0)
    if recipe.min_cc and have < recipe.min_cc:
        need = ".".join(map(str, recipe.min_cc))
        return False, f"{recipe.name} needs compute capability {need}+; {where} lacks it", False
    if recipe.below_cc and have >= recipe.below_cc:
        top = ".".join(map(str, recipe.below_cc))
        return False, f"{recipe.name} does not run on compute capability {top}+; {where} is one", False
    fmt = recipe.format
    if recipe.emulated:
        return True, f"{fmt} emulated on {where} (quantize-dequantize, bf16 GEMMs)", False
    if fmt in hardware.native_precisions(cc):
        text = f"{where} supports {fmt} natively"
        if fmt == "nvfp4" and hardware.family(cc) == "Blackwell RTX":
            text += ("; but TransformerEngine's full NVFP4 training recipe is 10.x-only "
                     "(12.x: forward or no-RHT/SR only, TE PR #3195)")
        return True, text, True
    need = ".".join(map(str, recipe.native_min_cc))
    return False, f"{fmt} needs compute capability {need}+; {where} lacks it", False


def capability(recipe: Recipe, probe: dict | None, packages: dict[str, str | None],
               device_index: int = 0) -> Capability:
    """Whether ``recipe`` can train here, how, and the reason in words."""
    device = _select_device(probe, device_index)
    blocking: list[str] = []  # each one alone makes the cell unavailable
    info: list[str] = []
    if device is None:  # the driver's own words are shown once, by check-env, not in every cell
        blocking.append(NO_GPU)
    missing_engine = _not_implemented(recipe)
    if missing_engine:
        blocking.append(missing_engine)
    else:  # package and build problems matter only for what Parallax can run
        blocking += filter(None, [_missing_packages(recipe, packages)])
    native = False
    if device is not None:
        supported, text, native = _hardware_clause(recipe, device)
        (info if supported else blocking).append(text)
        if not missing_engine:
            blocking += filter(None, [_no_cuda_build(recipe.framework, packages)])

    # The default of --precision on this device (torch nvfp4: te-nvfp4 on 10.0+, else emulated).
    is_default = registry.default(recipe.framework, recipe.format,
                                  device.get("compute_capability") if device else None) is recipe

    def result(status, reason, backend):
        return Capability(recipe.framework, recipe.name, recipe.format, status, reason, backend, is_default)

    if device is None and len(blocking) == 1 and recipe.cpu:
        reason = (f"{blocking[0]}; runs on the CPU, correct but slow: "
                  "for the tiny preset and tests, not for benchmark numbers")
        return result(CPU, reason, recipe.summary + ", on CPU")
    if blocking:
        return result(UNAVAILABLE, "; ".join(blocking + info), None)
    return result(NATIVE if native else EMULATED, "; ".join(info), recipe.summary)


def _not_implemented(recipe: Recipe) -> str | None:
    if not recipe.implemented:
        return f"not implemented in Parallax yet (planned: {recipe.planned})"
    if not engine_present(recipe.framework):
        return f"the {recipe.framework} engine is missing from this installation (parallax/engines/{recipe.framework})"
    return None


def capability_matrix(
    probe: dict | None,
    packages: dict[str, str | None],
    device_index: int = 0,
    frameworks: tuple[str, ...] = FRAMEWORKS,
    precisions: tuple[str, ...] = PRECISIONS,
) -> list[Capability]:
    """Every recipe of ``frameworks`` in ``precisions``, frameworks outermost."""
    return [capability(r, probe, packages, device_index) for r in registry.recipes()
            if r.framework in frameworks and r.format in precisions]


def require_implemented(recipe: Recipe) -> None:
    """A one-line ParallaxError for a recipe Parallax lists but cannot run yet."""
    from parallax.errors import ParallaxError

    if not recipe.implemented:
        raise ParallaxError(f"{recipe.framework} recipe '{recipe.name}' is not implemented yet "
                            f"(planned: {recipe.planned}); parallax check-env lists what runs")


def _instead(recipe: Recipe, compute_capability) -> str | None:
    """What to run instead, when the framework's default of the same format on this device is
    another implemented recipe that runs here (torch te-nvfp4 on an H200 -> emulated-nvfp4)."""
    other = registry.default(recipe.framework, recipe.format, compute_capability)
    have = hardware.cc_tuple(compute_capability)
    fits = other is not None and other.implemented and other is not recipe and (
        other.cpu if have is None else not (other.min_cc and have < other.min_cc))
    return f"use --recipe {other.name}: what --precision {recipe.format} picks here" if fits else None


def _on_the_cpu(recipe: Recipe) -> str:
    """The recipes of ``recipe``'s format that do run on the CPU: its framework's, else any."""
    runs = [r for r in registry.recipes() if r.format == recipe.format and r.cpu and r.implemented]
    own = [r.name for r in runs if r.framework == recipe.framework]
    if own:
        return f"{recipe.format} recipes that run on the CPU: {', '.join(own)}; or run on a GPU"
    if runs:
        return (f"{recipe.format} on the CPU runs with another framework: "
                f"{', '.join(f'--framework {r.framework} --recipe {r.name}' for r in runs)}; or run on a GPU")
    return f"no {recipe.format} recipe runs on the CPU; pick a bf16 recipe, or run on a GPU"


def require(recipe: Recipe, platform: str, compute_capability=None, device_name: str = "") -> None:
    """Raise a one-line ParallaxError, before any GPU work, when ``recipe`` cannot run on the
    device an engine resolved (``platform`` "gpu"/"cuda" or "cpu"): a planned recipe, a missing
    library (naming the extra), a CPU run of a GPU-only recipe, too old a GPU. Nothing falls
    back to another recipe."""
    from parallax.errors import ParallaxError, require_installed

    require_implemented(recipe)
    if platform == "cpu" and not recipe.cpu:
        need = ".".join(map(str, recipe.min_cc or recipe.native_min_cc))
        raise ParallaxError(f"recipe '{recipe.name}' needs an NVIDIA GPU of compute capability {need}+; "
                            f"this run is on the CPU ({_instead(recipe, None) or _on_the_cpu(recipe)})")
    have = hardware.cc_tuple(compute_capability)
    if platform != "cpu" and recipe.min_cc and have is not None and have < recipe.min_cc:
        need = ".".join(map(str, recipe.min_cc))
        raise ParallaxError(
            f"recipe '{recipe.name}' needs compute capability {need}+; {device_name or 'this GPU'} is "
            f"{hardware.cc_string(compute_capability)} "
            f"({_instead(recipe, compute_capability) or 'pick a bf16 recipe: parallax check-env lists them'})")
    if recipe.backend.module:
        require_installed(recipe.backend.module, recipe.backend.extra or recipe.framework)
