"""PyTorch custom ops over Parallax's native quantization kernels: ``torch.ops.parallax.*``.

Registered with ``torch.library.custom_op`` on import, so torch.compile treats each op as one
opaque node (a ``register_fake`` gives it the output shapes). Every op takes a float32 or
bfloat16 tensor quantized along its last dimension and returns tensors of the input's dtype:
the result is computed in float32 and, for bfloat16, rounded to nearest even at the end.

- CPU tensors: the native CPU functions (``parallax._native.quant_nvfp4_codes``,
  ``hadamard16``, ``quant_fp8``) on a float32 copy.
- CUDA tensors: the CUDA kernels (csrc/quant/quant_cuda.h), called through nanobind with
  integer device pointers (``data_ptr()``) and torch's current stream
  (``torch.cuda.current_stream().cuda_stream``) under the tensor's device; the call only
  queues work on that stream, like any torch kernel. Integers rather than DLPack: the kernels
  need nothing DLPack would check that is not checked here, and no stream hand-shake is
  involved.

Ops (seeds are ints in [0, 2**63 - 1]; mode "1x16", "16x16" or "16x1", parallax.quant.MODES):
  nvfp4_qdq(x, mode="1x16", stochastic=False, seed=0, rht=False, rht_seed=0) -> y
  nvfp4_quantize(x, ...same...) -> (y, codes uint8 [rows, cols/2], scales uint8, scale_ws f32[2]) (not 16x1)
  nvfp4_qdq_counter(x, counter, ...same...) -> y   (SR seed step_seed(seed, counter), counter a tensor)
  nvfp4_qdq_parts(x, counter, seeds, mode, stochastic, rht, rht_seed) -> y   (len(seeds) equal column parts,
      each quantized alone as nvfp4_qdq_counter with its seed; on CUDA without copying the parts)
  hadamard16(x, seed=0, inverse=False) -> y
  fp8_qdq(x, fmt="e4m3", scale=1.0, saturate=None) -> y
  mx_qdq(x, counter=None, elem="e4m3", rule="floor", stochastic=False, seed=0) -> y   (MX: blocks of 32, E8M0
      scales; elem e4m3 | e5m2 | e2m1, rule floor | rceil; counter: SR seed step_seed(seed, counter))
  mx_quantize(x, elem, rule, stochastic, seed) -> (y, codes uint8 [rows, cols], E8M0 scales uint8 [rows, cols/32])
No autograd formula is registered (the emulated recipe decides its straight-through rule).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Optional

import numpy as np
import torch

from parallax.quant import (MODE_CODES, MX_BLOCK, MX_ELEMS, MX_RULES, available_bindings, check_fp8, check_mx, check_seed,
                            check_shape, native)

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


def _check_input(x: torch.Tensor, what: str) -> None:
    if x.dtype not in _DTYPES:
        raise ValueError(f"{what}: x must be float32 or bfloat16, got {x.dtype}")
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{what}: x must be on the CPU or a CUDA device, got {x.device}")


@functools.lru_cache(maxsize=None)
def _cuda_kernels():
    """The native module where it has the CUDA kernels, else None; looked up once, since
    ``available_bindings()`` searches the import path (~0.1 ms) and this runs on every call of an
    op: the emulated recipe makes ~300 calls a training step."""
    n = native()
    return n if n is not None and available_bindings()["cuda"] else None


def _cuda_native():
    n = _cuda_kernels()
    if n is None:
        raise RuntimeError("parallax quant: this build has no CUDA kernels (built without a CUDA compiler); "
                           "rebuild on a machine with nvcc (pip install --no-build-isolation -e .)")
    return n


def _aligned(x: torch.Tensor) -> torch.Tensor:
    """x, dense and 16-byte aligned (a copy only when it is not)."""
    x = x.contiguous()
    return x if x.data_ptr() % 16 == 0 else x.clone()


def _stream(x: torch.Tensor) -> int:
    return torch.cuda.current_stream(x.device).cuda_stream


def _on(x: torch.Tensor):
    """x's device made current for the call (a no-op context when it already is, the common
    case: entering torch.cuda.device sets the device twice)."""
    if x.device.index is None or x.device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(x.device)


def _cpu_f32(x: torch.Tensor, rows: int, cols: int) -> np.ndarray:
    return x.detach().reshape(rows, cols).to(torch.float32).contiguous().numpy()


def _finite_amax(a: np.ndarray) -> float:
    f = np.abs(a[np.isfinite(a)])
    return float(f.max()) if f.size else 0.0


def _check_codes(mode: str, want_codes: bool) -> None:
    if want_codes and mode == "16x1":
        raise ValueError("nvfp4_quantize: mode 16x1 gives the dequantized values only; use nvfp4_qdq, or "
                         "quantize the transpose in 1x16 for codes and scales")


def _cpu_nvfp4(x, rows, cols, mode, stochastic, seed, rht, rht_seed):
    """The native CPU function on a float32 copy of x; 16x1 as the 1x16 function on the
    transpose, transposed back (no codes or scales)."""
    n = native()
    columns = mode == "16x1"
    a = _cpu_f32(x, rows, cols)
    if columns:
        a = np.ascontiguousarray(a.T)
    if rht:
        a = n.hadamard16(a, rht_seed, False)
    y, codes, scales, sg = n.quant_nvfp4_codes(a, "1x16" if columns else mode, stochastic, seed)
    ws = torch.tensor([_finite_amax(a), sg], dtype=torch.float32)
    if columns:
        return torch.from_numpy(np.ascontiguousarray(y.T)).to(x.dtype).reshape(x.shape), None, None, ws
    return torch.from_numpy(y).to(x.dtype).reshape(x.shape), torch.from_numpy(codes), torch.from_numpy(scales), ws


def _nvfp4(x, mode, stochastic, seed, rht, rht_seed, want_codes, derived_seed=False):
    """``derived_seed``: ``seed`` is a step seed the native side derived (any uint64), not a user's."""
    _check_input(x, "nvfp4")
    _check_codes(mode, want_codes)
    rows, cols = check_shape(tuple(x.shape), mode)
    seed, rht_seed = (seed if derived_seed else check_seed(seed)), check_seed(rht_seed, "rht_seed")
    srows = rows // 16 if mode == "16x16" else rows
    if x.device.type == "cpu":
        return _cpu_nvfp4(x, rows, cols, mode, stochastic, seed, rht, rht_seed)
    n = _cuda_native()
    with _on(x):
        xc = _aligned(x)
        y = torch.empty_like(xc)
        ws = torch.empty(2, dtype=torch.float32, device=x.device)
        codes = scales = None
        if want_codes:
            codes = torch.empty((rows, cols // 2), dtype=torch.uint8, device=x.device)
            scales = torch.empty((srows, cols // 16), dtype=torch.uint8, device=x.device)
        n.quant_nvfp4_cuda(xc.data_ptr(), _DTYPES[x.dtype], y.data_ptr(), codes.data_ptr() if want_codes else 0,
                           scales.data_ptr() if want_codes else 0, ws.data_ptr(), rows, cols, MODE_CODES[mode],
                           stochastic, seed, rht, rht_seed, _stream(x))
    return y.reshape(x.shape), codes, scales, ws


@torch.library.custom_op("parallax::nvfp4_qdq", mutates_args=())
def nvfp4_qdq(x: torch.Tensor, mode: str = "1x16", stochastic: bool = False, seed: int = 0, rht: bool = False,
              rht_seed: int = 0) -> torch.Tensor:
    """NVFP4 quantize-dequantize along the last dimension (optionally after the 16x16 RHT)."""
    return _nvfp4(x, mode, stochastic, seed, rht, rht_seed, want_codes=False)[0]


@nvfp4_qdq.register_fake
def _(x, mode="1x16", stochastic=False, seed=0, rht=False, rht_seed=0):
    _check_input(x, "nvfp4")
    check_shape(tuple(x.shape), mode)
    return torch.empty_like(x)


def _check_counter(x: torch.Tensor, counter: torch.Tensor) -> None:
    if counter.dtype != torch.int32 or counter.numel() != 1 or counter.device != x.device:
        raise ValueError(f"nvfp4_qdq_counter: counter must be one int32 on {x.device} (the step, read as uint32), "
                         f"got {counter.dtype} {tuple(counter.shape)} on {counter.device}")


@torch.library.custom_op("parallax::nvfp4_qdq_counter", mutates_args=())
def nvfp4_qdq_counter(x: torch.Tensor, counter: torch.Tensor, mode: str = "1x16", stochastic: bool = False,
                      seed: int = 0, rht: bool = False, rht_seed: int = 0) -> torch.Tensor:
    """nvfp4_qdq with the stochastic-rounding seed ``step_seed(seed, counter)`` (csrc/quant/qdq_math.h),
    ``counter`` a one-element int32 tensor on x's device read at run time (as uint32): a compiled
    graph's step advances it without recompiling. The CPU path reads it on the host, the CUDA
    kernel on the device (no synchronisation)."""
    _check_input(x, "nvfp4")
    _check_counter(x, counter)
    if x.device.type == "cpu":
        step = int(counter.reshape(()).item()) & 0xFFFFFFFF
        return _nvfp4(x, mode, stochastic, native().quant_step_seed(check_seed(seed), step), rht, rht_seed,
                      want_codes=False, derived_seed=True)[0]
    rows, cols = check_shape(tuple(x.shape), mode)
    seed, rht_seed = check_seed(seed), check_seed(rht_seed, "rht_seed")
    n = _cuda_native()
    with _on(x):
        xc = _aligned(x)
        y = torch.empty_like(xc)
        ws = torch.empty(2, dtype=torch.float32, device=x.device)
        c = counter.contiguous()
        n.quant_nvfp4_counter_cuda(xc.data_ptr(), _DTYPES[x.dtype], y.data_ptr(), 0, 0, ws.data_ptr(), rows, cols,
                                   MODE_CODES[mode], stochastic, seed, c.data_ptr(), rht, rht_seed, _stream(x))
    return y.reshape(x.shape)


@nvfp4_qdq_counter.register_fake
def _(x, counter, mode="1x16", stochastic=False, seed=0, rht=False, rht_seed=0):
    _check_input(x, "nvfp4")
    check_shape(tuple(x.shape), mode)
    return torch.empty_like(x)


def _check_parts(x: torch.Tensor, seeds: list[int], mode: str) -> None:
    """x is 2-D and its columns split into len(seeds) equal parts that mode's blocks tile."""
    if x.dim() != 2:
        raise ValueError(f"nvfp4_qdq_parts: x must be 2-D [rows, cols], got shape {tuple(x.shape)}")
    if not seeds or x.shape[1] % len(seeds):
        raise ValueError(f"nvfp4_qdq_parts: {x.shape[1]} columns do not split into {len(seeds)} equal parts")
    check_shape((x.shape[0], x.shape[1] // len(seeds)), mode, "nvfp4_qdq_parts")


@torch.library.custom_op("parallax::nvfp4_qdq_parts", mutates_args=())
def nvfp4_qdq_parts(x: torch.Tensor, counter: torch.Tensor, seeds: list[int], mode: str = "1x16",
                    stochastic: bool = False, rht: bool = False, rht_seed: int = 0) -> torch.Tensor:
    """x [rows, cols] as len(seeds) equal column parts, part p quantize-dequantized exactly as
    ``nvfp4_qdq_counter(x[:, part p].contiguous(), counter, mode, stochastic, seeds[p], rht, rht_seed)``
    and written to the same columns: the canonical parts of a fused linear (wq|wk|wv), each
    with its own per-tensor scale and SR seed. The CUDA kernels read and write the parts in place
    (px_nvfp4_qdq_parts_cuda); no copies of the parts and no concatenation."""
    _check_input(x, "nvfp4")
    _check_counter(x, counter)
    _check_parts(x, seeds, mode)
    seeds = [check_seed(s) for s in seeds]
    rht_seed = check_seed(rht_seed, "rht_seed")
    if x.device.type == "cpu":
        return torch.cat([nvfp4_qdq_counter(p.contiguous(), counter, mode, stochastic, s, rht, rht_seed)
                          for p, s in zip(x.chunk(len(seeds), dim=1), seeds)], dim=1)
    n = _cuda_native()
    with _on(x):
        xc = _aligned(x)
        y = torch.empty_like(xc)
        ws = torch.empty(2 * len(seeds), dtype=torch.float32, device=x.device)
        n.quant_nvfp4_parts_cuda(xc.data_ptr(), _DTYPES[x.dtype], y.data_ptr(), ws.data_ptr(), x.shape[0], x.shape[1],
                                 MODE_CODES[mode], stochastic, seeds, counter.contiguous().data_ptr(), rht, rht_seed,
                                 _stream(x))
    return y


@nvfp4_qdq_parts.register_fake
def _(x, counter, seeds, mode="1x16", stochastic=False, rht=False, rht_seed=0):
    _check_input(x, "nvfp4")
    _check_parts(x, seeds, mode)
    return torch.empty_like(x)


@torch.library.custom_op("parallax::nvfp4_quantize", mutates_args=())
def nvfp4_quantize(x: torch.Tensor, mode: str = "1x16", stochastic: bool = False, seed: int = 0, rht: bool = False,
                   rht_seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dequantized y, packed E2M1 codes uint8 [rows, cols/2], E4M3 scales uint8, {amax, s_global})."""
    return _nvfp4(x, mode, stochastic, seed, rht, rht_seed, want_codes=True)


@nvfp4_quantize.register_fake
def _(x, mode="1x16", stochastic=False, seed=0, rht=False, rht_seed=0):
    _check_input(x, "nvfp4")
    _check_codes(mode, True)
    rows, cols = check_shape(tuple(x.shape), mode)
    srows = rows // 16 if mode == "16x16" else rows
    return (torch.empty_like(x), x.new_empty((rows, cols // 2), dtype=torch.uint8),
            x.new_empty((srows, cols // 16), dtype=torch.uint8), x.new_empty((2,), dtype=torch.float32))


@torch.library.custom_op("parallax::hadamard16", mutates_args=())
def hadamard16(x: torch.Tensor, seed: int = 0, inverse: bool = False) -> torch.Tensor:
    """The 16x16 random Hadamard transform of each group of 16 along the last dimension."""
    _check_input(x, "hadamard16")
    rows, cols = check_shape(tuple(x.shape), "1x16", "hadamard16")
    seed = check_seed(seed)
    if x.device.type == "cpu":
        y = native().hadamard16(_cpu_f32(x, rows, cols), seed, inverse)
        return torch.from_numpy(y).to(x.dtype).reshape(x.shape)
    n = _cuda_native()
    with _on(x):
        xc = _aligned(x)
        y = torch.empty_like(xc)
        n.hadamard16_cuda(xc.data_ptr(), _DTYPES[x.dtype], y.data_ptr(), rows, cols, seed, inverse, _stream(x))
    return y.reshape(x.shape)


@hadamard16.register_fake
def _(x, seed=0, inverse=False):
    _check_input(x, "hadamard16")
    check_shape(tuple(x.shape), "1x16", "hadamard16")
    return torch.empty_like(x)


@torch.library.custom_op("parallax::fp8_qdq", mutates_args=())
def fp8_qdq(x: torch.Tensor, fmt: str = "e4m3", scale: float = 1.0, saturate: Optional[bool] = None) -> torch.Tensor:
    """FP8 quantize-dequantize with a given scale: decode(encode(x / scale)) * scale."""
    _check_input(x, "fp8_qdq")
    sat = check_fp8(fmt, saturate)
    if x.device.type == "cpu":
        a = x.detach().to(torch.float32).contiguous().numpy()
        return torch.from_numpy(native().quant_fp8(a, fmt, scale, sat)).to(x.dtype)
    n = _cuda_native()
    with _on(x):
        xc = _aligned(x)
        y = torch.empty_like(xc)
        n.quant_fp8_cuda(xc.data_ptr(), _DTYPES[x.dtype], y.data_ptr(), 0, xc.numel(), fmt, float(scale), sat,
                         _stream(x))
    return y.reshape(x.shape)


@fp8_qdq.register_fake
def _(x, fmt="e4m3", scale=1.0, saturate=None):
    _check_input(x, "fp8_qdq")
    check_fp8(fmt, saturate)
    return torch.empty_like(x)


def _narrow(y: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """The native float32 result in x's dtype, bf16 rounded as the native side rounds it (qdq_math.h
    f32_to_bf16: to nearest even, every NaN 0x7FC0; torch's CPU cast writes 0xFFFF for a NaN), so
    the CPU op, the CUDA kernel and the JAX call give the same bits."""
    if dtype == torch.float32:
        return torch.from_numpy(y)
    u = y.view(np.uint32).astype(np.uint64)
    h = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    h[np.isnan(y)] = 0x7FC0
    return torch.from_numpy(h.view(np.int16)).view(torch.bfloat16)


def _mx_seed(x: torch.Tensor, counter: Optional[torch.Tensor], seed: int) -> int:
    """The CPU path's SR seed: ``seed``, or step_seed(seed, counter) read on the host."""
    seed = check_seed(seed)
    if counter is None:
        return seed
    _check_counter(x, counter)
    return native().quant_step_seed(seed, int(counter.reshape(()).item()) & 0xFFFFFFFF)


def _mx(x, counter, elem, rule, stochastic, seed, want_codes):
    _check_input(x, "mx")
    rows, cols = check_mx(tuple(x.shape), elem, rule)
    if x.device.type == "cpu":
        y, codes, scales = native().quant_mx_codes(_cpu_f32(x, rows, cols), elem, rule, stochastic,
                                                   _mx_seed(x, counter, seed))
        return _narrow(y, x.dtype).reshape(x.shape), torch.from_numpy(codes), torch.from_numpy(scales)
    if counter is not None:
        _check_counter(x, counter)
    n = _cuda_native()
    with _on(x):
        xc = _aligned(x)
        y = torch.empty_like(xc)
        codes = scales = None
        if want_codes:
            codes = torch.empty((rows, cols), dtype=torch.uint8, device=x.device)
            scales = torch.empty((rows, cols // MX_BLOCK), dtype=torch.uint8, device=x.device)
        c = counter.contiguous() if counter is not None else None
        n.quant_mx_cuda(xc.data_ptr(), _DTYPES[x.dtype], y.data_ptr(), codes.data_ptr() if want_codes else 0,
                        scales.data_ptr() if want_codes else 0, rows, cols, MX_ELEMS[elem], MX_RULES[rule],
                        stochastic, check_seed(seed), c.data_ptr() if c is not None else 0, _stream(x))
    return y.reshape(x.shape), codes, scales


@torch.library.custom_op("parallax::mx_qdq", mutates_args=())
def mx_qdq(x: torch.Tensor, counter: Optional[torch.Tensor] = None, elem: str = "e4m3", rule: str = "floor",
           stochastic: bool = False, seed: int = 0) -> torch.Tensor:
    """MX quantize-dequantize along the last dimension (blocks of 32, E8M0 scales; csrc/quant/mx.h).
    ``counter`` (optional, one int32 on x's device): the SR seed is step_seed(seed, counter), read
    at run time as nvfp4_qdq_counter's."""
    return _mx(x, counter, elem, rule, stochastic, seed, want_codes=False)[0]


@mx_qdq.register_fake
def _(x, counter=None, elem="e4m3", rule="floor", stochastic=False, seed=0):
    _check_input(x, "mx")
    check_mx(tuple(x.shape), elem, rule)
    return torch.empty_like(x)


@torch.library.custom_op("parallax::mx_quantize", mutates_args=())
def mx_quantize(x: torch.Tensor, elem: str = "e4m3", rule: str = "floor", stochastic: bool = False,
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dequantized y, codes uint8 [rows, cols] one per element, E8M0 scales uint8 [rows, cols/32])."""
    return _mx(x, None, elem, rule, stochastic, seed, want_codes=True)


@mx_quantize.register_fake
def _(x, elem="e4m3", rule="floor", stochastic=False, seed=0):
    _check_input(x, "mx")
    rows, cols = check_mx(tuple(x.shape), elem, rule)
    return (torch.empty_like(x), x.new_empty((rows, cols), dtype=torch.uint8),
            x.new_empty((rows, cols // MX_BLOCK), dtype=torch.uint8))
