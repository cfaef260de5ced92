"""Every fp8 and NVFP4 recipe on the GPU, one layer at a time, where the real low-precision GEMMs
run: its quantized layers, as its hooks build them, against the exact product of the same x, W
and dy, within the formats' bounds (tests/fixtures/format_bounds.py; the CPU twins and the
planted faults: tests/unit/test_layer_error_bounds.py). GEMMs on fp8 tensor cores accumulate with
~14 bits (format_bounds.HOPPER_FP8_ACC_U); bf16 GEMMs may reduce in bf16 (torch's default).

TransformerEngine runs only here: DelayedScaling at its first step (every scale 1: the amax
history starts at zero, the scales are updated after the forward and after the backward),
Float8CurrentScaling with each tensor's own amax; te-bf16's modules under the same check are the
planted recipe that does not quantize, E4M3 gradients (Format.E4M3 for HYBRID) the planted wrong
format. JAX cases run in a fresh interpreter each: XLA reads the recipe's flags once, when JAX
starts (the delayed Flax op has no fp8 without them), TE-JAX must load its cuDNN first."""

from __future__ import annotations

import pytest

from parallax.errors import installed

torch = pytest.importorskip("torch")

from fixtures import format_bounds as fb  # noqa: E402
from fixtures import recipe_layers as rl  # noqa: E402
from fixtures.gpu_trajectories import fresh_process  # noqa: E402
from parallax import quant  # noqa: E402
from parallax.plan.envinfo import package_version  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:The Fp8DotGeneralOp is deprecated:DeprecationWarning")]

HOPPER = fb.HOPPER_FP8_ACC_U


@pytest.fixture(scope="module", autouse=True)
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")


def show(measured):
    for m in measured:
        print(m)


def needs_te():
    if not installed("transformer_engine.pytorch"):  # found, not imported: TE loads its cuDNN only through the hooks
        pytest.skip("TransformerEngine is not installed")


def needs_te_jax():
    if package_version("transformer_engine_jax") is None:
        pytest.skip("TransformerEngine's JAX extension is not installed (gpu-carry bundle te-jax)")


# ---- torch


@pytest.mark.parametrize("recipe", ["torchao-fp8-tensorwise", "torchao-fp8-rowwise"])
def test_torchao_layers_are_within_the_format_bounds_on_the_gpu(recipe):
    pytest.importorskip("torchao", reason="torchao is not installed")
    measured = rl.torchao_measured(recipe, "cuda", acc=HOPPER)
    show(measured)
    fb.assert_within(measured)


@pytest.mark.parametrize("recipe", ["te-fp8-delayed", "te-fp8-current"])
def test_te_layers_are_within_the_format_bounds(recipe):
    needs_te()
    measured = rl.te_torch_measured(recipe)
    show(measured)
    assert len(measured) == 8  # qkv y, dW; wo y, dX, dW; feed_forward y, dW1, dW2
    fb.assert_within(measured)


def test_te_check_catches_te_bf16_in_place_of_fp8():
    needs_te()
    measured = rl.te_torch_measured("te-bf16", expect="te-fp8-delayed")
    show(measured)
    assert "low" in fb.failed(measured)


def test_te_check_catches_gradients_in_e4m3(monkeypatch):
    """Format.E4M3 where the recipe says HYBRID: the output gradients (1e-5..1e-2) cast to E4M3
    at scale 1, whose smallest subnormal is 2^-9, instead of E5M2 (2^-16)."""
    needs_te()
    from transformer_engine.common import recipe as te_recipes

    from parallax.engines.torch.recipes.te import TransformerEngineHooks

    def e4m3_recipe(self):
        return te_recipes.DelayedScaling(fp8_format=te_recipes.Format.E4M3, amax_history_len=1024,
                                          amax_compute_algo="max")

    monkeypatch.setattr(TransformerEngineHooks, "te_recipe", e4m3_recipe)
    measured = rl.te_torch_measured("te-fp8-delayed")
    show(measured)
    assert fb.failed([m for m in measured if m.what.split()[-1].startswith("d")]) & {"bound", "high"}
    assert not fb.problems([m for m in measured if m.what.endswith(" y")])


def test_torch_emulated_nvfp4_layers_are_within_the_format_bounds_on_cuda(monkeypatch):
    """The emulated recipe's GEMMs are ordinary bf16 cuBLAS GEMMs, which accumulate in fp32; torch
    lets cuBLAS round split-K partial sums to bf16 by default, a rounding the format has nothing
    to do with and whose count the caller cannot know (a bf16 accumulation bound, K·2⁻⁸, is
    vacuous from K = 256 on: the first H200 run divided by zero there). So the check asks for
    fp32 reductions and bounds the GEMM with the fp32 accumulator; the quantization it checks is
    the same bits either way."""
    import torch

    if not quant.available_bindings()["cuda"]:
        pytest.fail("parallax._native lacks the CUDA kernels on a GPU machine", pytrace=False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False)
    measured = rl.nvfp4_torch_measured("cuda", acc=fb.FP32_U)
    show(measured)
    fb.assert_within(measured)


# ---- JAX, each in a fresh interpreter


def jax_case(run_recipe: str, call: str) -> dict:
    """Check ``run_recipe`` with the engine (which sets its XLA flags and TE's cuDNN before JAX
    starts), then evaluate ``call`` (a recipe_layers function of ``device``) in that process."""
    return fresh_process(f"""
        from fixtures import format_bounds as fb, recipe_layers as rl
        from fixtures.gpu_trajectories import gpu_jax_run
        from parallax.engines import get_engine
        from parallax.plan.resolve import planned
        plan = get_engine("jax").check(planned(gpu_jax_run({run_recipe!r})))
        device = plan.handles["device"]
        measured = {call}
        result = dict(problems=fb.problems(measured), failed=sorted(fb.failed(measured)),
                      lines=[str(m) for m in measured], native=plan.precision.native)
    """)


@pytest.mark.parametrize("recipe", ["flax-fp8-delayed", "flax-fp8-direct"])
def test_flax_fp8_layers_are_within_the_format_bounds_on_the_gpu(recipe):
    result = jax_case(recipe, f"rl.flax_measured({recipe!r}, steps=2, device=device, acc=fb.HOPPER_FP8_ACC_U)")
    print("\n".join(result["lines"]))
    assert result["native"] is True
    assert result["problems"] == []


def test_te_jax_layers_are_within_the_format_bounds():
    needs_te_jax()
    result = jax_case("te-fp8-delayed", "rl.te_jax_measured('te-fp8-delayed', device)")
    print("\n".join(result["lines"]))
    assert len(result["lines"]) == 8 and result["problems"] == []


def test_te_jax_check_catches_te_bf16_in_place_of_fp8():
    needs_te_jax()
    result = jax_case("te-bf16", "rl.te_jax_measured('te-bf16', device)")
    print("\n".join(result["lines"]))
    assert "low" in result["failed"]


def test_jax_emulated_nvfp4_layers_are_within_the_format_bounds_on_the_gpu():
    result = jax_case("emulated-nvfp4", "rl.nvfp4_jax_measured(device=device, acc=fb.BF16.u)")
    print("\n".join(result["lines"]))
    assert len(result["lines"]) == 3 * 7 and result["problems"] == []
