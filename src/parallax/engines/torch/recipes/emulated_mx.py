"""Emulated MXFP8 and MXFP4 for torch: the plain model's block linears quantize-dequantize their
GEMM operands in OCP MX blocks with Parallax's native kernels (``torch.ops.parallax.mx_qdq``) and
multiply in bf16, under torch.compile. Which operands and how: ``spec/mx_scheme.py``, shared with
the JAX recipes of the same names; the hooks follow the emulated NVFP4 recipe's
(``emulated_nvfp4.py``), the linear is ``parallax.quant.torch_mx_linear.EmulatedMxLinear``.

Labelled emulated everywhere (``emulated=True``: ``precision.native`` False, MFU against the bf16
peak): the step time is the cost of emulating MX, never MX speed. Runs on the CPU and on any CUDA
GPU the kernels were built for.
"""

from __future__ import annotations

from parallax.spec import mx_scheme
from parallax.spec.recipe import Recipe
from parallax.engines.torch.recipes.emulated_nvfp4 import NATIVE_QUANT, EmulatedNvfp4Hooks

HOOKS = "parallax.engines.torch.recipes.emulated_mx:EmulatedMxHooks"
_FSDP = "float32 all-gather, MX quantize-dequantize per GEMM"

RECIPES = (
    Recipe(framework="torch", name="emulated-mxfp8", format="mxfp8", default=True, cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="MXFP8 (E4M3, E8M0 scales per 32, rounded-up scales) quantize-dequantize with Parallax's "
                   "native kernels, bf16 GEMMs (emulated)",
           params=mx_scheme.MXFP8.params(mx_scheme.SOURCE_MXFP8), fsdp=_FSDP),
    Recipe(framework="torch", name="emulated-mxfp8-floor", format="mxfp8", cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="emulated MXFP8 with the OCP specification's floor scale rule (the ablation of rceil)",
           params=mx_scheme.MXFP8_FLOOR.params(mx_scheme.SOURCE_MXFP8), fsdp=_FSDP),
    Recipe(framework="torch", name="emulated-mxfp4", format="mxfp4", default=True, cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="MXFP4 (E2M1, E8M0 scales per 32) quantize-dequantize with Parallax's native kernels, SR "
                   "gradients, RHT on wgrad, bf16 GEMMs (emulated), the last blocks in bf16",
           params=mx_scheme.MXFP4.params(mx_scheme.SOURCE_MXFP4), fsdp=_FSDP),
)


class EmulatedMxHooks(EmulatedNvfp4Hooks):
    """EmulatedNvfp4Hooks (its checks for the native kernels, the run seed) with MX linears."""

    @property
    def scheme(self) -> mx_scheme.MxScheme:
        return mx_scheme.from_params(self.recipe.params)

    def check(self, torch, device, run=None) -> None:
        super().check(torch, device, None)
        if run is not None:
            self.run_seed = run.seed
            mx_scheme.check_shapes(self.recipe.name, run)

    def details(self, torch) -> dict:
        return {**super().details(torch),
                "emulated": f"MX {self.scheme.elem} quantize-dequantize (parallax._native), bf16 GEMMs",
                "seed_scheme": "spec/nvfp4_scheme.py", "mx_scheme": "spec/mx_scheme.py"}

    def build(self, torch, config, weights, device):
        from parallax.engines.torch.recipes.base import TorchHooks
        from parallax.quant.torch_mx_linear import convert
        from parallax.spec import nvfp4_scheme

        module = TorchHooks.build(self, torch, config, weights, device)
        layers = nvfp4_scheme.quantized_layers(config.n_layers, self.fraction)
        self._quantized = convert(module, layers, self.run_seed, self.scheme)
        return module

    def compile_info(self, cuda_graphs: bool = False) -> str:
        return ("torch.compile of the whole model; the MX quantize-dequantize ops are opaque custom ops "
                "(parallax::mx_qdq, hadamard16) inside the compiled graphs")

    def quantized(self, module) -> list[str]:
        from parallax.quant.torch_mx_linear import EmulatedMxLinear

        return [f"{name}.weight" for name, m in module.named_modules() if isinstance(m, EmulatedMxLinear)]
