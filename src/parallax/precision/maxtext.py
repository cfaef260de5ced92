"""MaxText's quantization modes as recipes of the ``maxtext`` framework (REFERENCE.md §1, §5).

The MaxText adapter (a subprocess running ``maxtext.trainers.pre_train.train`` on an exported
config) is the MaxText issue's work; until it lands these recipes are listed, with the mode
each maps to, and refused as planned."""

from __future__ import annotations

from parallax.precision.recipe import Backend, Recipe

MAXTEXT = Backend("maxtext", distributions=(("maxtext",),), module="maxtext", extra="maxtext",
                  min_version="0.2")
PLANNED = ("the MaxText adapter, running MaxText in a subprocess; needs pip install 'slm-parallax[maxtext]', "
           "Python >= 3.12")


def _mode(name: str, fmt: str, summary: str, *, default: bool = False, min_cc=None) -> Recipe:
    return Recipe(framework="maxtext", name=name, format=fmt, default=default, backend=MAXTEXT, hooks=None,
                  min_cc=min_cc, summary=summary, planned=PLANNED, params={"quantization": name if fmt != "bf16" else ""})


RECIPES = (
    _mode("bf16", "bf16", "MaxText dtype=bfloat16, weight_dtype=float32", default=True),
    _mode("fp8", "fp8", "MaxText quantization=fp8 (Flax Fp8DirectDotGeneralOp)", min_cc=(8, 9)),
    _mode("fp8_gpu", "fp8", "MaxText quantization=fp8_gpu (needs use_qwix_quantization=true)",
          default=True, min_cc=(8, 9)),
    _mode("te_fp8_delayedscaling", "fp8", "MaxText with TE DelayedScaling (needs TE's JAX extension)", min_cc=(8, 9)),
    _mode("te_fp8_currentscaling", "fp8", "MaxText with TE Float8CurrentScaling (needs TE's JAX extension)",
          min_cc=(8, 9)),
    _mode("te_nvfp4", "nvfp4", "MaxText with TE NVFP4BlockScaling (Blackwell)", default=True, min_cc=(10, 0)),
    _mode("te_nvfp4_no_rht", "nvfp4", "MaxText with TE NVFP4BlockScaling without RHT (Blackwell)",
          min_cc=(10, 0)),
)
