"""parallax.spec.step_work: the FLOP split and the byte model, exact for llama-100m at batch 32 ×
seq 1024 (T = 32,768 tokens), worked out by hand in the comments."""

from __future__ import annotations

import pytest

from parallax.spec import registry, step_work
from parallax.spec.config import PRESETS
from parallax.spec.flops import flops_per_token_spec

MODEL = PRESETS["llama-100m"]
T = 32 * 1024
# ΣK·N of one block: qkv 768·2304 + attn_out 768·768 + gate_up 768·4096 + down 2048·768
BLOCK_KN = 1_769_472 + 589_824 + 3_145_728 + 1_572_864  # 7,077,888
# T·K + K·N + T·N of the four block linears: 102,432,768 + 50,921,472 + 162,529,280 + 93,847,552
BLOCK_ELEMENTS = 409_731_072


def work(framework: str, recipe: str) -> step_work.StepWork:
    return step_work.step_work(MODEL, 32, 1024, registry.get(framework, recipe))


def test_the_linears_are_the_native_probes_gemm_shapes():
    gpu = pytest.importorskip("parallax.native.gpu")
    shapes = gpu.gemm_shapes(MODEL, 32, 1024)
    forward = {s["linear"]: (s["k"], s["n"], s["count"]) for s in shapes if s["pass"] == "forward"}
    assert {lin.name: (lin.k, lin.n, lin.count) for lin in step_work.linears(MODEL)} == forward
    assert sum(lin.k * lin.n for lin in step_work.linears(MODEL) if lin.block) == BLOCK_KN


def test_linear_formats():
    assert step_work.linear_formats(MODEL, registry.get("torch", "te-fp8-delayed")) == {
        "qkv": "fp8", "attn_out": "fp8", "gate_up": "fp8", "down": "fp8", "lm_head": "bf16"}
    assert set(step_work.linear_formats(MODEL, registry.get("jax", "emulated-nvfp4")).values()) == {"bf16"}


def test_gemm_flops_of_a_bf16_recipe():
    # 6·T·12·7,077,888 = 16,698,832,846,848 in the blocks, 6·T·768·10,000 = 1,509,949,440,000 in lm_head
    assert work("torch", "bf16").gemm_flops == {"bf16": 16_698_832_846_848 + 1_509_949_440_000}


@pytest.mark.parametrize("framework,recipe", [("torch", "te-fp8-delayed"), ("jax", "te-fp8-delayed"),
                                              ("jax", "flax-fp8-delayed"), ("torch", "torchao-fp8-rowwise")])
def test_gemm_flops_of_fp8_recipes_keep_lm_head_in_bf16(framework, recipe):
    assert work(framework, recipe).gemm_flops == {"fp8": 16_698_832_846_848, "bf16": 1_509_949_440_000}


def test_emulated_nvfp4_multiplies_in_bf16_and_native_nvfp4_in_fp4():
    assert work("torch", "emulated-nvfp4").gemm_flops == {"bf16": 18_208_782_286_848}
    assert work("jax", "emulated-nvfp4").gemm_flops == {"bf16": 18_208_782_286_848}
    assert work("torch", "te-nvfp4").gemm_flops == {"nvfp4": 16_698_832_846_848, "bf16": 1_509_949_440_000}


def test_the_gemm_flops_are_the_spec_accounting_less_embedding_and_norms():
    norms = MODEL.n_layers * 2 * MODEL.d_model + MODEL.d_model
    spec = flops_per_token_spec(MODEL, 1024) * T
    attention = work("torch", "bf16")
    rest = spec - attention.attention_forward_flops - attention.attention_backward_flops
    assert sum(attention.gemm_flops.values()) == rest - 6 * T * (MODEL.vocab_size * MODEL.d_model + norms)


def test_attention_flops_split_the_spec_accounting():
    w = work("jax", "bf16")
    # 4·12·32·1024²·768 forward, twice that backward; together 12·L·S·d per token
    assert (w.attention_forward_flops, w.attention_backward_flops) == (1_236_950_581_248, 2_473_901_162_496)
    assert w.attention_forward_flops + w.attention_backward_flops == 12 * 12 * 1024 * 768 * T


def test_optimizer_bytes():
    # 32 bytes per parameter × 100,313,856
    assert work("torch", "bf16").optimizer_bytes == 3_210_043_392


def test_elementwise_bytes():
    # T·d = 25,165,824, T·f = 67,108,864, T·V = 327,680,000:
    # 2·(12·(30·T·d + 8·T·f) + 5·T·d + 2·T·V) = 2·(15,502,147,584 + 125,829,120 + 655,360,000)
    assert work("torch", "bf16").elementwise_bytes == 32_566_673_408


@pytest.mark.parametrize("framework,recipe,expected", [
    ("torch", "bf16", 0),
    ("torch", "te-bf16", 0),
    ("torch", "te-fp8-delayed", 12 * BLOCK_ELEMENTS * (2 + 2 * 1)),  # 19,667,091,456
    ("jax", "flax-fp8-delayed", 19_667_091_456),
    ("torch", "te-nvfp4", 12 * BLOCK_ELEMENTS * (2 + 2 * 0.5625)),  # 15,364,915,200
    # emulated: 10 of 12 blocks quantized (the last 2 keep bf16), each operand written back in bf16
    ("torch", "emulated-nvfp4", 10 * BLOCK_ELEMENTS * (2 + 2 * 2)),  # 24,583,864,320
    ("jax", "emulated-nvfp4-all", 12 * BLOCK_ELEMENTS * 6),
])
def test_quantize_bytes(framework, recipe, expected):
    assert work(framework, recipe).quantize_bytes == expected
