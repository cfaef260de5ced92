"""MaxText's quantization modes as recipes of the ``maxtext`` framework (REFERENCE.md §1, §5).

MaxText runs every mode the same way: ``engines/maxtext`` writes a config with the mode's keys
(``MaxTextMode`` below) and runs ``maxtext.trainers.pre_train.train`` on it in a
subprocess. What differs is what a mode needs: ``fp8_gpu`` goes through Qwix
(``use_qwix_quantization: true``), the ``te_*`` modes through TransformerEngine's JAX extension
with Qwix off (with Qwix on they are silently a no-op), nvfp4 through Blackwell tensor cores.
The capability checks refuse a mode whose library or GPU is missing before any GPU work.

Each recipe also names its performance settings (``params["tuning"]``, the keys of
``engines/maxtext/config.TUNINGS``): every mode runs ``tuned`` (Parallax's one-GPU settings)
except ``bf16-defaults``, the same bf16 with MaxText's own ``base.yml`` values, so that a
benchmark can put MaxText as it comes beside MaxText as tuned (docs/maxtext.md, "Tuning").

The hooks (``MaxTextMode``): the MaxText config keys that select its mode.

MaxText applies the mode itself (``layers/quantizations.py``: one string -> one dot_general
seam); Parallax only writes the keys and records them.
"""

from __future__ import annotations

from parallax.spec.recipe import Backend, Recipe


# MaxText 0.2.5 is the version the config keys were read from; it needs Python >= 3.12.
MAXTEXT = Backend("maxtext", distributions=(("maxtext",),), module="maxtext", extra="maxtext",
                  min_version="0.2.5")
MAXTEXT_QWIX = Backend("maxtext+qwix", distributions=(("maxtext",), ("qwix",)), module="maxtext",
                       extra="maxtext", min_version="0.2.5")
MAXTEXT_TE = Backend("maxtext+transformer_engine.jax", distributions=(("maxtext",), ("transformer_engine_jax",)),
                     module="maxtext", extra="maxtext", min_version="0.2.5")
HOOKS = "parallax.engines.maxtext.recipes:MaxTextMode"


def _mode(name: str, fmt: str, summary: str, *, backend: Backend = MAXTEXT, default: bool = False,
          min_cc=None, below_cc=None, qwix: bool = False, tuning: str = "tuned") -> Recipe:
    quantization = name if fmt != "bf16" else ""
    return Recipe(framework="maxtext", name=name, format=fmt, default=default, backend=backend, hooks=HOOKS,
                  min_cc=min_cc, below_cc=below_cc, summary=summary,
                  params={"quantization": quantization, "use_qwix_quantization": qwix, "tuning": tuning})


RECIPES = (
    _mode("bf16", "bf16", "MaxText dtype=bfloat16, weight_dtype=float32", default=True),
    _mode("bf16-defaults", "bf16", "MaxText bf16 with base.yml's performance settings (scan_layers, remat full, "
          "attention autoselected)", tuning="defaults"),
    _mode("fp8", "fp8", "MaxText quantization=fp8 (Flax Fp8DirectDotGeneralOp)", min_cc=(8, 9)),
    _mode("fp8_gpu", "fp8", "MaxText quantization=fp8_gpu through Qwix (use_qwix_quantization=true)",
          backend=MAXTEXT_QWIX, default=True, min_cc=(8, 9), qwix=True),
    _mode("te_fp8_delayedscaling", "fp8", "MaxText with TE DelayedScaling (needs TE's JAX extension)",
          backend=MAXTEXT_TE, min_cc=(8, 9)),
    _mode("te_fp8_currentscaling", "fp8", "MaxText with TE Float8CurrentScaling (needs TE's JAX extension)",
          backend=MAXTEXT_TE, min_cc=(8, 9)),
    _mode("te_mxfp8", "mxfp8", "MaxText with TE MXFP8BlockScaling (Blackwell 10.x: refused on Hopper and 12.0+; needs "
          "TE's JAX extension); not yet run on hardware", backend=MAXTEXT_TE, default=True, min_cc=(10, 0),
          below_cc=(12, 0)),
    _mode("te_nvfp4", "nvfp4", "MaxText with TE NVFP4BlockScaling (Blackwell; needs TE's JAX extension)",
          backend=MAXTEXT_TE, default=True, min_cc=(10, 0)),
    _mode("te_nvfp4_no_rht", "nvfp4", "MaxText with TE NVFP4BlockScaling without RHT (Blackwell; needs TE's JAX extension)",
          backend=MAXTEXT_TE, min_cc=(10, 0)),
)


class MaxTextMode:
    def __init__(self, recipe):
        self.recipe = recipe

    def keys(self) -> dict:
        """The mode's keys: ``quantization`` ("" for bf16) and ``use_qwix_quantization``."""
        return {"quantization": self.recipe.params["quantization"],
                "use_qwix_quantization": bool(self.recipe.params["use_qwix_quantization"])}
