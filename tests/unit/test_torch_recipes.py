"""The torch fp8 recipes on the CPU: TransformerEngine's weight layout (no TE needed), hook
resolution, the missing-TE error, torchao's conversion and torchao float8 training steps."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from parallax.config import OptimConfig, RunConfig, get_preset  # noqa: E402
from parallax.data.synthetic import synthetic_batch  # noqa: E402
from parallax.engines.base import NullProgress  # noqa: E402
from parallax.engines.torch import convert, te_model  # noqa: E402
from parallax.engines.torch.engine import TorchEngine, Trainer  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402
from parallax.precision import registry  # noqa: E402
from parallax.weights import init_weights  # noqa: E402

TINY = get_preset("tiny")
TORCHAO_RECIPES = ("torchao-fp8-tensorwise", "torchao-fp8-rowwise")


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # the CI machine is shared
    yield
    torch.set_num_threads(previous)


def tiny_run(**changes) -> RunConfig:
    base = dict(model="tiny", batch_size=4, seq_len=32, steps=6, warmup=1, compile=False, device="cpu")
    return RunConfig(**{**base, **changes})


class RepeatedBatch:
    description = "repeated"

    def __init__(self, batch):
        self.batch = batch

    def __iter__(self):
        while True:
            yield self.batch

    def eval_batches(self):
        return [self.batch]

    def close(self):
        pass


# ---- TransformerEngine: the layout, without TE

def test_te_state_round_trips_the_canonical_weights_exactly():
    weights = init_weights(TINY, seed=3)
    state = te_model.to_te_state(TINY, weights)
    d, ff = TINY.d_model, TINY.d_ff
    assert state["layers.0.attention.qkv.weight"].shape == (3 * d, d)  # TE stores [out, in]
    assert state["layers.0.attention.qkv.layer_norm_weight"].shape == (d,)
    assert state["layers.1.feed_forward.fc1_weight"].shape == (2 * ff, d)
    assert state["layers.1.feed_forward.fc2_weight"].shape == (d, ff)
    assert len(state) == 3 + 6 * TINY.n_layers  # per block: 2 norm gains, qkv, wo, fc1, fc2
    state["layers.0.attention.qkv._extra_state"] = torch.zeros(4)  # TE's fp8 metadata: ignored
    back = te_model.from_te_state(TINY, state)
    assert set(back) == set(weights)
    for name, value in weights.items():
        assert back[name].dtype == np.float32
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_te_fused_weights_are_the_plain_models_fused_weights():
    # fc1 = [w_gate; w_up]: TE's swiglu gates with the first half (te_model.py says where TE says so).
    weights = init_weights(TINY, seed=0)
    te, plain = te_model.to_te_state(TINY, weights), convert.to_torch_state(TINY, weights)
    for i in range(TINY.n_layers):
        p = f"layers.{i}."
        pairs = [("attention.qkv.weight", "attention.wqkv.weight"), ("attention.wo.weight", "attention.wo.weight"),
                 ("feed_forward.fc1_weight", "feed_forward.w_gate_up.weight"),
                 ("feed_forward.fc2_weight", "feed_forward.w_down.weight"),
                 ("attention.qkv.layer_norm_weight", "attention_norm.weight"),
                 ("feed_forward.layer_norm_weight", "ffn_norm.weight")]
        for te_name, plain_name in pairs:
            torch.testing.assert_close(te[p + te_name], plain[p + plain_name], rtol=0, atol=0)
    np.testing.assert_array_equal(te["layers.0.feed_forward.fc1_weight"][:TINY.d_ff].numpy(),
                                  weights["layers.0.w_gate"].T)


def test_te_fp8_shape_checks_name_the_bad_size():
    hooks = registry.get("torch", "te-fp8-delayed").load_hooks()
    with pytest.raises(ParallaxError, match=r"batch·seq divisible by 8; 3·10 = 30 is not"):
        hooks.check_shapes(tiny_run(batch_size=3, seq_len=10))
    hooks.check_shapes(tiny_run(batch_size=1, seq_len=8))


def test_te_bf16_quantizes_nothing():
    assert registry.get("torch", "te-bf16").load_hooks().quantized(object()) == []


def test_missing_te_is_one_line_naming_the_extra_through_the_cli(tmp_path):
    # A fresh interpreter where TransformerEngine cannot be imported, as on a machine without it.
    script = ("import sys; sys.modules['transformer_engine'] = None\n"
              "from parallax.cli import main\n"
              "sys.exit(main(['train', '--framework', 'torch', '--recipe', 'te-fp8-delayed', '--model', 'tiny',"
              " '--batch-size', '2', '--seq-len', '16', '--steps', '3', '--warmup', '1', '--device', 'cpu',"
              f" '--output-dir', {str(tmp_path / 'run')!r}]))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("parallax: error: ") and "pip install 'slm-parallax[te]'" in lines[0]
    assert not (tmp_path / "run" / "run.json").exists()
