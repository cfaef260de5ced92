"""TransformerEngine for PyTorch: the blocks built from TE modules, bf16 or fp8 under TE's autocast.

Recipes (``transformer_engine.common.recipe``, REFERENCE.md §3):
- ``te-bf16``: the TE modules in bf16, no fp8: separates "what fp8 buys inside TE" from
  "TE vs plain PyTorch";
- ``te-fp8-delayed``: ``DelayedScaling(fp8_format=Format.HYBRID)`` — E4M3 forward, E5M2
  backward, scales from an amax history (the spec's fp8 recipe, so the torch default);
- ``te-fp8-current``: ``Float8CurrentScaling(fp8_format=Format.HYBRID)`` — scales from the
  tensor's own amax, each GEMM;
- ``te-fp8-dpa``: ``te-fp8-delayed`` with ``fp8_dpa=True`` and the blocks' attention in TE's
  ``DotProductAttention``: QKᵀ and PV (and their gradients) in FP8 too, through cuDNN's FP8 fused
  attention. On Hopper TE and cuDNN train it only at head_dim 128, so it refuses llama-100m (heads
  of 64) in one line before any GPU work and runs llama-100m-hd128 (docs/fp8-attention.md); on
  Blackwell heads up to 128 wide. Not yet run on hardware;
- ``te-nvfp4``: ``NVFP4BlockScaling()`` — TE's full NVFP4 training recipe (2D 16×16 weight
  scaling, RHT on the wgrad inputs, stochastic rounding of gradients) on compute capability
  10.x; on 12.x (RTX PRO 6000, RTX 50xx) the variant TE supports there, RHT and SR off, with a
  warning (``nvfp4_variant`` below; REFERENCE.md §1). The default of ``--precision nvfp4``
  on 10.0+ (``default_min_cc``); elsewhere that is ``emulated-nvfp4``. Not yet run on hardware;
- ``te-mxfp8``: ``MXFP8BlockScaling(fp8_format=E4M3)`` — E4M3 operands with an E8M0 scale per 32
  elements (the OCP MXFP8 format; TE's scales round up, as arXiv 2506.08027 recommends), on compute
  capability 10.x only: refused on Hopper (no MX tensor cores) and on 12.0+ (TE: "MXFP8 ... is not
  supported on 12.0+ architectures yet") in one line before any GPU work; ``--precision mxfp8`` picks
  ``emulated-mxfp8`` (``emulated_mx.py``), the same format emulated. Not yet run on hardware.
The model is ``engines/torch/te_model.py``; embedding and lm_head stay bf16 (plain torch).
``cuda_graphs=True``: the engine can replay the blocks as CUDA graphs (``te.make_graphed_callables``,
``TransformerEngineHooks.graph``), on by default on a GPU (``--cuda-graphs``).

The hooks (``TransformerEngineHooks``): the TE model of ``engines/torch/te_model.py``, in bf16 or
under TE's fp8 autocast.

A linear layer costs three GEMMs per step: the forward y = x·Wᵀ, and in the backward the input
gradient dx = dy·W and the weight gradient dW = dyᵀ·x. An fp8 recipe feeds all three to the
tensor cores in fp8, each operand with a float32 scale. ``Format.HYBRID`` picks the format by
role: E4M3 (3 mantissa bits, max 448) for x and W, which need precision; E5M2 (2 mantissa bits,
max 57344) for the gradients dy, which need range. The recipes differ in where the scale comes
from: ``DelayedScaling`` from the largest |value| seen over the last ``amax_history_len`` steps
(one step late, no extra pass over the tensor), ``Float8CurrentScaling`` from the tensor's own
amax every GEMM (one more reduction, no history to go stale).

fp8 covers the four TE linears of every block (QKV, output, fc1, fc2), and with ``te-fp8-dpa``
its attention's two batched GEMMs (QKᵀ, PV; softmax in float32 inside cuDNN's kernel); embedding,
lm_head and the loss stay bf16/float32. ``te-bf16`` runs the same modules with no fp8 autocast, so
"TE vs plain torch" and "what fp8 buys inside TE" are separate comparisons. TE's modules are not
torch.compiled (DelayedScaling does not support it); the pure-torch glue is. Run eagerly, TE's
blocks leave the step host-bound (launches and the recipe's host bookkeeping outlast the kernels:
docs/results/2026-12-01-h200-b/profiles/), so by default (``--cuda-graphs auto`` on a GPU) ``graph`` captures each block, forward and backward, in CUDA graphs that every
training step replays.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os

from parallax.spec.recipe import Backend, Recipe
from parallax.plan.envinfo import module_version, older
from parallax.errors import ParallaxError
from parallax.engines.torch.recipes.base import TorchHooks, linear_weights
from parallax.engines.te_shapes import FP8_DIM_MULTIPLE, FP8_TOKENS_MULTIPLE, check_fp8_attention, check_shapes  # noqa: F401


TE = Backend("transformer_engine", distributions=(("transformer_engine_torch",),),
             module="transformer_engine.pytorch", extra="te", min_version="2.8")
HOOKS = "parallax.engines.torch.recipes.te:TransformerEngineHooks"
FP8_MIN_CC = (8, 9)  # TE's is_fp8_available(): Ada, Hopper, Blackwell
FP8_ATTENTION_MIN_CC = (9, 0)  # TE's FP8 fused attention: sm_arch >= 90 (te_shapes.fp8_attention_refusal)
NVFP4_MIN_CC = (10, 0)  # TE's is_nvfp4_available(): Blackwell
MXFP8_MIN_CC, MXFP8_BELOW_CC = (10, 0), (12, 0)  # TE's MXFP8: 10.x only (REFERENCE.md §1: refused on 12.0+)
AMAX_HISTORY_LEN = 1024
AMAX_COMPUTE_ALGO = "max"

RECIPES = (
    Recipe(framework="torch", name="te-bf16", format="bf16", backend=TE, hooks=HOOKS, min_cc=(8, 0),
           cuda_graphs=True,
           summary="TransformerEngine modules in bf16 (no fp8 autocast)",
           params={"te_recipe": None}),
    Recipe(framework="torch", name="te-fp8-delayed", format="fp8", default=True, backend=TE, hooks=HOOKS,
           min_cc=FP8_MIN_CC, cuda_graphs=True,
           summary="TransformerEngine DelayedScaling(HYBRID): E4M3 forward, E5M2 backward, amax history",
           params={"te_recipe": "DelayedScaling", "fp8_format": "HYBRID",
                   "amax_history_len": AMAX_HISTORY_LEN, "amax_compute_algo": AMAX_COMPUTE_ALGO}),
    Recipe(framework="torch", name="te-fp8-current", format="fp8", backend=TE, hooks=HOOKS,
           min_cc=FP8_MIN_CC, cuda_graphs=True,
           summary="TransformerEngine Float8CurrentScaling(HYBRID): per-tensor scales from the current amax",
           params={"te_recipe": "Float8CurrentScaling", "fp8_format": "HYBRID"}),
    Recipe(framework="torch", name="te-fp8-dpa", format="fp8", backend=TE, hooks=HOOKS,
           min_cc=FP8_ATTENTION_MIN_CC, cuda_graphs=True,
           summary="te-fp8-delayed with FP8 attention (TE DotProductAttention, fp8_dpa): head_dim 128 on Hopper; "
                   "not yet run on hardware",
           params={"te_recipe": "DelayedScaling", "fp8_format": "HYBRID", "amax_history_len": AMAX_HISTORY_LEN,
                   "amax_compute_algo": AMAX_COMPUTE_ALGO, "fp8_dpa": True, "attention": "te"},
           notes=("Hopper: head_dim 128 only (llama-100m-hd128, llama-860m); refuses llama-100m before any GPU work",)),
    Recipe(framework="torch", name="te-nvfp4", format="nvfp4", default_min_cc=NVFP4_MIN_CC, backend=TE,
           hooks=HOOKS, min_cc=NVFP4_MIN_CC,
           summary="TransformerEngine NVFP4BlockScaling (RHT, stochastic rounding, 2D weights); not yet run on hardware",
           params={"te_recipe": "NVFP4BlockScaling", "disable_rht": False, "disable_stochastic_rounding": False,
                   "disable_2d_quantization": False},
           notes=("12.x: RHT and stochastic rounding off (TE PR #3195), TransformerEngine >= 2.19 (PR #3281)",)),
    Recipe(framework="torch", name="te-mxfp8", format="mxfp8", backend=TE, hooks=HOOKS, min_cc=MXFP8_MIN_CC,
           below_cc=MXFP8_BELOW_CC,
           summary="TransformerEngine MXFP8BlockScaling (E4M3, an E8M0 scale per 32) on compute capability 10.x; "
                   "not yet run on hardware",
           params={"te_recipe": "MXFP8BlockScaling", "fp8_format": "E4M3"},
           notes=("10.x only: Hopper has no MX tensor cores, TE refuses MXFP8 on 12.0+; elsewhere emulated-mxfp8",)),
)


# Forward+backward runs of every block before its capture (TE's default): they let lazy
# initialisation (cuBLAS workspaces, torch.compile of the split, TE's fp8 metadata) happen
# outside the graph. TE restores the fp8 scaling state afterwards, so they leave no trace.
GRAPH_WARMUP_ITERS = 3


def import_te():
    prefer_torch_cudnn()
    import transformer_engine.pytorch as te

    return te


def prefer_torch_cudnn() -> None:
    """Make TE use pip's cuDNN (the one torch ships with), unless the user chose one
    (CUDNN_HOME/CUDNN_PATH).

    TE loads ``libcudnn.so`` from CUDNN_HOME, CUDNN_PATH, CUDA_HOME, then the system's search
    path, and only then from pip's ``nvidia-cudnn``. On a machine that also has a system cuDNN
    the process then holds two versions, and TE fails to load (``libcudnn_cnn.so.9: undefined
    symbol ... libcudnn_graph.so.9``) or torch refuses the runtime version. So: CUDNN_PATH points
    at pip's copy and its libraries are loaded first, globally, so that every later
    ``dlopen("libcudnn*.so.9")`` (TE's, torch's) gets the same version. A CUDNN_PATH that is
    pip's copy (this function sets it, and a child process inherits it) is not the user's
    choice: the libraries are loaded again in that process too; without that, a child saw
    CUDNN_PATH, loaded nothing, and TE's JAX extension then failed on the system's
    libcudnn_heuristic beside pip's libcudnn_graph (docs/results/2026-12-03-h200/)."""
    from parallax.native.gpu import pip_cudnn_folder

    folder = pip_cudnn_folder()
    chosen = os.environ.get("CUDNN_HOME") or os.environ.get("CUDNN_PATH")
    if folder is None or (chosen and os.path.realpath(chosen) != os.path.realpath(os.path.dirname(folder))):
        return
    os.environ["CUDNN_PATH"] = os.path.dirname(folder)
    for lib in sorted(glob.glob(os.path.join(folder, "libcudnn*.so.9")), key=lambda p: "graph" not in p):
        try:
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue  # an optional sub-library this machine cannot load; TE reports what it needs


def fp8_support(te) -> tuple[bool, str]:
    """TE's own answer (available, reason): ``te.is_fp8_available`` in newer releases,
    ``transformer_engine.pytorch.fp8.check_fp8_support`` in older ones."""
    probe = getattr(te, "is_fp8_available", None)
    if probe is not None:
        return probe(return_reason=True)
    from transformer_engine.pytorch.fp8 import check_fp8_support

    return check_fp8_support()


def graph_precision_arguments(make_graphed_callables, recipe) -> dict:
    """The precision arguments of ``te.make_graphed_callables`` for ``recipe`` (None: bf16, no
    quantization), named as the installed TE names them. TE 2.9 renamed them (``fp8_enabled``
    → ``enabled``, ``fp8_recipe`` → ``recipe``, ``fp8_weight_caching`` →
    ``cache_quantized_params``) and keeps the old names as deprecated aliases that warn; 2.8
    has only the old ones. Weight caching stays off: it needs ``is_first_microbatch`` at every
    call and is for gradient accumulation over micro-batches, which we do not do."""
    import inspect

    enabled = recipe is not None
    if "enabled" in inspect.signature(make_graphed_callables).parameters:
        return {"enabled": enabled, "recipe": recipe, "cache_quantized_params": False}
    return {"fp8_enabled": enabled, "fp8_recipe": recipe, "fp8_weight_caching": False}


def te_version() -> str | None:
    """TE's own ``__version__``, else that of the installed distribution (the torch extension
    is often built from its sdist without the ``transformer_engine`` meta-package). Importing it
    loads TE's core library, and with it a cuDNN: pip's, as for every TE import here."""
    prefer_torch_cudnn()
    import transformer_engine

    return module_version(transformer_engine, ("transformer_engine", "transformer_engine_torch"))


NVFP4_RTX_MIN_TE = "2.19"  # TE PR #3281: before it, NVFP4 on sm_120/121 trained on all-zero gradients
NVFP4_RTX_OFF = ("disable_rht", "disable_stochastic_rounding")


def nvfp4_variant(params: dict, compute_capability, version: str | None) -> tuple[dict, str | None]:
    """(NVFP4BlockScaling keyword arguments, warning or None) on a GPU of ``compute_capability``
    with TE ``version`` (REFERENCE.md §1). 10.x (and 11.0): the full recipe of ``params``. 12.x:
    TE supports only the forward pass or training without RHT and stochastic rounding there (TE
    PR #3195, issues #2255, #2956), so both are turned off and the warning says so; TE before
    2.19 is refused (PR #3281: its default NVFP4 recipe on sm_120/121 silently trained on
    all-zero gradients). Below 10.0 a ParallaxError naming the emulated recipe."""
    from parallax.plan.hardware import cc_string, cc_tuple, family

    cc = cc_tuple(compute_capability)
    kwargs = {k: bool(params[k]) for k in ("disable_rht", "disable_stochastic_rounding", "disable_2d_quantization")}
    if cc is None or cc < (10, 0):
        raise ParallaxError(f"recipe 'te-nvfp4' needs compute capability 10.0+ (Blackwell); this GPU is "
                            f"{cc_string(compute_capability) or 'unknown'}: use --recipe emulated-nvfp4 "
                            "(or --precision nvfp4, which picks it here)")
    if cc[0] != 12:
        return kwargs, None
    if version is None or older(version, NVFP4_RTX_MIN_TE):
        raise ParallaxError(f"recipe 'te-nvfp4' on {family(cc)} ({cc_string(cc)}) needs TransformerEngine 2.19+ "
                            f"(PR #3281: older releases trained NVFP4 on all-zero gradients there); found "
                            f"{version or 'an unknown version'}: upgrade TE or use --recipe emulated-nvfp4")
    changed = [k for k in NVFP4_RTX_OFF if not kwargs[k]]
    kwargs.update({k: True for k in NVFP4_RTX_OFF})
    warning = (f"te-nvfp4 on compute capability {cc_string(cc)}: TransformerEngine supports NVFP4 training there "
               f"only without RHT and stochastic rounding (TE PR #3195), so this run sets "
               f"{', '.join(changed) or 'nothing new'} (recorded as te_nvfp4_variant); the full recipe needs 10.x")
    return kwargs, warning


class TransformerEngineHooks(TorchHooks):
    def __init__(self, recipe):
        super().__init__(recipe)
        self.fp8 = recipe.params.get("te_recipe") is not None
        self.nvfp4 = recipe.params.get("te_recipe") == "NVFP4BlockScaling"
        self.mxfp8 = recipe.params.get("te_recipe") == "MXFP8BlockScaling"
        self.fp8_dpa = bool(recipe.params.get("fp8_dpa"))
        self.attention = recipe.params.get("attention", "sdpa")  # te_model.ATTENTIONS
        self._te_recipe = None
        self.nvfp4_kwargs, self.nvfp4_warning = None, None

    def te_recipe(self):
        """The ``transformer_engine.common.recipe`` object of this recipe (None for te-bf16)."""
        if self.fp8 and self._te_recipe is None:
            from transformer_engine.common import recipe as te_recipes

            params = self.recipe.params
            if self.nvfp4:
                if self.nvfp4_kwargs is None:
                    raise RuntimeError("te-nvfp4: check() decides the recipe's variant for the device first")
                self._te_recipe = te_recipes.NVFP4BlockScaling(**self.nvfp4_kwargs)
                return self._te_recipe
            fmt = getattr(te_recipes.Format, params["fp8_format"])
            if params["te_recipe"] == "DelayedScaling":
                dpa = {"fp8_dpa": True} if self.fp8_dpa else {}  # TE's own default is False
                self._te_recipe = te_recipes.DelayedScaling(
                    fp8_format=fmt, amax_history_len=params["amax_history_len"],
                    amax_compute_algo=params["amax_compute_algo"], **dpa)
            else:
                self._te_recipe = getattr(te_recipes, params["te_recipe"])(fp8_format=fmt)
        return self._te_recipe

    # ---- before any GPU work
    def check(self, torch, device, run=None) -> None:
        if not self.fp8:
            return
        if run is not None:
            self.check_shapes(run)
            if self.fp8_dpa and device.type == "cuda":
                check_fp8_attention(self.recipe.name, run, "{}.{}".format(*torch.cuda.get_device_capability(device)))
        if self.nvfp4:
            return self.check_nvfp4(torch, device)
        if self.mxfp8:
            return self.check_mxfp8(torch, device)
        available, reason = fp8_support(import_te())
        if not available:
            raise ParallaxError(f"recipe '{self.recipe.name}': TransformerEngine cannot run fp8 on "
                                f"{device}: {reason} (pick a bf16 recipe: parallax check-env lists them)")

    def check_nvfp4(self, torch, device) -> None:
        """The NVFP4BlockScaling variant for this GPU (``nvfp4_variant``), then TE's own probe."""
        import warnings

        cc = "{}.{}".format(*torch.cuda.get_device_capability(device)) if device.type == "cuda" else None
        self.nvfp4_kwargs, self.nvfp4_warning = nvfp4_variant(self.recipe.params, cc, te_version())
        if self.nvfp4_warning:
            warnings.warn(self.nvfp4_warning, UserWarning, stacklevel=2)
        te = import_te()
        probe = getattr(te, "is_nvfp4_available", None)
        if probe is None:
            raise ParallaxError(f"recipe '{self.recipe.name}': TransformerEngine {te_version()} has no NVFP4 "
                                "(is_nvfp4_available); install TE 2.8+ or use --recipe emulated-nvfp4")
        available, reason = probe(return_reason=True)
        if not available:
            raise ParallaxError(f"recipe '{self.recipe.name}': TransformerEngine cannot run NVFP4 on {device}: "
                                f"{reason} (use --recipe emulated-nvfp4)")

    def check_mxfp8(self, torch, device) -> None:
        """Compute capability 10.x (one line elsewhere, before any GPU work), then TE's own probe."""
        cc = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        if cc is None or not MXFP8_MIN_CC <= tuple(cc) < MXFP8_BELOW_CC:
            where = "{}.{}".format(*cc) if cc else "no GPU"
            raise ParallaxError(f"recipe '{self.recipe.name}' needs compute capability 10.x (Blackwell B200/B300; "
                                f"TE refuses MXFP8 on 12.0+); this device is {where}: use --recipe emulated-mxfp8")
        probe = getattr(import_te(), "is_mxfp8_available", None)
        available, reason = probe(return_reason=True) if probe else (False, "this TE has no is_mxfp8_available")
        if not available:
            raise ParallaxError(f"recipe '{self.recipe.name}': TransformerEngine cannot run MXFP8 on {device}: "
                                f"{reason} (use --recipe emulated-mxfp8)")

    def check_shapes(self, run) -> None:
        if self.mxfp8:
            from parallax.spec.mx_scheme import check_shapes as check_mx_shapes

            return check_mx_shapes(self.recipe.name, run)
        multiple = FP8_DIM_MULTIPLE if self.nvfp4 else FP8_TOKENS_MULTIPLE  # NVFP4: 16 everywhere
        check_shapes(self.recipe.name, run, multiple, "TE")

    def details(self, torch) -> dict:
        info = {**super().details(torch), "te_version": te_version(), "te_recipe": None,
                "first_last_layers_bf16": False}
        recipe = self.te_recipe()
        if recipe is not None and self.nvfp4:
            info["te_recipe"] = type(recipe).__name__
            info.update(self.nvfp4_kwargs)
            info["te_nvfp4_variant"] = self.nvfp4_warning  # None: TE's full recipe
        elif recipe is not None:
            info["te_recipe"] = type(recipe).__name__
            info["fp8_format"] = recipe.fp8_format.name
            for name in ("amax_history_len", "amax_compute_algo", "fp8_dpa"):
                if hasattr(recipe, name):
                    info[name] = getattr(recipe, name)
        info["attention"] = self.attention_info() or "torch SDPA (framework.attention_backend)"
        return info

    # ---- the model
    def build(self, torch, config, weights, device):
        from parallax.engines.torch.te_model import TELlama, to_te_state

        module = TELlama(import_te(), config, self.compute_dtype(torch), device, attention=self.attention)
        missing, unexpected = module.load_state_dict(to_te_state(config, weights), strict=False)
        missing = [k for k in missing if not k.endswith("_extra_state")]  # fp8 metadata, not weights
        if missing or unexpected:
            raise RuntimeError(f"TE model state does not match: missing {missing[:3]}, unexpected {unexpected[:3]}")
        return module

    def export(self, config, module, tensors: dict):
        from parallax.engines.torch.te_model import from_te_state

        return from_te_state(config, tensors)

    def compile(self, torch, module, mode: str):
        # Under DDP (several GPUs) ``module`` is the wrapper: the glue is the wrapped model's.
        getattr(module, "module", module).compile_glue(mode)
        return module

    def attention_info(self) -> str | None:
        if self.attention != "te":
            return None
        return ("TransformerEngine DotProductAttention (cuDNN fused attention)"
                + (", FP8 under fp8_dpa" if self.fp8_dpa else ""))

    def compile_info(self, cuda_graphs: bool = False) -> str:
        core = "TE's DotProductAttention" if self.attention == "te" else "SDPA"
        blocks = (f"TE modules and {core} inside the blocks' CUDA graphs (graph_scope), the embedding eager"
                  if cuda_graphs else f"TE modules, {core} and the embedding eager")
        return ("torch.compile of the pure-torch glue only: the head split + RoPE of every layer and the "
                f"final RMSNorm + lm_head + float32 cross-entropy; {blocks}")

    # ---- CUDA graphs (RunConfig.cuda_graphs)
    def graph(self, torch, module, sample_shape, device, attention) -> None:
        """Capture every block of the TE model, forward and backward, with TE's
        ``make_graphed_callables`` (TE's own capture: it runs the fp8 recipe's quantization
        inside the graphs and keeps the recipe's scaling state outside them), then make the
        model's training forwards replay them (``TELlama.use_graphed``).

        Captured under torch.autocast without its weight-cast cache (TE refuses the cache: a
        cached cast made during capture would be replayed stale) and under the engine's SDPA
        backend; fp8 weights are re-quantized at every replay (no weight caching: the optimizer
        changes them every step). The replay must run inside TE's fp8 autocast, which is what
        ``context`` gives every step: that is where the recipe's amax and scale bookkeeping
        (TE's global state, DelayedScaling's history) sees the graphed modules."""
        te = import_te()
        blocks = module.one_input_blocks(sample_shape[1])
        samples = tuple((torch.randn(sample_shape, dtype=self.compute_dtype(torch), device=device,
                                     requires_grad=True),) for _ in blocks)
        precision = graph_precision_arguments(te.make_graphed_callables, self.te_recipe())
        with torch.autocast(device.type, dtype=self.compute_dtype(torch), cache_enabled=False), attention():
            graphed = te.make_graphed_callables(blocks, samples, num_warmup_iters=GRAPH_WARMUP_ITERS, **precision)
        module.use_graphed(graphed, sample_shape)

    def graph_info(self, config) -> str:
        return (f"te.make_graphed_callables over the {config.n_layers} decoder blocks (forward and backward, "
                f"{GRAPH_WARMUP_ITERS} warm-up iterations, fp8 weights re-quantized every replay); embedding, "
                "head, loss, clipping and AdamW eager/compiled as without graphs; evaluation (no_grad) eager")

    def context(self, torch, device_type: str):
        recipe = self.te_recipe()
        if recipe is None:
            return super().context(torch, device_type)
        return self._fp8_context(torch, device_type, recipe)

    @contextlib.contextmanager
    def _fp8_context(self, torch, device_type: str, recipe):
        te = import_te()
        if hasattr(te, "autocast"):
            fp8 = te.autocast(enabled=True, recipe=recipe)
        else:  # TE releases before the rename
            fp8 = te.fp8_autocast(enabled=True, fp8_recipe=recipe)
        with super().context(torch, device_type), fp8:
            yield

    def quantized(self, module) -> list[str]:
        from parallax.engines.torch.te_model import TE_LINEAR_WEIGHTS

        return linear_weights(module, TE_LINEAR_WEIGHTS) if self.fp8 else []
