"""TransformerEngine for JAX: the Flax blocks built from ``transformer_engine.jax.flax`` modules
(``engines/jax/te_model.py``), in bf16 or under TE's autocast (``TeJaxHooks``).

- ``te-bf16``: the TE modules with fp8 off: separates "what fp8 buys inside TE" from "TE vs
  our Flax model";
- ``te-fp8-delayed``: ``DelayedScaling(fp8_format=Format.HYBRID)`` with the torch TE recipe's
  amax history (1024, "max"), so the two frameworks' TE cells run the same recipe.
Embedding and lm_head stay bf16 (our Flax code). TE's JAX extension is built from source on the
GPU machine (``../shared/tools/gpu-carry``); measured on the H200: docs/results/2026-12-02-h200-b/.

The library is the JAX extension (``transformer_engine_jax``), which the ``te`` extra (TE for
PyTorch) does not install: the ``te-jax`` extra does.

The hooks (``TeJaxHooks``): the TE model of ``engines/jax/te_model.py``, in bf16 or under
TE's autocast with ``DelayedScaling``.

As in TE for PyTorch (``engines/torch/recipes/te.py``): each block linear costs three GEMMs
(forward, input gradient, weight gradient), all fp8 under the recipe; ``Format.HYBRID`` puts x
and the kernel in E4M3 and the output gradient in E5M2; ``DelayedScaling`` takes each
operand's scale from the largest |value| of the last ``amax_history_len`` steps.

How TE's JAX API carries that state (TE 2.20, ``transformer_engine/jax/quantize/helper.py``):
``autocast(enabled, recipe, mesh_resource)`` sets a global recipe that TE's Flax modules read
when they are *initialised and traced* (not when the compiled step runs), so the engine builds,
initialises and compiles the model inside ``context()``. Under DelayedScaling every GEMM's
quantizers keep Flax variables in the collection ``fp8_metas`` (``NVTE_FP8_COLLECTION_NAME``):
``{x,kernel,grad}{postfix}_scale`` [1] and ``..._amax_history`` [amax_history_len]. TE's
custom VJPs return their next values as their 'gradients' (TE's ``examples/jax/encoder``
replaces the collection by its gradient each step), which is the training step's convention
for a recipe's extra collections (``engines/jax/runtime.py``). ``mesh_resource`` must be set
even on one GPU (TE asserts a global MeshResource); an empty ``MeshResource()`` means no
sharding. ``te-bf16`` enters the same context with fp8 off: no collection, the kernels cast
to bf16, TE's RMSNorm and GEMMs unfused.
"""

from __future__ import annotations

from parallax.spec.recipe import Backend, Recipe
from parallax.engines.torch.recipes.te import AMAX_COMPUTE_ALGO, AMAX_HISTORY_LEN, FP8_MIN_CC
from parallax.plan.envinfo import module_version, older, package_version
from parallax.errors import ParallaxError
from parallax.engines.jax.recipes.base import JaxHooks
from parallax.engines.te_shapes import FP8_DIM_MULTIPLE, FP8_TOKENS_MULTIPLE, check_shapes  # noqa: F401


TE_JAX = Backend("transformer_engine.jax", distributions=(("transformer_engine_jax",),),
                 module="transformer_engine.jax", extra="te-jax", min_version="2.9")  # autocast(recipe=...): 2.9+
HOOKS = "parallax.engines.jax.recipes.te:TeJaxHooks"

RECIPES = (
    Recipe(framework="jax", name="te-bf16", format="bf16", backend=TE_JAX, hooks=HOOKS, min_cc=(8, 0),
           summary="TransformerEngine JAX modules in bf16 (no fp8 autocast)",
           params={"te_recipe": None}),
    Recipe(framework="jax", name="te-fp8-delayed", format="fp8", backend=TE_JAX, hooks=HOOKS, min_cc=FP8_MIN_CC,
           summary="TransformerEngine JAX LayerNormDenseGeneral/DenseGeneral/LayerNormMLP under "
                   "DelayedScaling(HYBRID)",
           params={"te_recipe": "DelayedScaling", "fp8_format": "HYBRID",
                   "amax_history_len": AMAX_HISTORY_LEN, "amax_compute_algo": AMAX_COMPUTE_ALGO,
                   "collection": "fp8_metas"}),
)


def import_te():
    """``transformer_engine.jax`` (tests replace this function with a fake)."""
    import transformer_engine.jax as te

    return te


def import_te_recipes():
    """``transformer_engine.common.recipe`` (tests replace this function with a fake)."""
    from transformer_engine.common import recipe

    return recipe


def te_version(te) -> str | None:
    """TE's ``__version__``, else the installed distribution's (the JAX extension is often built
    from its sdist beside the core wheel)."""
    return module_version(te, ("transformer_engine", "transformer_engine_jax"))


class TeJaxHooks(JaxHooks):
    def __init__(self, recipe):
        super().__init__(recipe)
        self.fp8 = recipe.params.get("te_recipe") is not None
        self._te_recipe = None

    def te_recipe(self):
        """The ``transformer_engine.common.recipe`` object of this recipe (None for te-bf16)."""
        if self.fp8 and self._te_recipe is None:
            recipes, params = import_te_recipes(), self.recipe.params
            if params["te_recipe"] != "DelayedScaling":
                raise ParallaxError(f"recipe '{self.recipe.name}': TE JAX recipe {params['te_recipe']} "
                                    "is not wired in Parallax (DelayedScaling is)")
            self._te_recipe = recipes.DelayedScaling(
                fp8_format=getattr(recipes.Format, params["fp8_format"]),
                amax_history_len=params["amax_history_len"], amax_compute_algo=params["amax_compute_algo"])
        return self._te_recipe

    # ---- before JAX starts, and before any GPU work
    def prepare(self) -> None:
        # TE loads libcudnn when it is imported, from CUDNN_HOME/CUDNN_PATH/CUDA_HOME before
        # pip's copy: point it at pip's (the one JAX's CUDA plugin uses), as for TE torch.
        from parallax.engines.torch.recipes.te import prefer_torch_cudnn

        prefer_torch_cudnn()

    def check(self, device, run=None) -> None:
        te = import_te()
        version, minimum = te_version(te), self.recipe.backend.min_version
        if version is None or older(version, minimum):
            raise ParallaxError(f"recipe '{self.recipe.name}' needs TransformerEngine {minimum}+ for JAX "
                                f"(its autocast(recipe=...)); this is {version or 'an unknown version'}: "
                                f"pip install -U 'slm-parallax[{self.recipe.backend.extra}]'")
        if not self.fp8:
            return
        if run is not None:
            self.check_shapes(run)
        quantize = te.quantize
        supported, reason = quantize.is_scaling_mode_supported(quantize.ScalingMode.DELAYED_TENSOR_SCALING,
                                                               gpu_id=getattr(device, "id", 0))
        if not supported:
            raise ParallaxError(f"recipe '{self.recipe.name}': TransformerEngine cannot run fp8 on "
                                f"{device}: {reason} (pick a bf16 recipe: parallax check-env lists them)")

    def check_parallel(self, run) -> None:
        # TE-JAX partitions its ops itself, from a MeshResource naming the mesh axes; Parallax
        # enters autocast with an empty one (one device), and several devices are not wired.
        raise ParallaxError(f"recipe '{self.recipe.name}' runs on one GPU in Parallax (TE-JAX's MeshResource "
                            "for data parallel is not wired); use --gpus 1 or a Flax recipe (bf16, flax-fp8-*)")

    def check_shapes(self, run) -> None:
        check_shapes(self.recipe.name, run)

    def details(self) -> dict:
        te = import_te()
        info = {**super().details(), "te_version": te_version(te), "te_jax_extension": package_version("transformer_engine_jax"),
                "te_modules": "LayerNormDenseGeneral (RMSNorm+QKV), DenseGeneral (output), "
                              "LayerNormMLP (RMSNorm+SwiGLU)",
                "te_recipe": None, "collections": list(self.extra_collections()),
                "quantized": "qkv, wo, mlp wi/wo kernels of every layer" if self.fp8 else "nothing",
                "not_quantized": "embedding and lm_head in bf16"}
        recipe = self.te_recipe()
        if recipe is not None:
            info["te_recipe"] = type(recipe).__name__
            info["fp8_format"] = recipe.fp8_format.name
            info["amax_history_len"] = recipe.amax_history_len
            info["amax_compute_algo"] = recipe.amax_compute_algo
        return info

    # ---- the model
    def model(self, config, dtype, attention: str):
        from parallax.engines.jax.te_model import TeLlama

        return TeLlama(config, dtype=dtype, attention=attention)

    def to_params(self, weights, config):
        from parallax.engines.jax.te_model import to_te_flax

        return to_te_flax(weights, config)

    def from_params(self, params, config) -> dict:
        from parallax.engines.jax.te_model import from_te_flax

        return from_te_flax(params, config)

    def quantized_kernels(self, config) -> list[tuple[tuple[str, ...], str]]:
        from parallax.engines.jax.te_model import quantized_kernels

        return quantized_kernels(config) if self.fp8 else []

    def extra_collections(self) -> tuple[str, ...]:
        return (import_te().quantize.NVTE_FP8_COLLECTION_NAME,) if self.fp8 else ()

    def context(self):
        te = import_te()
        return te.autocast(enabled=self.fp8, recipe=self.te_recipe(), mesh_resource=te.MeshResource())
