"""The hooks of a ``maxtext`` recipe: the MaxText config keys that select its mode.

MaxText applies the mode itself (``layers/quantizations.py``: one string -> one dot_general
seam); Parallax only writes the keys and records them."""

from __future__ import annotations


class MaxTextMode:
    def __init__(self, recipe):
        self.recipe = recipe

    def keys(self) -> dict:
        """The mode's keys: ``quantization`` ("" for bf16) and ``use_qwix_quantization``."""
        return {"quantization": self.recipe.params["quantization"],
                "use_qwix_quantization": bool(self.recipe.params["use_qwix_quantization"])}
