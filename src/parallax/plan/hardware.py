"""What the GPU is: a table of datasheet peaks with sources, GPU families, and MFU denominators.

Every peak here is a **dense** tensor-core figure (no 2:4 sparsity): datasheets headline the
sparse number, and dividing by it halves MFU (OLMo-core PR #817 overstated B300 MFU 7.2×).
A figure marked uncertain lacks a source we trust; it is shown but never used for MFU, and an
unknown GPU gets MFU None plus a warning that names ``--peak-tflops`` — never a guess.

Lookup uses the device name *and* its compute capability: a name that matches a row whose
capability differs from what the driver reports does not resolve (the spec's "RTX PRO 6000
Blackwell = SM100" is wrong; it is 12.0, REFERENCE §1), and a near-miss such as "NVIDIA H200 NVL"
(a different power envelope) stays unknown rather than borrowing the H200 SXM's peak.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from parallax.spec.flops import Denominators
from parallax.spec.recipe import FORMATS as PRECISIONS
from parallax.spec.recipe import NATIVE_MIN_CC, PEAK_COLUMN, cc_tuple  # noqa: F401 (hardware.NATIVE_MIN_CC)


@dataclass(frozen=True)
class GPUSpec:
    """One row of the table. Peaks in dense TFLOP/s; None where the part has no such tensor core."""

    key: str
    name: str
    compute_capability: str
    patterns: tuple[str, ...]  # regexes, full-matched against the normalised device name
    peaks: dict[str, float | None]  # columns "bf16", "fp8", "fp4"
    memory: str
    bandwidth: str | None
    source: str
    uncertain: frozenset[str] = field(default_factory=frozenset)  # columns needing a better source

    def peak(self, precision: str) -> float | None:
        """The dense peak for a run precision, or None when absent or uncertain."""
        column = PEAK_COLUMN[precision]
        return None if column in self.uncertain else self.peaks.get(column)

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "name": self.name,
            "compute_capability": self.compute_capability,
            "family": family(self.compute_capability),
            "dense_peak_tflops": dict(self.peaks),
            "uncertain": sorted(self.uncertain),
            "memory": self.memory,
            "bandwidth": self.bandwidth,
            "source": self.source,
        }


def _row(key, name, cc, patterns, bf16, fp8, fp4, memory, bandwidth, source, uncertain=()):
    peaks = {k: None if v is None else float(v) for k, v in (("bf16", bf16), ("fp8", fp8), ("fp4", fp4))}
    return GPUSpec(key, name, cc, tuple(patterns), peaks, memory, bandwidth, source, frozenset(uncertain))


_N = r"(nvidia )?"  # nvidia-smi prefixes "NVIDIA "; users often leave it out

# REFERENCE.md §2. Names are what nvidia-smi / NVML report.
GPUS: tuple[GPUSpec, ...] = (
    _row("h100-sxm", "H100 SXM", "9.0", [_N + r"h100 80gb hbm3", _N + r"h100 sxm5?( 80gb)?"],
         989, 1979, None, "80 GB HBM3", "3.35 TB/s", "NVIDIA H100 datasheet (dense = sparse/2)"),
    _row("h100-pcie", "H100 PCIe", "9.0", [_N + r"h100 pcie( 80gb)?"],
         756, 1513, None, "80 GB", None, "NVIDIA H100 datasheet (dense = sparse/2)"),
    _row("h200-sxm", "H200 SXM", "9.0", [_N + r"h200", _N + r"h200 sxm5?( 141gb)?", _N + r"h200 141gb hbm3e"],
         989, 1979, None, "141 GB HBM3e", "4.8 TB/s", "NVIDIA H200 datasheet"),
    _row("b200", "B200 (HGX)", "10.0", [_N + r"b200( sxm\d?)?( 180gb)?"],
         2250, 4500, 9000, "180 GB", "7.7 TB/s", "NVIDIA HGX B200 spec table"),
    _row("gb200", "GB200 (per GPU)", "10.0", [_N + r"gb200"],
         2500, 5000, 10000, "186 GB", "8 TB/s", "NVIDIA GB200 NVL72 spec table"),
    _row("b300", "B300 (HGX)", "10.3", [_N + r"b300( sxm\d?)?( ac)?"],
         2250, 4500, 13500, "270–288 GB", None, "vendor material (uncertain)",
         uncertain=("bf16", "fp8", "fp4")),
    _row("gb300", "GB300", "10.3", [_N + r"gb300"],
         2500, 5000, 15000, "288 GB", None, 'NVIDIA "Inside Blackwell Ultra"'),
    _row("rtx-pro-6000-blackwell", "RTX PRO 6000 Blackwell Workstation Edition (600 W)", "12.0",
         [_N + r"rtx pro 6000 blackwell workstation edition"],
         503.8, 1007.6, 2015, "96 GB GDDR7", "1792 GB/s", "NVIDIA RTX Blackwell GPU architecture whitepaper",
         uncertain=("fp4",)),
    _row("rtx-pro-6000-blackwell-max-q", "RTX PRO 6000 Blackwell Max-Q Workstation Edition (300 W)", "12.0",
         [_N + r"rtx pro 6000 blackwell max-q workstation edition"],
         438.9, 878, 1756, "96 GB", None, "NVIDIA RTX Blackwell GPU architecture whitepaper",
         uncertain=("fp8", "fp4")),
    # Same GB202 die; no dense-peak figure from a datasheet yet, so MFU needs --peak-tflops.
    _row("rtx-pro-6000-blackwell-server", "RTX PRO 6000 Blackwell Server Edition", "12.0",
         [_N + r"rtx pro 6000 blackwell server edition"],
         None, None, None, "96 GB", None, "compute capability 12.0 (REFERENCE §1); no dense-peak source yet"),
    _row("rtx-5090", "GeForce RTX 5090", "12.0", [_N + r"(geforce )?rtx 5090"],
         209.5, 419, 1676, "32 GB", None, "NVIDIA RTX Blackwell GPU architecture whitepaper",
         uncertain=("fp8", "fp4")),
    _row("l40s", "L40S", "8.9", [_N + r"l40s"],
         362, 733, None, "48 GB", None, "NVIDIA L40S datasheet"),
    _row("rtx-4090", "GeForce RTX 4090", "8.9", [_N + r"(geforce )?rtx 4090"],
         165.2, 330.3, None, "24 GB", None, "NVIDIA Ada GPU architecture whitepaper"),
    _row("a100", "A100 (SXM4 or PCIe, 40/80 GB)", "8.0",
         [_N + r"a100[- ](sxm4|pcie)[- ](40|80)gb", _N + r"a100 (40|80)gb pcie"],
         312, None, None, "40/80 GB", None, "NVIDIA A100 datasheet"),
)

BY_KEY = {gpu.key: gpu for gpu in GPUS}


def normalise_name(name: str) -> str:
    return " ".join(name.lower().split())


def cc_string(cc) -> str | None:
    t = cc_tuple(cc)
    return None if t is None else f"{t[0]}.{t[1]}"


def family(cc) -> str:
    """The GPU architecture family of a compute capability."""
    t = cc_tuple(cc)
    if t is None:
        return "unknown"
    major, minor = t
    if major == 8:
        return "Ada" if minor == 9 else "Ampere"
    if major == 9:
        return "Hopper"
    # 11.0 is Jetson Thor (called 10.1 before CUDA 13): the datacenter tensor-core generation.
    if major == 10 or (major, minor) == (11, 0):
        return "Blackwell datacenter"
    if major == 12:
        return "Blackwell RTX"
    if major == 7:
        return "Turing" if minor == 5 else "Volta"
    return "unknown"


def native_precisions(cc) -> tuple[str, ...]:
    """Run precisions the GPU's tensor cores execute natively, in PRECISIONS order."""
    t = cc_tuple(cc)
    if t is None:
        return ()
    return tuple(p for p in PRECISIONS if t >= NATIVE_MIN_CC[p])


def precision_notes(cc) -> list[str]:
    """Library limits that narrow what the hardware allows (REFERENCE §1, §3)."""
    t = cc_tuple(cc)
    if t is None or t[0] != 12:
        return []
    return [
        "TransformerEngine runs its full NVFP4 recipe (RHT + stochastic rounding + 2D weight scaling) "
        "on 10.x only; on 12.x only the forward pass or training without RHT/SR (TE PR #3195)",
        "TransformerEngine before 2.19 (PR #3281) trained NVFP4 on all-zero gradients on sm_120/121",
        "TransformerEngine MXFP8 is 10.x only (refused on 12.0+)",
    ]


@dataclass(frozen=True)
class Resolution:
    """The table row a device resolved to (or None) and why."""

    spec: GPUSpec | None
    name: str | None
    compute_capability: str | None
    warnings: tuple[str, ...] = ()

    @property
    def key(self) -> str | None:
        return self.spec.key if self.spec else None

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "name": self.name,
            "compute_capability": self.compute_capability,
            "family": family(self.compute_capability),
            "native_precisions": list(native_precisions(self.compute_capability)),
            "notes": precision_notes(self.compute_capability),
            "spec": self.spec.to_dict() if self.spec else None,
            "warnings": list(self.warnings),
        }


def _matches(name: str) -> list[GPUSpec]:
    norm = normalise_name(name)
    return [g for g in GPUS if any(re.fullmatch(p, norm) for p in g.patterns)]


def lookup(name: str | None, compute_capability=None) -> Resolution:
    """Resolve a device name (as NVML reports it) and its compute capability to a table row."""
    cc = cc_string(compute_capability)
    if not name:
        return Resolution(None, name, cc, ("the GPU reported no name, so no peak is known; "
                                           "pass --peak-tflops to set one",))
    found = _matches(name)
    if cc is not None:
        agreeing = [g for g in found if g.compute_capability == cc]
        if found and not agreeing:
            rows = ", ".join(f"{g.key} ({g.compute_capability})" for g in found)
            return Resolution(None, name, cc, (
                f"GPU '{name}' reports compute capability {cc}, but the table's row for that name "
                f"is {rows}; not using its peaks — pass --peak-tflops to set one",))
        found = agreeing
    if len(found) == 1:
        return Resolution(found[0], name, cc)
    where = f" (compute capability {cc})" if cc else ""
    return Resolution(None, name, cc, (
        f"GPU '{name}'{where} is not in Parallax's peak table (resolved key: none), so MFU is n/a; "
        "pass --peak-tflops <dense TFLOP/s of the run's precision> to set the peak",))


def resolve_device(device: dict | None) -> Resolution:
    """Resolve one entry of ``gpu.probe()["devices"]``."""
    if device is None:
        return Resolution(None, None, None, ("no NVIDIA GPU found, so MFU is n/a",))
    return lookup(device.get("name"), device.get("compute_capability"))


def denominators(
    device: dict | None,
    precision: str,
    peak_override: float | None = None,
    measured_ceiling: float | None = None,
) -> tuple[Denominators, list[str]]:
    """MFU denominators for a run on ``device`` (a probe entry) and the warnings to show with them.

    ``peak_override`` (--peak-tflops) replaces the precision's dense peak (and the bf16 peak when
    the run is bf16, since they are the same number). Uncertain figures are never used.
    """
    if precision not in PEAK_COLUMN:
        raise ValueError(f"unknown precision {precision!r}")
    res = resolve_device(device)
    warnings = [] if peak_override is not None else list(res.warnings)
    spec = res.spec
    precision_peak = spec.peak(precision) if spec else None
    bf16_peak = spec.peak("bf16") if spec else None
    if spec and peak_override is None and precision_peak is None:
        warnings.append(_with_fix(_missing_peak_warning(spec, precision)))
    if spec and precision != "bf16" and bf16_peak is None:
        warnings.append(_missing_peak_warning(spec, "bf16"))
    if peak_override is not None:
        precision_peak = float(peak_override)
        if precision == "bf16":
            bf16_peak = precision_peak
    if measured_ceiling is not None and measured_ceiling <= 0:
        measured_ceiling = None
    return Denominators(precision_peak, bf16_peak, measured_ceiling), warnings


def _missing_peak_warning(spec: GPUSpec, precision: str) -> str:
    column = PEAK_COLUMN[precision]
    value = spec.peaks.get(column)
    if value is not None:
        why = f"its {column} figure ({value:g} TFLOP/s, {spec.source}) is uncertain"
    elif precision not in native_precisions(spec.compute_capability):
        why = f"compute capability {spec.compute_capability} has no {precision} tensor cores"
    else:
        why = f"the table has no dense {column} peak for it"
    # --peak-tflops sets the run precision's peak; the bf16 peak of a non-bf16 run has no flag.
    return f"{spec.key}: {why}, so MFU against the {precision} peak is n/a"


def _with_fix(warning: str) -> str:
    return warning + "; pass --peak-tflops to set a figure you trust"
