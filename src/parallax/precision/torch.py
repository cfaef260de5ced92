"""The torch engine's precision: the only place it is decided.

bf16 is autocast over float32 master weights: parameters, gradients and AdamW state stay
float32; matmuls (and SDPA) run in bf16 under ``torch.autocast``; the model keeps its residual
stream in bf16 and does RMSNorm statistics, RoPE and the loss in float32 (``model.py``).
That is the common recipe of LLaMA pre-training code and what MaxText's ``dtype: bfloat16,
weight_dtype: float32`` does, so the two engines compare like with like.

fp8 and nvfp4 are not implemented in this engine yet; asking for them is an error rather
than a run that silently does bf16 under another name.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from parallax.config import PRECISIONS
from parallax.errors import ParallaxError
from parallax.precision import PrecisionInfo

BF16_RECIPE = "bf16 autocast over fp32 master weights"


@dataclass(frozen=True)
class TorchPrecision:
    """What ``engine.py`` needs to run a precision: the label, the model's compute dtype,
    and the autocast dtype (None: no autocast)."""

    info: PrecisionInfo
    compute_dtype: torch.dtype
    autocast_dtype: torch.dtype | None

    def autocast(self, device_type: str):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type, dtype=self.autocast_dtype)


def _bf16_native(device: torch.device) -> bool:
    """Whether bf16 arithmetic runs in hardware; raise where it cannot run at all."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return True
        if torch.cuda.is_bf16_supported(including_emulation=True):
            return False
        name = torch.cuda.get_device_name(device)
        raise ParallaxError(f"{name} cannot run bf16 in torch; use a GPU of compute capability 8.0 or newer")
    # oneDNN runs bf16 matmuls natively only on CPUs with AVX512-BF16/AMX; elsewhere it converts.
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def for_run(precision: str, device: torch.device) -> TorchPrecision:
    """The recipe of ``parallax train --precision``; ParallaxError when this engine cannot run it."""
    if precision not in PRECISIONS:
        raise ParallaxError(f"unknown precision '{precision}'; choose one of: {', '.join(PRECISIONS)}")
    if precision != "bf16":
        raise ParallaxError(
            f"precision {precision} is not implemented in the torch engine yet; this release runs bf16"
        )
    info = PrecisionInfo(
        precision="bf16",
        backend="torch.autocast",
        recipe=BF16_RECIPE,
        native=_bf16_native(device),
        details={
            "compute_dtype": "bfloat16",
            "master_weights": "float32",
            "optimizer_state": "float32",
            "residual_stream": "bfloat16",
            "norm_rope_loss": "float32",
            "device_type": device.type,
        },
    )
    return TorchPrecision(info, compute_dtype=torch.bfloat16, autocast_dtype=torch.bfloat16)


def for_compute_dtype(compute_dtype: str, device: torch.device) -> TorchPrecision:
    """The recipe of a reference (parity) run: "float32" (no autocast) or "bfloat16"."""
    if compute_dtype == "bfloat16":
        return for_run("bf16", device)
    if compute_dtype != "float32":
        raise ParallaxError(f"unknown compute dtype '{compute_dtype}'; choose float32 or bfloat16")
    info = PrecisionInfo(
        precision="fp32",
        backend="torch",
        recipe="float32 throughout (reference)",
        native=True,
        details={"compute_dtype": "float32", "device_type": device.type},
    )
    return TorchPrecision(info, compute_dtype=torch.float32, autocast_dtype=None)
