"""Which MX recipe runs where, with faked capabilities and a fake TransformerEngine (nothing here
needs a GPU or TE): --precision mxfp8 / mxfp4 pick the emulated recipes on every device; te-mxfp8 is
refused in one line before any GPU work on Hopper and on 12.x, builds TE's MXFP8BlockScaling(E4M3)
on 10.x, and passes TE's own refusal on. The native TE MXFP8 path is not yet run on hardware."""

from __future__ import annotations

import sys
import types

import pytest

from parallax.errors import ParallaxError
from parallax.spec import registry
from parallax.engines.torch.recipes import te as te_hooks


@pytest.mark.parametrize("cc", [None, "8.0", "9.0", "10.0", "12.0"])
def test_precision_mx_picks_the_emulated_recipes_everywhere(cc):
    for framework in ("torch", "jax"):
        assert registry.resolve(framework, "mxfp8", None, cc).name == "emulated-mxfp8"
        assert registry.resolve(framework, "mxfp4", None, cc).name == "emulated-mxfp4"
    assert registry.resolve("maxtext", "mxfp8", None, cc).name == "te_mxfp8"


class FakeMXFP8BlockScaling:
    def __init__(self, **kwargs):
        self.kwargs, self.fp8_format = kwargs, kwargs["fp8_format"]


@pytest.fixture
def fake_te(monkeypatch):
    te = types.ModuleType("transformer_engine")
    te.__version__ = "2.20.2"
    common = types.ModuleType("transformer_engine.common")
    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.MXFP8BlockScaling = FakeMXFP8BlockScaling
    recipe.Format = types.SimpleNamespace(E4M3=types.SimpleNamespace(name="E4M3"))
    pytorch = types.ModuleType("transformer_engine.pytorch")
    pytorch.is_mxfp8_available = lambda return_reason=False: (True, "")
    te.common, common.recipe, te.pytorch = common, recipe, pytorch
    for name, module in (("transformer_engine", te), ("transformer_engine.common", common),
                         ("transformer_engine.common.recipe", recipe), ("transformer_engine.pytorch", pytorch)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(te_hooks, "prefer_torch_cudnn", lambda: None)
    return pytorch


def fake_torch(cc):
    return types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_capability=lambda device: cc))


CUDA = types.SimpleNamespace(type="cuda")


@pytest.mark.parametrize("cc", [(9, 0), (12, 0), (12, 1)])
def test_te_mxfp8_is_refused_off_10x_in_one_line(fake_te, cc):
    hooks = registry.get("torch", "te-mxfp8").load_hooks()
    with pytest.raises(ParallaxError) as err:
        hooks.check(fake_torch(cc), CUDA)
    assert str(err.value) == (f"recipe 'te-mxfp8' needs compute capability 10.x (Blackwell B200/B300; TE refuses "
                              f"MXFP8 on 12.0+); this device is {cc[0]}.{cc[1]}: use --recipe emulated-mxfp8")


def test_te_mxfp8_on_10x_builds_mxfp8_block_scaling(fake_te):
    hooks = registry.get("torch", "te-mxfp8").load_hooks()
    hooks.check(fake_torch((10, 0)), CUDA)
    recipe = hooks.te_recipe()
    assert isinstance(recipe, FakeMXFP8BlockScaling) and recipe.fp8_format.name == "E4M3"
    fake_te.is_mxfp8_available = lambda return_reason=False: (False, "needs sm_100")
    with pytest.raises(ParallaxError, match="cannot run MXFP8 on .*needs sm_100 \\(use --recipe emulated-mxfp8\\)"):
        hooks.check(fake_torch((10, 3)), CUDA)
