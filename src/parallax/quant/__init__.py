"""NVFP4 / MX / FP8 quantization with Parallax's native kernels, for both frameworks.

One set of native functions (csrc/quant): the CPU reference and, where the package was built
with a CUDA compiler, CUDA kernels that reproduce it bit for bit. Two framework bindings call
them, so PyTorch and JAX never differ by their quantizer:

- ``parallax.quant.torch_ops``: PyTorch custom ops ``torch.ops.parallax.*`` (torch.library,
  opaque to torch.compile), the CPU functions on CPU tensors, the CUDA kernels on CUDA
  tensors on torch's current stream;
- ``parallax.quant.jax_ffi``: XLA FFI custom calls, the CPU implementation on the CPU and
  the CUDA kernels on XLA's stream on the GPU.

``available_bindings()`` says which of these this installation has. Semantics, edge cases
and the kernel design: csrc/quant/README.md.
"""

from __future__ import annotations

import importlib.util

# 1x16: blocks along the last dimension; 16x16: 2D tiles; 16x1: the 1x16 blocks of xᵀ (blocks down
# the columns of the [rows, cols] view), written in x's layout: y = transpose(Q1x16(transpose(x))),
# without either transposed copy (csrc/quant/qdq_columns.h). 16x1 gives the dequantized values only.
MODES = ("1x16", "16x16", "16x1")
MODE_CODES = {"1x16": 0, "16x16": 1, "16x1": 2}  # the native functions' `mode`
FP8_FORMATS = ("e4m3", "e5m2")
MAX_SEED = 2**63 - 1  # seeds travel as torch's int (int64); the native side takes them as uint64


def native():
    """parallax._native, or None when the extension is not built."""
    try:
        from parallax import _native
    except ImportError:
        return None
    return _native


def available_bindings() -> dict[str, bool]:
    """{'cpu': the native CPU functions, 'cuda': the CUDA kernels compiled in (a GPU is still
    needed to run them), 'torch_op': the PyTorch custom ops can be registered (torch is
    installed), 'jax_ffi': the XLA FFI handlers are compiled in and jax is installed}."""
    n = native()
    built = dict(n.quant_bindings()) if n is not None and hasattr(n, "quant_bindings") else {}
    cpu = bool(built.get("cpu", False))
    return {
        "cpu": cpu,
        "cuda": bool(built.get("cuda", False)),
        "torch_op": cpu and importlib.util.find_spec("torch") is not None,
        "jax_ffi": bool(built.get("jax_ffi", False)) and importlib.util.find_spec("jax") is not None,
    }


def check_shape(shape: tuple[int, ...], mode: str, what: str = "nvfp4") -> tuple[int, int]:
    """(rows, cols) of a tensor quantized along its last dimension (16x1: along the leading ones):
    rows = the product of the leading dimensions. A clear ValueError when the blocks do not tile
    it (no padding)."""
    if mode not in MODES:
        raise ValueError(f"{what}: mode must be one of {MODES}, got {mode!r}")
    rows, cols = _rows_cols(shape, what)
    if mode == "16x1":
        if rows % 16 or cols % 2:
            raise ValueError(f"{what}: 16x1 blocks need the leading dimensions' product ({rows}) to be a multiple "
                             f"of 16 and the last dimension ({cols}) even, shape {tuple(shape)} (no padding)")
        return rows, cols
    if cols % 16:
        raise ValueError(f"{what}: the last dimension ({cols}, shape {tuple(shape)}) must be a multiple of 16 "
                         "(NVFP4 blocks are 16 wide; there is no padding)")
    if mode == "16x16" and rows % 16:
        raise ValueError(f"{what}: 16x16 blocks need the leading dimensions' product ({rows}, shape "
                         f"{tuple(shape)}) to be a multiple of 16")
    return rows, cols


def check_seed(seed: int, what: str = "seed") -> int:
    seed = int(seed)
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{what} must be in [0, 2**63 - 1], got {seed}")
    return seed


def check_fp8(fmt: str, saturate: bool | None) -> bool:
    """The saturate flag to use (the format's default when None)."""
    if fmt not in FP8_FORMATS:
        raise ValueError(f"fmt must be one of {FP8_FORMATS}, got {fmt!r}")
    return (fmt == "e4m3") if saturate is None else bool(saturate)

# MX (OCP Microscaling v1.0): blocks of 32 along the last dimension, an E8M0 scale per block
# (csrc/quant/mx.h). Elements: e4m3 / e5m2 (MXFP8), e2m1 (MXFP4); scale rules: floor (the OCP
# specification's) and rceil (rounded up: nothing saturates; arXiv 2506.08027).
MX_BLOCK = 32
MX_ELEMS = {"e4m3": 0, "e5m2": 1, "e2m1": 2}  # the native functions' `elem`
MX_RULES = {"floor": 0, "rceil": 1}  # their `rule`


def check_mx(shape: tuple[int, ...], elem: str, rule: str, what: str = "mx") -> tuple[int, int]:
    """(rows, cols) of a tensor MX-quantized along its last dimension; a clear ValueError for an
    unknown element format or scale rule, or a last dimension that 32-blocks do not tile."""
    if elem not in MX_ELEMS:
        raise ValueError(f"{what}: elem must be one of {tuple(MX_ELEMS)}, got {elem!r}")
    if rule not in MX_RULES:
        raise ValueError(f"{what}: rule must be one of {tuple(MX_RULES)}, got {rule!r}")
    rows, cols = _rows_cols(shape, what)
    if cols % MX_BLOCK:
        raise ValueError(f"{what}: the last dimension ({cols}, shape {tuple(shape)}) must be a multiple of "
                         f"{MX_BLOCK} (MX blocks are 32 wide; there is no padding)")
    return rows, cols


def _rows_cols(shape, what: str) -> tuple[int, int]:
    """(the product of the leading dimensions, the last one); a ValueError for a scalar."""
    if len(shape) == 0:
        raise ValueError(f"{what}: needs a tensor of at least one dimension, got a scalar")
    rows = 1
    for d in shape[:-1]:
        rows *= int(d)
    return rows, int(shape[-1])
