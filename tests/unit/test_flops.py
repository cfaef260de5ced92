"""Parameter counts and FLOPs/token, checked against values worked out by hand.

llama-100m: V=10,000, d=768, L=12, heads=12 (head_dim 64), d_ff=2048.
  embeddings   2 · V·d                 = 15,360,000   (input embedding + untied lm_head)
  per layer    4·d² + 3·d·d_ff + 2·d   =  7,079,424   → × 12 = 84,953,088
  final norm   d                       =        768
  total P                              = 100,313,856
"""

from __future__ import annotations

import pytest

from parallax.spec.config import PRESETS
from parallax.spec.flops import (
    Denominators,
    achieved_tflops,
    flops_per_token,
    mfu,
    mfu_table,
)

LLAMA = PRESETS["llama-100m"]
TINY = PRESETS["tiny"]


def test_param_counts():
    assert LLAMA.param_count() == 100_313_856
    # tiny: 2·10,000·64 + 2·(4·64² + 3·64·128 + 2·64) + 64
    assert TINY.param_count() == 1_362_240


def test_param_shapes_cover_every_weight_once():
    shapes = LLAMA.param_shapes()
    assert len(shapes) == 2 + 12 * 9 + 1
    assert shapes["tok_embeddings"] == (10_000, 768)
    assert shapes["lm_head"] == (768, 10_000)
    assert shapes["layers.11.w_down"] == (2048, 768)


# spec:         6·P + 12·L·S·d                = 601,883,136 + 110,592·S
# conventional: 6·(P − V·d) + 12·L·S·d        = 555,803,136 + 110,592·S
# maxtext:      3·(L·(mlp + qkv + proj) + 2·d·V) + 3·L·(4·S·h·hd / 2)
#               = 3·(12·(9,437,184 + 3,538,944 + 1,179,648) + 15,360,000) + 55,296·S
#               = 555,687,936 + 55,296·S
@pytest.mark.parametrize(
    "seq_len, spec, conventional, maxtext",
    [
        (1024, 715_129_344, 669_049_344, 612_311_040),
        (512, 658_506_240, 612_426_240, 583_999_488),
        (2048, 828_375_552, 782_295_552, 668_934_144),
    ],
)
def test_flops_per_token_llama_100m(seq_len, spec, conventional, maxtext):
    assert flops_per_token(LLAMA, seq_len) == {
        "spec": spec,
        "conventional": conventional,
        "maxtext": maxtext,
    }


def test_flops_per_token_tiny():
    # spec: 6·1,362,240 + 12·2·128·64; conventional drops 6·10,000·64
    got = flops_per_token(TINY, 128)
    assert got["spec"] == 8_173_440 + 196_608
    assert got["conventional"] == 8_173_440 - 3_840_000 + 196_608
    # maxtext: 3·(2·(2·128·64·3 + 2·64·12·16 + 2·64·4·16) + 2·64·10,000) + 3·2·(4·128·4·16/2)
    assert got["maxtext"] == 3 * (2 * (49_152 + 24_576 + 8_192) + 1_280_000) + 6 * 16_384


def test_achieved_tflops():
    # 1,000,000 tokens/s × 715,129,344 FLOP/token = 715.129344 TFLOP/s
    assert achieved_tflops(1_000_000, 715_129_344) == pytest.approx(715.129344, rel=1e-12)


def test_mfu_is_none_without_an_honest_peak():
    assert mfu(500.0, None) is None
    assert mfu(500.0, 0.0) is None
    assert mfu(494.5, 989.0) == pytest.approx(0.5, rel=1e-12)


def test_mfu_table_against_each_denominator():
    table = mfu_table(1_000_000, LLAMA, 1024, Denominators(989.0, 989.0, 790.0))
    spec = table["spec"]
    assert spec["flops_per_token"] == 715_129_344
    assert spec["mfu_precision_peak"] == pytest.approx(715.129344 / 989.0, rel=1e-12)
    assert spec["mfu_measured_ceiling"] == pytest.approx(715.129344 / 790.0, rel=1e-12)
    assert table["maxtext"]["tflops"] == pytest.approx(612.31104, rel=1e-12)


def test_mfu_table_with_unknown_peaks_gives_none():
    table = mfu_table(1_000_000, LLAMA, 1024, Denominators(None, None, None))
    for row in table.values():
        assert row["mfu_precision_peak"] is None
        assert row["mfu_bf16_peak"] is None
        assert row["mfu_measured_ceiling"] is None
        assert row["tflops"] > 0


# llama-100m-hd128: 6 heads of 128 in place of 12 of 64. Every weight is [d, H·hd] or [H·hd, d] with
# H·hd = 768 either way, and every accounting counts attention as 12·L·S·d or 4·S·H·hd: the same
# numbers. What changes is the shape of the attention kernels alone (FP8 attention needs hd 128 on Hopper).
def test_llama_100m_hd128_has_llama_100m_weights_and_flops():
    hd128 = PRESETS["llama-100m-hd128"]
    assert (hd128.n_heads, hd128.head_dim, hd128.d_model) == (6, 128, 768)
    assert hd128.param_shapes() == LLAMA.param_shapes()
    assert hd128.param_count() == 100_313_856
    for seq_len in (512, 1024):
        assert flops_per_token(hd128, seq_len) == flops_per_token(LLAMA, seq_len)
    assert flops_per_token(hd128, 1024) == {"spec": 715_129_344, "conventional": 669_049_344, "maxtext": 612_311_040}
