"""Which NVFP4 recipe runs where, with faked capabilities (nothing here needs a GPU or TE):
``--precision nvfp4`` per compute capability (registry.default, the one place), the one-line
refusal of te-nvfp4 below 10.0 naming the emulated recipe, TE's NVFP4BlockScaling variant per
capability (12.x: RHT and SR off, with a warning) and the TE recipe object built from a fake
``transformer_engine.common.recipe``. The native TE NVFP4 path is not yet run on hardware."""

from __future__ import annotations

import sys
import types

import pytest

from parallax.spec.config import RunConfig
from parallax.errors import ParallaxError
from parallax.plan import capability
from parallax.plan.resolve import resolve
from parallax.spec import registry
from parallax.engines.torch.recipes import te as te_hooks

A100, H200, B200, B300, RTX_PRO = "8.0", "9.0", "10.0", "10.3", "12.0"


@pytest.mark.parametrize("cc, torch_recipe", [(None, "emulated-nvfp4"), (A100, "emulated-nvfp4"),
                                               (H200, "emulated-nvfp4"), (B200, "te-nvfp4"), (B300, "te-nvfp4"),
                                               (RTX_PRO, "te-nvfp4")])
def test_precision_nvfp4_picks_per_compute_capability(cc, torch_recipe):
    assert registry.resolve("torch", "nvfp4", None, cc).name == torch_recipe
    assert registry.resolve("jax", "nvfp4", None, cc).name == "emulated-nvfp4"  # TE-JAX NVFP4 not wired
    assert registry.resolve("torch", "fp8", None, cc).name == "te-fp8-delayed"  # other formats: fixed
    assert registry.device_dependent("torch", "nvfp4") and not registry.device_dependent("jax", "nvfp4")


def fake_gpus(monkeypatch, cc):
    from parallax.plan import envinfo

    devices = [] if cc is None else [{"index": 0, "name": "fake", "compute_capability": cc}]
    monkeypatch.setattr(envinfo, "probe_gpus", lambda: {"devices": devices})


@pytest.mark.parametrize("cc, device, expected", [(B200, "auto", "te-nvfp4"), (H200, "cuda", "emulated-nvfp4"),
                                                   (B200, "cpu", "emulated-nvfp4"), (B200, "cuda:1", "emulated-nvfp4"),
                                                   (None, "auto", "emulated-nvfp4")])
def test_a_run_resolves_nvfp4_on_the_gpu_it_names(monkeypatch, cc, device, expected):
    fake_gpus(monkeypatch, cc)
    run = RunConfig.for_preset("tiny", framework="torch", precision="nvfp4", steps=3, warmup=1, device=device)
    assert resolve(run).run.recipe == expected  # cuda:1 names a GPU the fake probe does not have
    assert resolve(run).recipe.name == expected


def test_te_nvfp4_on_an_h200_is_one_line_naming_the_emulated_recipe():
    with pytest.raises(ParallaxError) as info:
        capability.require(registry.get("torch", "te-nvfp4"), "gpu", H200, "NVIDIA H200")
    assert str(info.value) == ("recipe 'te-nvfp4' needs compute capability 10.0+; NVIDIA H200 is 9.0 "
                               "(use --recipe emulated-nvfp4: what --precision nvfp4 picks here)")
    with pytest.raises(ParallaxError, match="A100 is 8.0 \\(use --recipe emulated-nvfp4"):
        capability.require(registry.get("torch", "te-nvfp4"), "gpu", A100, "A100")


PARAMS = registry.get("torch", "te-nvfp4").params


def test_b200_runs_the_full_te_recipe():
    kwargs, warning = te_hooks.nvfp4_variant(PARAMS, B200, "2.20.2")
    assert kwargs == {"disable_rht": False, "disable_stochastic_rounding": False, "disable_2d_quantization": False}
    assert warning is None


def test_rtx_pro_6000_turns_rht_and_sr_off_and_says_so():
    kwargs, warning = te_hooks.nvfp4_variant(PARAMS, RTX_PRO, "2.20.2")
    assert kwargs == {"disable_rht": True, "disable_stochastic_rounding": True, "disable_2d_quantization": False}
    assert warning == ("te-nvfp4 on compute capability 12.0: TransformerEngine supports NVFP4 training there only "
                       "without RHT and stochastic rounding (TE PR #3195), so this run sets disable_rht, "
                       "disable_stochastic_rounding (recorded as te_nvfp4_variant); the full recipe needs 10.x")


def test_rtx_pro_6000_refuses_te_before_2_19():
    with pytest.raises(ParallaxError, match="needs TransformerEngine 2.19\\+ \\(PR #3281: older releases trained "
                                            "NVFP4 on all-zero gradients there\\); found 2.18.0"):
        te_hooks.nvfp4_variant(PARAMS, RTX_PRO, "2.18.0")


def test_hopper_and_ampere_are_refused_naming_the_emulated_recipe():
    for cc in (H200, A100, None):
        with pytest.raises(ParallaxError, match="use --recipe emulated-nvfp4"):
            te_hooks.nvfp4_variant(PARAMS, cc, "2.20.2")


class FakeNVFP4BlockScaling:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@pytest.fixture
def fake_te(monkeypatch):
    """transformer_engine with just what the NVFP4 hooks touch: common.recipe.NVFP4BlockScaling,
    pytorch.is_nvfp4_available and a version."""
    te = types.ModuleType("transformer_engine")
    te.__version__ = "2.20.2"
    common = types.ModuleType("transformer_engine.common")
    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.NVFP4BlockScaling = FakeNVFP4BlockScaling
    pytorch = types.ModuleType("transformer_engine.pytorch")
    pytorch.is_nvfp4_available = lambda return_reason=False: (True, "")
    te.common, common.recipe, te.pytorch = common, recipe, pytorch
    for name, module in (("transformer_engine", te), ("transformer_engine.common", common),
                         ("transformer_engine.common.recipe", recipe), ("transformer_engine.pytorch", pytorch)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(te_hooks, "prefer_torch_cudnn", lambda: None)
    return pytorch


def fake_torch(cc: tuple[int, int]):
    cuda = types.SimpleNamespace(get_device_capability=lambda device: cc)
    return types.SimpleNamespace(cuda=cuda)


@pytest.mark.parametrize("cc, warns, disabled", [((10, 0), False, False), ((12, 0), True, True)])
def test_the_te_recipe_object_is_built_from_the_variant(fake_te, cc, warns, disabled):
    hooks = registry.get("torch", "te-nvfp4").load_hooks()
    device = types.SimpleNamespace(type="cuda")
    if warns:
        with pytest.warns(UserWarning, match="te-nvfp4 on compute capability 12.0"):
            hooks.check(fake_torch(cc), device)
    else:
        hooks.check(fake_torch(cc), device)
    recipe = hooks.te_recipe()
    assert isinstance(recipe, FakeNVFP4BlockScaling)
    assert recipe.kwargs == {"disable_rht": disabled, "disable_stochastic_rounding": disabled,
                             "disable_2d_quantization": False}
    details = hooks.details(fake_torch(cc))
    assert details["te_recipe"] == "FakeNVFP4BlockScaling" and details["disable_rht"] is disabled
    assert (details["te_nvfp4_variant"] is not None) is warns


def test_te_saying_no_is_refused_with_its_reason(fake_te):
    fake_te.is_nvfp4_available = lambda return_reason=False: (False, "needs sm_100")
    hooks = registry.get("torch", "te-nvfp4").load_hooks()
    with pytest.raises(ParallaxError, match="TransformerEngine cannot run NVFP4 on .*needs sm_100 "
                                            "\\(use --recipe emulated-nvfp4\\)"):
        hooks.check(fake_torch((10, 0)), types.SimpleNamespace(type="cuda"))
