"""This GPU's limits for the classes of a profile (``parallax profile``): the GEMM ceiling of each
number format at the step's own GEMM shapes, and the HBM bandwidth. Attention's limit is measured
by the engines (``engines/<framework>/attention_rate.py``): it needs the framework.

GEMMs: cuBLASLt's rate on exactly the step's GEMMs of the linears that run in that format
(``gpu.gemm_shapes``: forward, dgrad and wgrad of each), Σ flops·count / Σ ms·count over them
(``gpu.model_shape_ceiling``), from the median call of each (the sustained rate, as MFU's measured
ceiling). In order of preference:
1. the ceilings ``parallax check-env --measure`` cached for this GPU (by UUID), where they were
   measured at this model, batch size and sequence length;
2. measured now: each shape tuned over the algorithms cuBLASLt's heuristic offers, then
   ``MEASURE["iters"]`` calls (about a second for llama-100m on an H200), before the engine
   takes the GPU;
3. the format's dense datasheet peak (``hardware.py``), which no real shape reaches;
4. none, with the reason.
The shapes are the fused ones (q, k, v as one GEMM, gate and up as one): an engine that runs
them apart (the JAX models) runs smaller GEMMs than the ceiling's.

HBM: the bandwidth a device-to-device copy reaches on this GPU (bytes read + written over the
median copy, ``gpu.measure_bandwidth``: csrc/probe/copy_bandwidth.h), in order of preference:
1. the copy that ``parallax check-env --measure`` (or an earlier profile) cached for this GPU;
2. measured now (2 GiB copied 13 times, well under a second), before the engine takes the GPU;
3. the datasheet bandwidth, labelled as not measured.
``analysis/profile.py`` then raises any limit that the step's own kernels beat.
Every limit says where it came from (``Limit.source``); on the CPU there are none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from parallax.errors import ParallaxError
from parallax.plan import hardware
from parallax.spec.config import ModelConfig

ON_THE_CPU = "n/a on the CPU"
# The short measurement of step 2 (gpu.measure_gemm's arguments).
MEASURE = {"warmup": 5, "iters": 20, "tune_warmup": 2, "tune_iters": 3, "rest_ms": 0}


@dataclass(frozen=True)
class Limit:
    """A class's limit: TFLOP/s (GEMMs, attention) or bytes/s (HBM); None when unknown."""

    value: float | None
    source: str

    def to_dict(self) -> dict:
        return {"value": self.value, "source": self.source}


def gemm_limits(device: dict | None, model: ModelConfig, batch_size: int, seq_len: int,
                formats: dict[str, str], measure: bool = True) -> dict[str, Limit]:
    """{format: Limit} for each format of ``formats`` (linear name -> format) on ``device`` (a
    probe entry; None on the CPU), as the module docstring says."""
    wanted = sorted(set(formats.values()))
    if device is None:
        return {fmt: Limit(None, ON_THE_CPU) for fmt in wanted}
    try:
        from parallax.native import gpu
    except ImportError as exc:  # a build without the native core
        return {fmt: _datasheet(device, fmt, f"no native core ({exc})") for fmt in wanted}
    shapes = gpu.gemm_shapes(model, batch_size, seq_len)
    cached = _cached_rows(gpu, device, model, batch_size, seq_len)
    return {fmt: _gemm_limit(gpu, device, fmt, [s for s in shapes if formats.get(s["linear"]) == fmt], cached,
                             measure) for fmt in wanted}


def _cached_rows(gpu, device: dict, model: ModelConfig, batch_size: int, seq_len: int) -> tuple[list, str]:
    """(rows, when) of check-env's cached ceilings where they are of this shape; ([], "") else."""
    try:
        cached = gpu.load_cached_ceilings(device.get("uuid"))
    except ParallaxError:
        return [], ""
    settings = (cached or {}).get("settings") or {}
    if (settings.get("model"), settings.get("batch_size"), settings.get("seq_len")) != (model.name, batch_size,
                                                                                       seq_len):
        return [], ""
    return cached.get("model_shapes") or [], str(cached.get("measured_at") or "")


def _gemm_limit(gpu, device: dict, fmt: str, shapes: list[dict], cached: tuple[list, str], measure: bool) -> Limit:
    rows, when = cached
    found = [r for r in rows if r.get("precision") == fmt and _key(r) in {_key(s) for s in shapes}]
    if len(found) == len(shapes) and all(r.get("error") is None for r in found):
        return Limit(_ceiling(gpu, found), f"measured: cuBLASLt at the step's {fmt} GEMM shapes "
                                           f"(parallax check-env --measure, {when})")
    if not measure:
        return _datasheet(device, fmt, "no cached measurement of these shapes")
    measured = [{**s, **gpu.measure_gemm(device["index"], fmt, s["m"], s["n"], s["k"], **MEASURE)} for s in shapes]
    failed = next((r["error"] for r in measured if r.get("error")), None)
    if failed is None:
        return Limit(_ceiling(gpu, measured), f"measured now: cuBLASLt at the step's {fmt} GEMM shapes")
    return _datasheet(device, fmt, f"cuBLASLt did not run: {failed}")


def _key(shape: dict) -> tuple:
    return shape["linear"], shape["pass"], shape["m"], shape["n"], shape["k"]


def _ceiling(gpu, rows: list[dict]) -> float:
    return gpu.model_shape_ceiling([(r["flops"], r["count"], r["median_ms"]) for r in rows])


def _datasheet(device: dict, fmt: str, why: str) -> Limit:
    spec = hardware.resolve_device(device).spec
    peak = spec.peak(fmt) if spec else None
    if peak is None:
        return Limit(None, f"unknown: {why}, and no trusted datasheet peak of {fmt} for {device.get('name')}")
    return Limit(peak, f"datasheet: dense {fmt} peak, {spec.source} ({why})")


def hbm_limit(device: dict | None, measure: bool = True) -> Limit:
    """The HBM bandwidth in bytes/s, as the module docstring says: a copy's, cached or measured
    now, else the datasheet's."""
    if device is None:
        return Limit(None, ON_THE_CPU)
    try:
        from parallax.native import gpu
    except ImportError as exc:  # a build without the native core
        return _datasheet_bandwidth(device, f"no native core ({exc})")
    try:
        cached = gpu.load_cached_bandwidth(device.get("uuid"))
    except ParallaxError:
        cached = None
    if cached and (cached.get("copy") or {}).get("bytes_per_s"):
        return _copy_limit(cached, f"parallax check-env --measure or an earlier profile, {cached.get('measured_at')}")
    if not measure:
        return _datasheet_bandwidth(device, "no cached copy measurement")
    found = gpu.measure_bandwidth(device)
    if found["copy"].get("error") is None:
        return _copy_limit(found, "now")
    return _datasheet_bandwidth(device, f"the copy did not run: {found['copy']['error']}")


def _copy_limit(record: dict, when: str) -> Limit:
    copy = record["copy"]
    kind = "measured now" if when == "now" else "measured"
    return Limit(copy["bytes_per_s"], f"{kind}: a device-to-device copy of {copy['bytes'] / 2**30:.1f} GiB, bytes "
                                      f"read + written over the median of {copy['iters']} copies"
                                      + ("" if when == "now" else f" ({when})"))


def _datasheet_bandwidth(device: dict, why: str) -> Limit:
    spec = hardware.resolve_device(device).spec
    if spec is None or not spec.bandwidth:
        return Limit(None, f"unknown: {why}, and no datasheet bandwidth for {device.get('name')}")
    return Limit(bytes_per_second(spec.bandwidth), f"datasheet: {spec.bandwidth}, {spec.source} (not measured: {why})")


_UNITS = {"TB/s": 1e12, "GB/s": 1e9}


def bytes_per_second(text: str) -> float:
    """'4.8 TB/s' -> 4.8e12, '1792 GB/s' -> 1.792e12."""
    match = re.fullmatch(r"\s*([\d.]+)\s*(TB/s|GB/s)\s*", text)
    if match is None:
        raise ValueError(f"not a bandwidth: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]
