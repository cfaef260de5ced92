"""Can this machine run framework × precision, and how: native, emulated, cpu or unavailable, with why.

Decided from the GPU probe and installed-package metadata only (no torch/JAX import), so
``check-env`` stays fast. Honest about this release: Parallax implements bf16 in the torch and
JAX engines; its fp8/nvfp4 paths and the MaxText adapter are later work, and are reported as
unavailable with the planned backend and what the hardware would allow.
"""

from __future__ import annotations

import importlib.resources
import sys
from dataclasses import asdict, dataclass

from parallax import hardware
from parallax.config import PRECISIONS
from parallax.errors import ParallaxError
from parallax.precision import EMULATED, NATIVE, UNAVAILABLE

# Runs on the CPU: correct arithmetic, fine for the tiny preset and tests, not a benchmark.
CPU = "cpu"
STATUSES = (NATIVE, EMULATED, CPU, UNAVAILABLE)

FRAMEWORKS = ("torch", "jax", "maxtext")

# Distributions each framework's engine needs, and the extra that installs them.
REQUIRES = {
    "torch": (("torch",), "torch"),
    "jax": (("jax", "flax", "optax"), "jax"),
    "maxtext": (("maxtext",), "maxtext"),
}

# Precisions each engine implements in this release (the MaxText adapter is planned).
IMPLEMENTED = {"torch": ("bf16",), "jax": ("bf16",), "maxtext": ()}

BACKEND = {
    ("torch", "bf16"): "torch.autocast(bfloat16) over fp32 master weights",
    ("jax", "bf16"): "Flax bf16 compute dtype over fp32 master weights",
}

PLANNED = {
    ("torch", "fp8"): "TransformerEngine DelayedScaling (HYBRID) or torchao float8",
    ("torch", "nvfp4"): "TransformerEngine NVFP4BlockScaling",
    ("jax", "fp8"): "TransformerEngine JAX DelayedScaling",
    ("jax", "nvfp4"): "TransformerEngine JAX NVFP4BlockScaling",
    ("maxtext", "bf16"): "MaxText subprocess adapter; needs pip install 'slm-parallax[maxtext]', Python >= 3.12",
    ("maxtext", "fp8"): "MaxText quantization=te_fp8_delayedscaling",
    ("maxtext", "nvfp4"): "MaxText quantization=te_nvfp4",
}

# Engines that can run bf16 on the CPU (torch CPU autocast, XLA CPU).
CPU_RUNNABLE = {("torch", "bf16"), ("jax", "bf16")}

NO_GPU = "no NVIDIA GPU found"


@dataclass(frozen=True)
class Capability:
    framework: str
    precision: str
    status: str  # one of STATUSES
    reason: str
    backend: str | None  # what runs it; None when nothing does

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


def _missing_packages(framework: str, packages: dict) -> str | None:
    names, extra = REQUIRES[framework]
    missing = [n for n in names if not packages.get(n)]
    if not missing:
        return None
    text = f"{', '.join(missing)} not installed; pip install 'slm-parallax[{extra}]'"
    if framework == "maxtext" and sys.version_info < (3, 12):
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


def _hardware_clause(precision: str, device: dict) -> tuple[bool, str]:
    """(supported, text) for the precision on this GPU's tensor cores."""
    cc = hardware.cc_string(device.get("compute_capability"))
    where = f"GPU {device.get('index', 0)} ({cc}, {hardware.family(cc)})"
    if precision in hardware.native_precisions(cc):
        text = f"{where} supports {precision} natively"
        if precision == "nvfp4" and hardware.family(cc) == "Blackwell RTX":
            text += ("; but TransformerEngine's full NVFP4 training recipe is 10.x-only "
                     "(12.x: forward or no-RHT/SR only, TE PR #3195)")
        return True, text
    need = ".".join(map(str, hardware.NATIVE_MIN_CC[precision]))
    return False, f"{precision} needs compute capability {need}+; {where} lacks it"


def capability(
    framework: str,
    precision: str,
    probe: dict | None,
    packages: dict[str, str | None],
    device_index: int = 0,
) -> Capability:
    """Whether ``framework`` can train at ``precision`` here, how, and the reason in words."""
    if framework not in FRAMEWORKS:
        raise ParallaxError(f"unknown framework '{framework}'; choose one of: {', '.join(FRAMEWORKS)}")
    if precision not in PRECISIONS:
        raise ParallaxError(f"unknown precision '{precision}'; choose one of: {', '.join(PRECISIONS)}")
    cell = (framework, precision)
    device = _select_device(probe, device_index)
    blocking: list[str] = []  # each one alone makes the cell unavailable
    info: list[str] = []
    if device is None:  # the driver's own words are shown once, by check-env, not in every cell
        blocking.append(NO_GPU)
    missing_engine = _not_implemented(framework, precision)
    if missing_engine:
        blocking.append(missing_engine)
    else:  # package and build problems matter only for what Parallax can run
        blocking += filter(None, [_missing_packages(framework, packages)])
    if device is not None:
        supported, text = _hardware_clause(precision, device)
        (info if supported else blocking).append(text)
        if not missing_engine:
            blocking += filter(None, [_no_cuda_build(framework, packages)])

    if device is None and len(blocking) == 1 and cell in CPU_RUNNABLE:
        reason = (f"{blocking[0]}; bf16 runs on the CPU, correct but slow: "
                  "for the tiny preset and tests, not for benchmark numbers")
        return Capability(framework, precision, CPU, reason, BACKEND[cell] + ", on CPU")
    if blocking:
        return Capability(framework, precision, UNAVAILABLE, "; ".join(blocking + info), None)
    return Capability(framework, precision, NATIVE, "; ".join(info), BACKEND[cell])


def _not_implemented(framework: str, precision: str) -> str | None:
    if precision not in IMPLEMENTED[framework]:
        return f"not implemented in Parallax yet (planned: {PLANNED[(framework, precision)]})"
    if not engine_present(framework):
        return f"the {framework} engine is missing from this installation (parallax/engines/{framework})"
    return None


def capability_matrix(
    probe: dict | None,
    packages: dict[str, str | None],
    device_index: int = 0,
    frameworks: tuple[str, ...] = FRAMEWORKS,
    precisions: tuple[str, ...] = PRECISIONS,
) -> list[Capability]:
    """Every framework × precision cell, frameworks outermost."""
    return [capability(f, p, probe, packages, device_index) for f in frameworks for p in precisions]
