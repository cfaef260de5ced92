"""Emulated NVFP4 for torch: the plain model's block linears quantize-dequantize their GEMM
operands with Parallax's native kernels (``torch.ops.parallax.*``) and multiply in bf16, under
torch.compile. The numerics, the layers kept in bf16 and the seed scheme are those of
``spec/nvfp4_scheme.py``, shared with the JAX recipe of the same name; the hooks are
``EmulatedNvfp4Hooks`` below.

Labelled emulated everywhere (``emulated=True``: ``precision.native`` False, MFU against the
bf16 peak): its step time is the cost of emulating NVFP4, never NVFP4 speed. Runs on the CPU
(the native CPU implementation) and on any CUDA GPU the kernels were built for.

The hooks (``EmulatedNvfp4Hooks``): the plain model built as
for bf16, then the block linears of the quantized blocks swapped for
``parallax.quant.torch_nvfp4_linear.EmulatedNvfp4Linear`` (as torchao swaps in its
Float8Linear), then torch.compile of the whole model. The weights keep their Parameters and
names, so the canonical weights go in and out through the plain model's converters.
"""

from __future__ import annotations

from parallax.spec import nvfp4_scheme
from parallax.spec.recipe import Backend, Recipe
from parallax.errors import ParallaxError
from parallax.engines.torch.recipes.base import TorchHooks


NATIVE_QUANT = Backend("parallax._native.quant", module="parallax._native")
HOOKS = "parallax.engines.torch.recipes.emulated_nvfp4:EmulatedNvfp4Hooks"

RECIPES = (
    Recipe(framework="torch", name="emulated-nvfp4", format="nvfp4", default=True, cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="NVFP4 quantize-dequantize with Parallax's native kernels, bf16 GEMMs (emulated), "
                   "the last blocks in bf16",
           params=dict(nvfp4_scheme.PARAMS), fsdp="float32 all-gather, NVFP4 quantize-dequantize per GEMM"),
    Recipe(framework="torch", name="emulated-nvfp4-all", format="nvfp4", cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="emulated NVFP4 in every block (no bf16 blocks: the ablation of the last-blocks rule)",
           params=dict(nvfp4_scheme.PARAMS_ALL), fsdp="float32 all-gather, NVFP4 quantize-dequantize per GEMM"),
)


class EmulatedNvfp4Hooks(TorchHooks):
    def __init__(self, recipe):
        super().__init__(recipe)
        self.run_seed = 0

    @property
    def fraction(self) -> float:
        return float(self.recipe.params["bf16_last_fraction"])

    # ---- before any GPU work
    def check(self, torch, device, run=None) -> None:
        from parallax.quant import available_bindings

        have = available_bindings()
        if not have["torch_op"]:
            raise ParallaxError(f"recipe '{self.recipe.name}' needs parallax's native quantization kernels; this "
                                "installation has no parallax._native (reinstall: pip install -e .)")
        if device.type == "cuda" and not have["cuda"]:
            raise ParallaxError(f"recipe '{self.recipe.name}': parallax._native was built without CUDA kernels; "
                                "rebuild on a machine with nvcc (pip install --no-build-isolation -e .) or use --device cpu")
        if run is not None:
            self.run_seed = run.seed
            nvfp4_scheme.check_shapes(self.recipe.name, run)

    def native(self, torch, device) -> bool:
        return False

    def details(self, torch) -> dict:
        return {**super().details(torch), "emulated": "NVFP4 quantize-dequantize (parallax._native), bf16 GEMMs",
                "run_seed": self.run_seed, "seed_scheme": "spec/nvfp4_scheme.py"}

    # ---- the model
    def build(self, torch, config, weights, device):
        from parallax.quant.torch_nvfp4_linear import convert

        module = super().build(torch, config, weights, device)
        layers = nvfp4_scheme.quantized_layers(config.n_layers, self.fraction)
        self._quantized = convert(module, layers, self.run_seed)
        return module

    def compile_info(self, cuda_graphs: bool = False) -> str:
        return ("torch.compile of the whole model; the NVFP4 quantize-dequantize ops are opaque custom ops "
                "(parallax::nvfp4_qdq, nvfp4_qdq_counter) inside the compiled graphs")

    def quantized(self, module) -> list[str]:
        from parallax.quant.torch_nvfp4_linear import EmulatedNvfp4Linear

        return [f"{name}.weight" for name, m in module.named_modules() if isinstance(m, EmulatedNvfp4Linear)]
