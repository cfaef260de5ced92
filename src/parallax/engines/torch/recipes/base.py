"""The hooks the torch engine calls for a recipe, and their default: the plain ``Llama``
(``engines/torch/model.py``) under ``torch.autocast(bfloat16)`` over float32 master weights,
compiled whole with torch.compile.

A recipe overrides what it changes: TransformerEngine builds its own modules (``te.py``),
torchao converts the plain model's linears (``torchao.py``). Every method receives ``torch``
(imported by the engine) so that importing a recipe module never imports torch.
"""

from __future__ import annotations

import contextlib

import numpy as np

from parallax.spec.config import ModelConfig
from parallax.errors import ParallaxError
from parallax.plan import capability as cap


class TorchHooks:
    compute_dtype_name = "bfloat16"  # the residual stream and the autocast dtype
    autocast = True

    def __init__(self, recipe):
        self.recipe = recipe

    # ---- before any GPU work
    def check(self, torch, device, run=None) -> None:
        """Raise ParallaxError when this recipe cannot run on ``device`` here, or at the shapes
        of ``run`` (a RunConfig; None where there is no run, e.g. a parity reference)."""

    def native(self, torch, device) -> bool:
        """Whether the recipe's format runs in hardware on ``device``: bf16 on a GPU as torch
        says, other formats on a CUDA GPU of at least the format's native compute capability;
        never on the CPU (``plan.capability.runs_natively`` decides that for every engine)."""
        if device.type != "cuda":
            return cap.runs_natively(self.recipe.format, device.type)
        if self.recipe.format == "bf16":
            return bf16_native(torch, device)
        return device.type == "cuda" and torch.cuda.get_device_capability(device) >= self.recipe.native_min_cc

    def details(self, torch) -> dict:
        """Recorded in the result: the recipe's parameters and library versions."""
        return {"compute_dtype": self.compute_dtype_name, "master_weights": "float32",
                "optimizer_state": "float32", "residual_stream": self.compute_dtype_name,
                "norm_rope_loss": "float32"}

    # ---- the model
    def compute_dtype(self, torch):
        return getattr(torch, self.compute_dtype_name)

    def build(self, torch, config: ModelConfig, weights: dict[str, np.ndarray], device):
        """The module holding the canonical ``weights`` on ``device``."""
        from parallax.engines.torch.convert import to_torch_state
        from parallax.engines.torch.model import Llama

        with torch.device("meta"):
            module = Llama(config, self.compute_dtype(torch))
        module = module.to_empty(device=device)
        module.load_state_dict(to_torch_state(config, weights), strict=True)
        module.reset_rope()
        return module

    def export(self, config: ModelConfig, module, tensors: dict) -> dict[str, np.ndarray]:
        """Canonical float32 arrays from ``tensors`` named like ``module``'s parameters
        (its state dict, or its gradients)."""
        from parallax.engines.torch.convert import from_torch_state

        return from_torch_state(config, tensors)

    def compile(self, torch, module, mode: str):
        """The callable the step runs: the whole module compiled by default."""
        return torch.compile(module, mode=mode)

    def compile_info(self, cuda_graphs: bool = False) -> str:
        """What torch.compile covers (``cuda_graphs``: whether ``graph`` ran too)."""
        return "torch.compile of the whole model (forward, loss; backward through AOTAutograd)"

    def graph(self, torch, module, sample_shape: tuple[int, int, int], device, attention) -> None:
        """Capture ``module``'s blocks in CUDA graphs for inputs of ``sample_shape`` (batch, seq,
        d_model) on ``device``; ``attention()`` is the engine's SDPA context. Only for recipes
        with ``Recipe.cuda_graphs`` (the engine's ``check`` refuses the others)."""
        raise RuntimeError(f"recipe {self.recipe.key} has no CUDA-graph capture; "
                           "the engine's check should have refused --cuda-graphs on")

    def graph_info(self, config: ModelConfig) -> str:
        """What ``graph`` captures, recorded as the run's ``framework.graph_scope``."""
        raise RuntimeError(f"recipe {self.recipe.key} has no CUDA-graph capture")

    def context(self, torch, device_type: str):
        """Entered around every forward pass (the backward runs in its recorded recipe)."""
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(device_type, dtype=self.compute_dtype(torch))

    def attention_info(self) -> str | None:
        """What runs the model's attention when it is the recipe's own and not torch's SDPA
        (TE's DotProductAttention), recorded as ``framework.recipe_attention``; None: SDPA, with
        the backend the engine chose (``framework.attention_backend``)."""
        return None

    def quantized(self, module) -> list[str]:
        """Names of the parameters whose GEMMs this recipe quantizes (the numerics guard checks
        their gradients every step); none for bf16."""
        return []


def bf16_native(torch, device) -> bool:
    """Whether bf16 arithmetic runs in hardware; raise where it cannot run at all."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return True
        if torch.cuda.is_bf16_supported(including_emulation=True):
            return False
        name = torch.cuda.get_device_name(device)
        raise ParallaxError(f"{name} cannot run bf16 in torch; use a GPU of compute capability 8.0 or newer")
    return cap.runs_natively("bf16", device.type)


def linear_weights(module, names: tuple[str, ...]) -> list[str]:
    """Parameter names of ``module`` ending in one of ``names`` (e.g. 'wqkv.weight')."""
    return [n for n, _ in module.named_parameters() if n.endswith(names)]
