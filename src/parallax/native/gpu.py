"""The GPU without torch or JAX: the native probe and measured GEMM ceilings.

``probe()`` asks NVML and the CUDA driver what GPUs there are; ``measure_ceilings()`` times
cuBLASLt GEMMs on one of them: a square GEMM per precision (the "measured ceiling" that MFU
divides by) and the training GEMMs of the model being benchmarked (the "model-shape ceiling").
Both run in ``parallax._native``, which opens libcuda, NVML and cuBLASLt at run time; this module
tells it where pip's ``nvidia-*`` packages keep those libraries and caches what it measured.

Each GEMM is measured with the fastest of the algorithms cuBLASLt's heuristic offers (each is
timed briefly first; ``algo_index``, ``algos_tried`` and ``algo_trials`` record the choice), then
timed over ``iters`` calls. Two rates come out: ``tflops`` from the median call, the sustained
rate, and ``tflops_best`` from the fastest call. They can differ by more than 10%
(the H200's, docs/results/2026-11-29-h200/check-env/).
MFU's measured ceiling is the median (``square_tflops``): a training run is a long sustained
load, so the ceiling it is compared with must be a rate the GPU holds over many calls, not one
single call reached. The best rate (``square_tflops_best``) is kept beside it for comparison
with short timings such as the mean of 10 ``torch.matmul`` calls.
scripts/device/ceiling_crosscheck.py measures both ways with SM clocks read before and after.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
from pathlib import Path

from parallax.store.cache import CACHE_DIR_ENV, cache_root  # noqa: F401 (gpu.CACHE_DIR_ENV, as before)
from parallax.spec.config import ModelConfig
from parallax.spec.recipe import DEFAULT_FORMATS
from parallax.store.timestamps import utc_now
from parallax.errors import ParallaxError
from parallax.store.results import atomic_write_json

LIB_DIRS_ENV = "PARALLAX_CUDA_LIB_DIRS"
CEILINGS_SCHEMA = "parallax.ceilings/1"


def _native():
    from parallax import _native

    return _native


def gpu_uuid(value) -> str | None:
    """A GPU's UUID in NVML's form, 'GPU-<hex groups>', whoever wrote it: torch writes the bare
    hex, NVML and the probe 'GPU-...'; None for none. Two spellings of one GPU compare equal."""
    text = str(value or "").strip()
    bare = text[4:] if text[:4].lower() == "gpu-" else text
    return f"GPU-{bare.lower()}" if bare else None


# ---- where the GPU libraries are ------------------------------------------------------------


def given_lib_dirs() -> list[str]:
    """$PARALLAX_CUDA_LIB_DIRS's folders; a one-line ParallaxError for an entry that is not an
    existing folder (a typo would otherwise pass unseen, the libraries found elsewhere)."""
    given = [d for d in os.environ.get(LIB_DIRS_ENV, "").split(os.pathsep) if d]
    bad = next((d for d in given if not os.path.isdir(d)), None)
    if bad is not None:
        raise ParallaxError(f"{LIB_DIRS_ENV}: '{bad}' is not a folder; list existing folders separated by "
                            f"'{os.pathsep}', or unset it")
    return given


def library_search_dirs() -> list[str]:
    """Existing directories to search for libcuda, NVML and cuBLASLt, first match wins.

    In order: $PARALLAX_CUDA_LIB_DIRS (os.pathsep-separated), the ``lib`` folders of pip's
    ``nvidia-*`` packages (where torch and JAX get CUDA; ``nvidia/cu13/lib`` before
    ``nvidia/cu12/lib`` before the per-library folders), ``torch/lib``, ``$CUDA_HOME/lib64``,
    ``/usr/local/cuda/lib64``. The system loader path is searched after all of these.
    """
    candidates = given_lib_dirs()
    candidates += nvidia_package_lib_dirs()
    torch_dir = _package_dir("torch")
    if torch_dir is not None:
        candidates.append(str(torch_dir / "lib"))
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "lib64"))
    candidates.append("/usr/local/cuda/lib64")
    seen: set[str] = set()
    dirs = []
    for d in candidates:
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            dirs.append(d)
    return dirs


def nvidia_package_lib_dirs() -> list[str]:
    """``site-packages/nvidia/*/lib`` across every path entry, found without importing."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for root in spec.submodule_search_locations:
        found += [p for p in Path(root).glob("*/lib") if p.is_dir()]

    def order(path: Path) -> tuple:
        # Toolkit-wide folders (cu13, cu12) hold the newest copies; newest first.
        match = re.fullmatch(r"cu(\d+)", path.parent.name)
        return (0, -int(match.group(1)), "") if match else (1, 0, path.parent.name)

    return [str(p) for p in sorted(found, key=order)]


def pip_cudnn_folder() -> str | None:
    """The ``site-packages/nvidia/<package>/lib`` holding pip's libcudnn.so.9, or None."""
    return next((d for d in nvidia_package_lib_dirs() if os.path.exists(os.path.join(d, "libcudnn.so.9"))), None)


def _package_dir(name: str) -> Path | None:
    """A top-level package's folder, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def _set_library_dirs():
    native = _native()
    native.set_library_dirs(library_search_dirs())
    return native


# ---- probe and single GEMMs -----------------------------------------------------------------


def probe() -> dict:
    """The CUDA driver, NVML, each GPU and how they are joined, as a dict; never raises for a
    missing GPU or library.

    ``{"driver": {available, error, library, version, version_str},
       "nvml": {available, error, library, driver_version},
       "devices": [{index, name, uuid, pci_bus_id, compute_capability, cc_major, cc_minor,
                    sm_count, clock_sm_mhz, clock_sm_max_mhz, clock_mem_mhz, clock_mem_max_mhz,
                    memory_total_bytes, memory_free_bytes, power_limit_w,
                    nvlink: {links, active, to_nvswitch, peers: [{link, remote_pci_bus_id,
                             remote_type}], error} or None}],
       "topology": {available, error, pairs: [{a, b, connection, nvlinks, via_nvswitch,
                    p2p_nvlink, common_ancestor, common_ancestor_name, pcie_path, error}]}}``
    Unknown fields are None. ``index`` is the CUDA ordinal (as torch and JAX number GPUs)
    when the driver answered, else NVML's index; a pair's ``a`` < ``b`` are such indices.
    ``nvlink.links`` counts the ports NVML reports, ``active`` those up, ``to_nvswitch`` those
    ending at an NVSwitch (``remote_type``: gpu, nvswitch, ibm-npu, unknown); ``error`` says
    why no port answered ("... Not Supported" on a GPU without NVLink). A pair's ``nvlinks``
    join the two directly or, ``via_nvswitch``, through the switches; ``connection`` is what
    ``nvidia-smi topo -m`` prints for it (NV18, PIX, PXB, PHB, NODE, SYS; BOARD for one board)
    and ``common_ancestor`` NVML's nvmlGpuTopologyLevel_t (0, 10, ..., 50; ``pcie_path`` its
    code). Without NVML, ``topology`` is unavailable with NVML's error and no pairs.
    ``parallax.native.topology.interconnect`` puts it in words.
    """
    return _set_library_dirs().probe()


def gemm_shapes(model: ModelConfig, batch_size: int, seq_len: int) -> list[dict]:
    """The forward, dgrad and wgrad GEMMs of one training step of ``model`` at batch×seq tokens.

    Each: {name, linear, pass, m, n, k, count, flops}; ``count`` is per step (n_layers for the
    per-layer linears, 1 for lm_head) and ``flops`` is one call's 2·m·n·k.
    """
    if batch_size <= 0 or seq_len <= 0:
        raise ParallaxError(f"batch size and sequence length must be positive, got {batch_size} and {seq_len}")
    return _native().model_gemm_shapes(
        d_model=model.d_model, n_layers=model.n_layers, n_heads=model.n_heads, head_dim=model.head_dim,
        d_ff=model.d_ff, vocab=model.vocab_size, tokens=batch_size * seq_len,
    )


def measure_gemm(device_index: int, precision: str, m: int, n: int, k: int, warmup: int = 10,
                 iters: int = 50, tune_warmup: int = 3, tune_iters: int = 5, rest_ms: int = 0) -> dict:
    """Time D[m,n] = X[m,k]·W[n,k]ᵀ with cuBLASLt (see csrc/probe/gemm.h for what is measured).

    Every algorithm the heuristic offers (up to 8) is first timed over ``tune_warmup`` untimed and
    ``tune_iters`` timed calls; the one with the smallest median is then measured over ``warmup``
    and ``iters`` calls. ``tune_iters=0`` skips that and measures the heuristic's first.

    Returns {precision, m, n, k, flops, warmup, iters, tune_warmup, tune_iters, median_ms,
    min_ms, max_ms, tflops (median), tflops_best (min), algo_count (offered), algo_index (the
    one measured, by its place in the heuristic's list), algos_tried, algo_trials: [{index,
    median_ms, error}], layout, cublaslt_version, library, error}; ``error`` names why it did
    not run (missing library, unsuited GPU, the failing CUDA or cuBLASLt call) and the times
    are None.
    """
    return _set_library_dirs().measure_gemm(device_index, precision, m, n, k, warmup, iters, tune_warmup,
                                            tune_iters, rest_ms)


# ---- HBM bandwidth --------------------------------------------------------------------------

COPY_BYTES = 2 << 30  # one copy: 2 GiB read and 2 GiB written, far beyond any L2
BANDWIDTH_SCHEMA = "parallax.bandwidth/1"


def measure_copy(device_index: int, nbytes: int = COPY_BYTES, warmup: int = 3, iters: int = 10) -> dict:
    """Device-to-device copies of ``nbytes`` on GPU ``device_index`` timed between CUDA events
    (csrc/probe/copy_bandwidth.h): {bytes, warmup, iters, median_ms, min_ms, max_ms,
    bytes_per_s (2·bytes over the median copy), bytes_per_s_best, error}."""
    return _set_library_dirs().measure_copy(device_index, nbytes, warmup, iters)


def measure_bandwidth(device: dict, nbytes: int = COPY_BYTES, warmup: int = 3, iters: int = 10) -> dict:
    """The copy bandwidth of ``device`` (a probe entry), measured now and cached under its UUID
    (as the GEMM ceilings are) where it ran; the record: the copy's result, the device and when."""
    result = {"schema": BANDWIDTH_SCHEMA, "device": {k: device.get(k) for k in ("index", "name", "uuid")},
              "copy": measure_copy(device["index"], nbytes, warmup, iters), "measured_at": utc_now()}
    if device.get("uuid") and result["copy"].get("error") is None:
        atomic_write_json(_cache_file("bandwidth", device["uuid"]), result)
    return result


def load_cached_bandwidth(uuid: str | None) -> dict | None:
    """The copy bandwidth last measured on GPU ``uuid`` (``measure_bandwidth``), or None."""
    path = _cache_file("bandwidth", uuid) if uuid else None
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ParallaxError(f"cached HBM bandwidth {path} is unreadable ({exc}); delete the file and run "
                            "'parallax check-env --measure' again") from exc


# ---- ceilings -------------------------------------------------------------------------------


def measure_ceilings(device_index: int, model: ModelConfig, batch_size: int, seq_len: int,
                     precisions=DEFAULT_FORMATS, square: int = 8192, warmup: int = 10, iters: int = 50,
                     tune_warmup: int = 3, tune_iters: int = 5, rest_ms: int = 500,
                     progress=None) -> dict:
    """Measure the GEMM ceilings of one GPU and cache them under its UUID.

    Per precision: a square GEMM of side ``square`` and every shape of ``gemm_shapes()``, each
    with its algorithm tuned as ``measure_gemm`` does. Precisions the GPU cannot run are kept
    with their ``error``. ``rest_ms`` of host sleep separate each GEMM's tuning from its
    measurement (csrc/probe/gemm.h says why). ``progress`` is a ``rich.progress.Progress`` (one is made on stderr
    when None); it is started and stopped here.
    Returns {"device", "settings", "square": {prec: result}, "model_shapes": [shape + result],
    "summary": {prec: {"square_tflops", "square_tflops_best", "model_shapes_tflops"}},
    "measured_at"}. ``square_tflops`` (the median, sustained rate) is MFU's measured ceiling;
    the module docstring says why it is not the best call.
    """
    device = _device(probe(), device_index)
    shapes = gemm_shapes(model, batch_size, seq_len)
    squares: dict[str, dict] = {}
    rows: list[dict] = []
    with _progress_bar(progress) as bar:
        task = bar.add_task("GEMM ceilings", total=len(precisions) * (1 + len(shapes)))
        for prec in precisions:
            bar.update(task, description=f"{prec} {square}x{square}x{square}")
            squares[prec] = measure_gemm(device_index, prec, square, square, square, warmup, iters, tune_warmup,
                                         tune_iters, rest_ms)
            bar.advance(task)
            for shape in shapes:
                bar.update(task, description=f"{prec} {shape['name']}")
                result = measure_gemm(device_index, prec, shape["m"], shape["n"], shape["k"], warmup, iters,
                                      tune_warmup, tune_iters, rest_ms)
                rows.append({**shape, **result})
                bar.advance(task)
    result = {
        "schema": CEILINGS_SCHEMA,
        "device": device,
        "settings": {
            "model": model.name, "batch_size": batch_size, "seq_len": seq_len, "tokens": batch_size * seq_len,
            "square": square, "warmup": warmup, "iters": iters, "tune_warmup": tune_warmup,
            "tune_iters": tune_iters, "rest_ms": rest_ms, "precisions": list(precisions),
        },
        "square": squares,
        "model_shapes": rows,
        "summary": {prec: _summary(squares[prec], [r for r in rows if r["precision"] == prec]) for prec in precisions},
        "measured_at": utc_now(),
    }
    if device.get("uuid"):
        save_ceilings(device["uuid"], result)
    return result


def _device(probed: dict, index: int) -> dict:
    for device in probed["devices"]:
        if device["index"] == index:
            return device
    if not probed["devices"]:
        reasons = "; ".join(
            f"{name}: {probed[name]['error']}" for name in ("driver", "nvml") if probed[name]["error"]
        )
        raise ParallaxError(f"no NVIDIA GPU found ({reasons or 'no devices'}); run on a machine with a GPU")
    indices = ", ".join(str(d["index"]) for d in probed["devices"])
    raise ParallaxError(f"no GPU with index {index}; this machine has index {indices}")


def model_shape_ceiling(gemms: list[tuple[float, int, float]]) -> float:
    """TFLOP/s of (flops of one call, calls per step, ms of one call) GEMMs: Σ flops·count /
    Σ ms·count (csrc/probe/gemm_shapes.h)."""
    return _native().model_shape_ceiling(gemms)


def _summary(square: dict, rows: list[dict]) -> dict:
    """The square TFLOP/s (median and best call) and the count-weighted model-shape TFLOP/s
    from medians (None unless all ran)."""
    ran = rows and all(r["error"] is None for r in rows)
    model = model_shape_ceiling([(r["flops"], r["count"], r["median_ms"]) for r in rows]) if ran else None
    return {"square_tflops": square["tflops"], "square_tflops_best": square.get("tflops_best"),
            "model_shapes_tflops": model}


@contextlib.contextmanager
def _progress_bar(progress):
    if progress is None:
        from rich.console import Console
        from rich.progress import Progress

        progress = Progress(console=Console(stderr=True), transient=True)
    with progress:
        yield progress


# ---- cache ----------------------------------------------------------------------------------


def cache_dir() -> Path:
    """``parallax.store.cache.cache_root()``: $PARALLAX_CACHE_DIR, else $XDG_CACHE_HOME/parallax, else
    ~/.cache/parallax."""
    return cache_root()


def ceilings_path(uuid: str) -> Path:
    return _cache_file("ceilings", uuid)


def _cache_file(kind: str, uuid: str) -> Path:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", uuid or ""):
        raise ParallaxError(f"'{uuid}' is not a GPU UUID")
    return cache_dir() / kind / f"{uuid}.json"


def save_ceilings(uuid: str, result: dict) -> Path:
    """Atomically write ``result`` to the cache file of the GPU ``uuid``."""
    path = ceilings_path(uuid)
    atomic_write_json(path, result)
    return path


def load_cached_ceilings(uuid: str | None) -> dict | None:
    """The ceilings last measured on GPU ``uuid``, or None when there are none."""
    if not uuid:
        return None
    path = ceilings_path(uuid)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ParallaxError(
            f"cached GEMM ceilings {path} are unreadable ({exc}); delete the file and run "
            "'parallax check-env --measure' again"
        ) from exc


def measured_ceiling_tflops(uuid: str | None, precision: str) -> float | None:
    """The cached square-GEMM median TFLOP/s of ``precision`` on GPU ``uuid`` (MFU's measured ceiling)."""
    cached = load_cached_ceilings(uuid)
    if cached is None:
        return None
    return cached.get("summary", {}).get(precision, {}).get("square_tflops")
