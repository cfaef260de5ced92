"""PyTorch bf16: ``torch.autocast(bfloat16)`` over float32 master weights, torch.compile.

Parameters, gradients and AdamW state stay float32; matmuls (and SDPA) run in bf16 under
autocast; the model keeps its residual stream in bf16 and does RMSNorm statistics, RoPE and
the loss in float32 (``engines/torch/model.py``). That is the common recipe of LLaMA
pre-training code and what MaxText's ``dtype: bfloat16, weight_dtype: float32`` does, so the
two engines compare like with like.
"""

from __future__ import annotations

from parallax.spec.recipe import Backend, Recipe
from parallax.engines.torch.recipes.base import TorchHooks

TORCH = Backend("torch.autocast", module="torch", extra="torch")

RECIPES = (
    Recipe(framework="torch", name="bf16", format="bf16", default=True, cpu=True, backend=TORCH,
           summary="torch.autocast(bfloat16) over fp32 master weights, torch.compile",
           hooks="parallax.engines.torch.recipes.autocast:AutocastHooks",
           fsdp="float32 all-gather (the master weights), bf16 autocast per GEMM"),
)


class AutocastHooks(TorchHooks):
    """The base hooks are this recipe."""


class Float32Hooks(TorchHooks):
    """Float32 throughout: the reference of ``parallax parity`` (not a benchmark recipe)."""

    compute_dtype_name = "float32"
    autocast = False

    def native(self, torch, device) -> bool:
        return True

    def details(self, torch) -> dict:
        return {"compute_dtype": "float32"}
