"""Emulated MXFP8 and MXFP4 for JAX: every block linear's Dense gets Parallax's MX
``dot_general`` (``parallax.quant.jax_mx_linear``): its GEMM operands quantize-dequantized in OCP
MX blocks by the native kernels through XLA's FFI, bf16 GEMMs. The numerics are
``spec/mx_scheme.py``'s, shared with the torch recipes of the same names, so both engines quantize
the same tensors to the same bits; the hooks are the emulated NVFP4 recipe's (``nvfp4.py``) with
the MX op and its ``mx_counter`` collection. Labelled emulated everywhere: the step time is the
cost of emulation, never MX speed.
"""

from __future__ import annotations

from parallax.spec import mx_scheme
from parallax.spec.recipe import Recipe
from parallax.engines.jax.recipes.nvfp4 import NATIVE_QUANT, EmulatedNvfp4Hooks

HOOKS = "parallax.engines.jax.recipes.mx:EmulatedMxHooks"

RECIPES = (
    Recipe(framework="jax", name="emulated-mxfp8", format="mxfp8", default=True, cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="MXFP8 (E4M3, E8M0 scales per 32, rounded-up scales) quantize-dequantize with Parallax's "
                   "native kernels (XLA FFI), bf16 GEMMs (emulated)",
           params=mx_scheme.MXFP8.params(mx_scheme.SOURCE_MXFP8)),
    Recipe(framework="jax", name="emulated-mxfp8-floor", format="mxfp8", cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="emulated MXFP8 with the OCP specification's floor scale rule (the ablation of rceil)",
           params=mx_scheme.MXFP8_FLOOR.params(mx_scheme.SOURCE_MXFP8)),
    Recipe(framework="jax", name="emulated-mxfp4", format="mxfp4", default=True, cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="MXFP4 (E2M1, E8M0 scales per 32) quantize-dequantize with Parallax's native kernels (XLA "
                   "FFI), SR gradients, RHT on wgrad, bf16 GEMMs (emulated), the last blocks in bf16",
           params=mx_scheme.MXFP4.params(mx_scheme.SOURCE_MXFP4)),
)


class EmulatedMxHooks(EmulatedNvfp4Hooks):
    """EmulatedNvfp4Hooks (the native-kernel checks, the run seed, the bf16 blocks) with MX Dense ops."""

    @property
    def scheme(self) -> mx_scheme.MxScheme:
        return mx_scheme.from_params(self.recipe.params)

    def check(self, device, run=None) -> None:
        super().check(device, None)
        if run is not None:
            mx_scheme.check_shapes(self.recipe.name, run)
            self.configure(run.seed, run.model_config.n_layers)

    def dot_general_cls(self):
        from parallax.quant.jax_mx_linear import dot_general_class

        if self._cls is None:
            self._cls = dot_general_class(self.run_seed, self.layers, self.scheme)
        return self._cls

    def extra_collections(self) -> tuple[str, ...]:
        from parallax.quant.jax_mx_linear import COLLECTION

        return (COLLECTION,) if self.layers else ()

    def details(self) -> dict:
        return {**super().details(),
                "emulated": f"MX {self.scheme.elem} quantize-dequantize (parallax._native, XLA FFI), bf16 GEMMs",
                "mx_scheme": "spec/mx_scheme.py"}
