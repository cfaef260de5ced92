"""The one place the JAX engine's precision is decided.

bf16 is what this release runs: parameters, gradients and optimizer state stay float32,
the model computes in bfloat16 (Flax ``param_dtype=float32, dtype=bfloat16``), as MaxText
does with ``weight_dtype: float32, dtype: bfloat16``. RMSNorm statistics, RoPE, the
attention softmax and the loss are computed in float32 inside the model (``model.py``).

fp8 and nvfp4 are refused here, before any GPU work, rather than silently running bf16.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from parallax import hardware
from parallax.errors import ParallaxError
from parallax.precision import COMPUTE_DTYPES, PrecisionInfo


@dataclass(frozen=True)
class JaxPrecision:
    """Dtype names (strings, so this module never imports JAX) and the recorded label."""

    param_dtype: str
    compute_dtype: str
    info: PrecisionInfo


def jax_precision(precision: str) -> JaxPrecision:
    """The dtypes and label of ``precision`` for the JAX engine; ParallaxError if it cannot run."""
    if precision == "bf16":
        return JaxPrecision(
            param_dtype="float32",
            compute_dtype="bfloat16",
            info=PrecisionInfo(
                precision="bf16",
                backend="jax.dtype",
                recipe="bf16 compute over fp32 parameters (Flax dtype=bfloat16, param_dtype=float32)",
                native=True,
                details={
                    "param_dtype": "float32",
                    "compute_dtype": "bfloat16",
                    "residual_dtype": "bfloat16",
                    "norm_statistics": "float32",
                    "rope": "float32",
                    "attention_softmax": "float32",
                    "loss": "float32",
                    "optimizer_state": "float32",
                },
            ),
        )
    if precision in ("fp8", "nvfp4"):
        raise ParallaxError(
            f"precision {precision} is not implemented in the JAX engine yet; this release runs bf16"
        )
    raise ParallaxError(f"unknown precision '{precision}' for the JAX engine; this release runs bf16")


def on_device(precision: JaxPrecision, platform: str, compute_capability=None) -> JaxPrecision:
    """``precision`` with ``native`` decided for the device that runs it (``jax_precision`` alone
    cannot know). bf16 matmuls are native on NVIDIA GPUs of compute capability 8.0+. XLA:CPU
    converts the operands of a bf16 dot to float32 and rounds the result back (seen in the
    optimized HLO of jax 0.10.2, on a CPU that has AVX512-BF16), so a CPU run is emulated bf16:
    its loss shows bf16 rounding, its speed is not bf16 arithmetic."""
    native = platform == "gpu" and precision.info.precision in hardware.native_precisions(compute_capability)
    details = {**precision.info.details, "device_platform": platform}
    info = dataclasses.replace(precision.info, native=native, details=details)
    return dataclasses.replace(precision, info=info)


def check_compute_dtype(compute_dtype: str) -> str:
    if compute_dtype not in COMPUTE_DTYPES:
        raise ParallaxError(
            f"unknown compute dtype '{compute_dtype}'; choose one of: {', '.join(COMPUTE_DTYPES)}"
        )
    return compute_dtype
