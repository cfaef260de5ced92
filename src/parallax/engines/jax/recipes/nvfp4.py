"""Emulated NVFP4 for JAX: every block linear's Dense gets Parallax's NVFP4 ``dot_general``
(``parallax.quant.jax_nvfp4_linear``): its GEMM operands quantize-dequantized by the native
kernels through XLA's FFI, bf16 GEMMs. The numerics, the blocks kept in bf16 and the seed scheme
are ``spec/nvfp4_scheme.py``'s, shared with the torch recipe of the same name, so both
engines quantize the same tensors to the same bits. Labelled emulated everywhere: its step time
is the cost of emulation, never NVFP4 speed. TE-JAX's NVFP4 is not wired (``te.py``).

The hooks (``EmulatedNvfp4Hooks``): a dot_general class for the block
linears (``parallax.quant.jax_nvfp4_linear``) that knows the run's seed and which blocks it
quantizes, and the ``nvfp4_counter`` collection that carries each linear's step counter.
"""

from __future__ import annotations

from parallax.spec import nvfp4_scheme
from parallax.spec.recipe import Backend, Recipe
from parallax.errors import ParallaxError
from parallax.engines.jax.recipes.base import JaxHooks


NATIVE_QUANT = Backend("parallax._native.quant", module="parallax._native")
HOOKS = "parallax.engines.jax.recipes.nvfp4:EmulatedNvfp4Hooks"

RECIPES = (
    Recipe(framework="jax", name="emulated-nvfp4", format="nvfp4", default=True, cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="NVFP4 quantize-dequantize with Parallax's native kernels (XLA FFI), bf16 GEMMs (emulated), "
                   "the last blocks in bf16",
           params=dict(nvfp4_scheme.PARAMS)),
    Recipe(framework="jax", name="emulated-nvfp4-all", format="nvfp4", cpu=True, emulated=True,
           backend=NATIVE_QUANT, hooks=HOOKS,
           summary="emulated NVFP4 in every block (no bf16 blocks: the ablation of the last-blocks rule)",
           params=dict(nvfp4_scheme.PARAMS_ALL)),
)


class EmulatedNvfp4Hooks(JaxHooks):
    def __init__(self, recipe):
        super().__init__(recipe)
        self.run_seed, self.layers, self._cls = 0, (), None

    def check(self, device, run=None) -> None:
        from parallax.quant import available_bindings

        if not available_bindings()["jax_ffi"]:
            raise ParallaxError(f"recipe '{self.recipe.name}' needs parallax's JAX FFI handlers; this build has "
                                "none (reinstall with jax installed: pip install --no-deps -e .)")
        if device.platform == "gpu" and not available_bindings()["cuda"]:
            raise ParallaxError(f"recipe '{self.recipe.name}': parallax._native was built without CUDA kernels; "
                                "rebuild with nvcc or use --device cpu")
        if run is not None:
            nvfp4_scheme.check_shapes(self.recipe.name, run)
            self.configure(run.seed, run.model_config.n_layers)

    def configure(self, run_seed: int, n_layers: int) -> None:
        self.run_seed = run_seed
        self.layers = nvfp4_scheme.quantized_layers(n_layers, float(self.recipe.params["bf16_last_fraction"]))
        self._cls = None

    def native(self, platform: str, compute_capability) -> bool:
        return False

    def dot_general_cls(self):
        from parallax.quant.jax_nvfp4_linear import dot_general_class

        if self._cls is None:
            self._cls = dot_general_class(self.run_seed, self.layers)
        return self._cls

    def extra_collections(self) -> tuple[str, ...]:
        from parallax.quant.jax_nvfp4_linear import COLLECTION

        return (COLLECTION,) if self.layers else ()

    def details(self) -> dict:
        return {**super().details(), "emulated": "NVFP4 quantize-dequantize (parallax._native, XLA FFI), bf16 GEMMs",
                "run_seed": self.run_seed, "quantized_layers": list(self.layers),
                "seed_scheme": "spec/nvfp4_scheme.py"}
