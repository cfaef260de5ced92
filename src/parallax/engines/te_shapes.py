"""The shapes TransformerEngine's low-precision GEMMs take, for its recipes in both frameworks
(``engines/torch/recipes/te.py``, ``engines/jax/recipes/te.py``): checked before any GPU work."""

from __future__ import annotations

from parallax.errors import ParallaxError

FP8_TOKENS_MULTIPLE = 8  # TE fp8 GEMMs: the product of the leading dims (batch·seq) ...
FP8_DIM_MULTIPLE = 16  # ... and the last dim of every GEMM operand


def check_shapes(recipe: str, run, tokens_multiple: int = FP8_TOKENS_MULTIPLE, tokens_label: str = "TE fp8") -> None:
    """A one-line ParallaxError when ``run``'s batch·seq is not a multiple of ``tokens_multiple``
    or the model's d_model/d_ff not of FP8_DIM_MULTIPLE."""
    model, tokens = run.model_config, run.batch_size * run.seq_len
    if tokens % tokens_multiple:
        raise ParallaxError(f"recipe '{recipe}': {tokens_label} needs batch·seq divisible by "
                            f"{tokens_multiple}; {run.batch_size}·{run.seq_len} = {tokens} is not")
    for name in ("d_model", "d_ff"):
        size = getattr(model, name)
        if size % FP8_DIM_MULTIPLE:
            raise ParallaxError(f"recipe '{recipe}': TE fp8 needs {name} divisible by "
                                f"{FP8_DIM_MULTIPLE}; model '{model.name}' has {name} {size}")
